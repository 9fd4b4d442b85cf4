"""Lines that differ only in their ids (request ids, hashes, UUIDs): `mask_ids` and `id_blind`
(stages/s2_interpret/pattern_needles.py) let the mapper's memo and the fast path's plans remember
them by one text, and a rule that tells hex apart still sees each line's own."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fastpath_compare import assert_runs_agree, assert_same, run_in_runs, runs_of, shifts_of
from fastpath_journals import journal
from phasewatch.config.load import Config
from phasewatch.pipeline import Pipeline
from phasewatch.profile.load import Profile, load_builtin_profile
from phasewatch.records import JournalRecord
from phasewatch.stages.s1_read.lines import LineSplitter, opens_block
from phasewatch.stages.s2_interpret.events import EventMapper
from phasewatch.stages.s2_interpret.pattern_needles import _ID_RUN, _zeros, id_blind, id_needles, mask_ids
from phasewatch.stages.s3_track.fastpath import _BLOCK_WORDS, FastPath

DIGITS = bytes.maketrans(b"123456789", b"000000000")
# Rules of a config's `patterns:` that tell hex apart, beside the built-in ones that cannot.
HEX_TELLING = [
    ("all_digit_id", r"request_id=\d+\b"),
    ("letter_id", r"request_id=[a-z]"),
    ("beef", r"[0-9a-f]{4}beef"),
    ("dead_any_case", r"(?i)=DEAD"),
    ("uuid_tail", r"-[0-9]{12}\b"),
    ("port_then_id", r":\d+ - \S+ trace=[0-9a-f]+0\b"),
    ("seven_then_letter", r"key=[0-9]{7}[a-f]"),  # (digit-blind: a line without ids has a digit plan)
]
PROFILE = load_builtin_profile("sglang").with_overrides(
    [{"id": rule_id, "event": "activity", "match": pattern} for rule_id, pattern in HEX_TELLING])
# The same rules as fatal ones: a line one of them matches is no sign of life, and where the fast
# path took it for one, the verdict would show it.
LOUD = load_builtin_profile("sglang").with_overrides(
    [{"id": rule_id, "event": "fatal", "match": pattern} for rule_id, pattern in HEX_TELLING])


@pytest.mark.parametrize(("pattern", "blind"), [
    (r"^Decode batch[.,\s\[]", True),
    (r'"POST /\S+ HTTP', True),
    (r"(?:^|\s)INFO:\s+(?:Started server process|Waiting for application startup)", True),
    (r"id=\w+ ok", True),
    (r"[^\"]+x", True),
    *((pattern, False) for _, pattern in HEX_TELLING),
    (r"deadbeef", False),
    (r"(?i)A\b", False),
    (r"\bcafe\b", False),  # not fenced: an id may run into it
    (r"x-abcd-x", False),  # four hex in a row: an id's piece
    (r"bs=[1-4]", False),  # not digit-blind either
])
def test_which_patterns_cannot_tell_hex_apart(pattern: str, blind: bool) -> None:
    assert id_blind(re.compile(pattern)) is blind


def test_mask_ids_masks_the_hex_of_ids_only() -> None:
    masked = b"rid=0a00f0000c00ef00 u=000e0000-e00b-00d0-a000-000000000000 cafe facade dead-beef 0000000000"
    assert mask_ids(masked) == (b"rid=0000000000000000 u=00000000-0000-0000-0000-000000000000 cafe facade "
                                b"dead-beef 0000000000")
    plain = b"Decode batch, #running-req: 00, #token: 00000"
    assert mask_ids(plain) is plain


@given(st.binary(max_size=120) | st.lists(st.sampled_from([b"0", b"a", b"f", b"-", b"g", b" ", b"0000", b"beef",
                                                           b"\xff"]), max_size=60).map(b"".join))
@example(b"u=dead-beef-cafe ok")
@example(b"0a0-00b00-0c00-0d000")
@example(b"x 00000000 y")
@settings(max_examples=400, deadline=None)
def test_the_quick_look_for_ids_finds_every_run_the_search_finds(text: bytes) -> None:
    assert mask_ids(text) == _ID_RUN.sub(_zeros, text)
    if _ID_RUN.search(text) is None:
        assert mask_ids(text) is text


def test_a_needle_an_id_may_run_into_is_trimmed_or_unknown() -> None:
    assert id_needles(("INFO:", '"POST /', " scheduler ")) == (b"INFO:", b'"POST /', b" scheduler ")
    assert id_needles(("abc_x1e", "-end")) == (b"_x", b"n")
    assert id_needles(("deadbeef",)) is None
    assert id_needles(("x0123abcdx",)) is None


def hex_id(draw: st.DrawFn, width: int) -> str:
    return "".join(draw(st.lists(st.sampled_from("0123456789abcdef" + "0123456789" * 2), min_size=width,
                                 max_size=width)))


@st.composite
def id_line(draw: st.DrawFn) -> str:
    rid = hex_id(draw, draw(st.sampled_from([8, 12, 32])))
    uuid = "-".join(hex_id(draw, w) for w in (8, 4, 4, 4, 12))
    port = draw(st.integers(1, 65_000))
    return draw(st.sampled_from([
        f'INFO:     10.0.3.17:{port} - "POST /v1/chat/completions HTTP/1.1" 200 OK request_id={rid}',
        f"INFO:     10.0.3.17:{port} - {uuid} trace={rid}",
        f"request_id={rid} =DEAD{rid[:4]} u={uuid}",
        f"Decode batch, #running-req: {port % 40}, rid={rid}",
        f"Scheduler hit an exception: {rid}",
        f"{rid}beef {uuid}",
    ]))


@settings(max_examples=120, deadline=None)
@given(st.lists(id_line(), min_size=2, max_size=20))
def test_lines_alike_but_for_their_ids_match_as_a_fresh_search_finds(texts: list[str]) -> None:
    """A mapper that has seen lines with the same masked ids answers each line as a search of every rule
    does: fails when a rule that tells hex apart is remembered by the masked text."""
    warm = EventMapper(PROFILE)
    for text in texts + texts[::-1]:
        [line] = LineSplitter().feed(JournalRecord(text, 0.0, pid=1, invocation_id="inv"))
        searched = tuple(r for r in warm._line_rules if r.pattern.search(line.message))
        assert warm._matching(line.message) == searched, text
        for rule in warm.ids.blind_rules:  # and each rule it remembers by the masked text answers alike
            twin = mask_ids(text.encode().translate(DIGITS)).decode()
            assert bool(rule.pattern.search(text)) is bool(rule.pattern.search(twin)), (rule.id, text)


@settings(max_examples=60, deadline=None)
@given(st.lists(id_line(), min_size=1, max_size=30))
def test_the_fast_path_agrees_on_lines_with_ids(texts: list[str]) -> None:
    assert_same(journal([(None, text, "line") for text in texts] + [("TP0", text, "line") for text in texts],
                        [0.001]))


def test_access_lines_with_their_own_request_ids_are_planned_once() -> None:
    """The access-heavy bench mix: every line's digit-masked text is new, its masked ids the same."""
    texts = [f'INFO:     10.0.{n % 250}.{n % 7}:{40000 + n} - "POST /v1/chat/completions HTTP/1.1" 200 OK '
             f"request_id={(n * 0x9E3779B97F4A7C15) & ((1 << 128) - 1):032x}" for n in range(200)]
    records = journal([(None, text, "line") for text in texts], [0.001])
    pipeline = Pipeline(Config(unit="sglang.service"), default_year=2026)
    for record in records:
        pipeline.feed(record, None)
    assert pipeline.fast is not None and pipeline.fast.taken == len(texts)
    assert len(pipeline.fast._id_plans or {}) == 3  # one a width of the address's third number
    assert assert_same(records) == len(texts)


