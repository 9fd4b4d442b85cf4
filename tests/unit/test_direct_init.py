"""records.direct_init: the records built once per line get an __init__ that fills their __dict__ at
once; it must build exactly what the dataclass's own __init__ builds, and leave them frozen."""

from __future__ import annotations

import dataclasses
import inspect
import pickle

import pytest

from phasewatch.prefixes import Prefix
from phasewatch.records import Event, EventKind, JournalRecord, Line, LineKind, Phase, direct_init

CASES = [
    (JournalRecord, (b"x",), {}),
    (JournalRecord, ("text", 1.5, 7, "inv"), {"line_break": "eof", "extra": {"K": "v"}}),
    (Line, ("[TP0] hi", "hi", LineKind.RECORD, "TP0", 2.0), {}),
    (Line, ("a", "b", LineKind.CONTINUATION, None, None, 3, "inv", True, None, 9), {"process_pid": 4}),
    (Event, (EventKind.ACTIVITY, 1.0), {}),
    (Event, (EventKind.PHASE_BEGIN, 1.0, "TP1", Phase.SERVING), {"rule": "r", "record_id": 3, "args": {"a": "1"}}),
    (Prefix, (0, 5, "TP0", 1.0), {}),
    (Prefix, (0, 9, None, None), {"time_only": "12:00:00", "header": "INFO x", "anonymous": True}),
]


@pytest.mark.parametrize(("cls", "args", "kwargs"), CASES)
def test_builds_what_the_dataclass_init_builds(cls: type, args: tuple, kwargs: dict) -> None:
    made = cls(*args, **kwargs)
    reference = object.__new__(cls)
    cls.__init__.__wrapped__(reference, *args, **kwargs)
    assert vars(made) == vars(reference)
    assert list(vars(made)) == [f.name for f in dataclasses.fields(cls)]
    assert made == reference and repr(made) == repr(reference)
    if not any(isinstance(value, dict) for value in vars(made).values()):
        assert hash(made) == hash(reference)
    assert pickle.loads(pickle.dumps(made)) == made


@pytest.mark.parametrize("cls", [JournalRecord, Line, Event, Prefix])
def test_same_signature_and_still_frozen(cls: type) -> None:
    assert str(inspect.signature(cls.__init__)) == str(inspect.signature(cls.__init__.__wrapped__))
    made = next(cls(*a, **k) for c, a, k in CASES if c is cls)
    first = dataclasses.fields(cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, first, None)
    assert dataclasses.replace(made) == made


def test_factories_give_each_record_its_own() -> None:
    one, two = Event(EventKind.ACTIVITY, 1.0), Event(EventKind.ACTIVITY, 1.0)
    assert one.args == {} and one.args is not two.args
    assert JournalRecord(b"x").extra is not JournalRecord(b"x").extra


def test_missing_argument_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        Event()  # type: ignore[call-arg]


def test_refuses_what_it_cannot_build() -> None:
    @dataclasses.dataclass(frozen=True)
    class Later:
        a: int
        b: int = dataclasses.field(init=False, default=0)

    @dataclasses.dataclass(frozen=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            pass

    for cls in (Later, Checked):
        with pytest.raises(TypeError, match="direct_init"):
            direct_init(cls)