# Lines of one template but for their ids, digits (and, now and then, their ids' widths): the C reader
# joins consecutive ones of a writer into runs (`ids`: alike once their ids are masked).
ID_TEMPLATES = [
    'INFO:     10.0.3.{n}:{port} - "POST /v1/chat/completions HTTP/1.1" {code} OK request_id={rid}',
    "INFO:     10.0.3.17:{port} - {uuid} trace={rid}",
    "request_id={rid} =DEAD{head} u={uuid}",
    "Decode batch, #running-req: {n}, rid={rid}",
    "request {rid} failed:",  # opens a block
    "{rid}beef {uuid}",
    "{rid} {code}",
    "key={rid} ok",
]
ACCESS = 'INFO:     10.0.3.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK key={key} ok'



@st.composite
def id_run(draw: st.DrawFn) -> list[tuple[str | None, str, str]]:
    template = draw(st.sampled_from(ID_TEMPLATES))
    writer = draw(st.sampled_from([None, "TP0"]))
    width = draw(st.sampled_from([8, 12, 32]))
    lines = []
    for _ in range(draw(st.integers(2, 10))):
        rid = hex_id(draw, draw(st.sampled_from([width, width, width, 4, 9])))
        uuid = "-".join(hex_id(draw, w) for w in (8, 4, 4, 4, 12))
        lines.append((writer, template.format(n=draw(st.integers(1, 250)), port=draw(st.integers(40_000, 40_099)),
                                              code=draw(st.sampled_from([200, 200, 500])), rid=rid, uuid=uuid,
                                              head=rid[:4]), "line"))
    return lines


@settings(max_examples=80, deadline=None)
@given(st.lists(id_run(), min_size=1, max_size=8), st.sampled_from([LOUD, PROFILE, load_builtin_profile("sglang")]))
# a line without ids (a plan by its digit-masked text), then one with: its own plan, looked up
@example([[(None, "key=00000000 ok", "line"), (None, "key=0000000a ok", "line")]], LOUD)
@example([[(None, ACCESS.format(key="-"), "line"), (None, ACCESS.format(key="00000000"), "line"),
           (None, ACCESS.format(key="0000000a"), "line")]], LOUD)
def test_runs_of_lines_alike_but_for_their_ids_agree_with_line_by_line(runs: list[list[tuple[str | None, str, str]]],
                                                                     profile: Profile) -> None:
    """Each line of a run joined by its ids is asked what only it can say (the rules that tell hex or
    digits apart, whether it opens a block): a run taken at once leaves what line by line leaves."""
    assert_runs_agree(journal([line for lines in runs for line in lines], [0.001, 0.25]), profile)


def test_access_lines_with_their_own_request_ids_come_as_one_run_taken_at_once() -> None:
    """The access-heavy bench mix in the C reader's runs: one `apply` per run and per width of the
    address, each line's own rules searched, and a status other than 200 taken by the full path."""
    texts = [f'INFO:     10.0.{n % 250}.{n % 7}:{40000 + n} - "POST /v1/chat/completions HTTP/1.1" '
             f"{500 if n == 150 else 200} OK request_id={(n * 0x9E3779B97F4A7C15) & ((1 << 128) - 1):032x}"
             for n in range(300)]
    records = journal([(None, text, "line") for text in texts], [0.001])
    [run_lines] = [entry for entry in runs_of(records) if isinstance(entry, list) and len(entry) > 100]
    shifts, ids = shifts_of([r.message for r in run_lines])
    assert len(run_lines) >= 300 and len(ids) >= 290 and len(shifts) <= 5
    applied = []
    original = FastPath.apply

    def counted(self: FastPath, *args: object, **kwargs: object) -> int:
        applied.append(1)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FastPath, "apply", counted)
        assert assert_runs_agree(records, load_builtin_profile("sglang"))[1] >= 300
        applied.clear()
        grouped = run_in_runs(records)
    assert grouped.taken >= len(records) - 40
    assert len(applied) < 40  # (one a run, then again where the address's width or the status changes)


@given(st.lists(st.sampled_from(["deadbeef", "0a1b2c3d4e", "-", "cafe", ":", " ", "  ", "Exception in ASGI application",
                                 "Traceback (most recent call last):", "hit an exception:", 'File "x.py", line ', "12",
                                 "3ab", ", in f", "ok", "\t"]), max_size=12).map("".join))
@example('File "x.py", line 1234abcd, in f')
@settings(max_examples=400, deadline=None)
def test_whether_a_line_opens_a_block_is_that_of_its_masked_ids_unless_it_holds_a_block_word(text: str) -> None:
    """What lets the fast path ask `opens_block` once per `mask_ids` text: its answer for a text without
    `_BLOCK_WORDS` is decided by the text's end, which no id reaches into."""
    key = mask_ids(text.encode().translate(DIGITS))
    if not any(word in key for word in _BLOCK_WORDS):
        assert opens_block(text) == opens_block(key.decode())
