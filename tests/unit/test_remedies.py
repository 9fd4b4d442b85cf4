"""The remedies stage (stages/s4_judge/remedies.py) and the profiles' remedies: tables: every cause class has
one; every remedy applies when its condition holds and its facts are known, and not otherwise; the
facts come from the server's arguments, the unit and the failing lines, as generated here."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasewatch.config.load import Config
from phasewatch.errors import ProfileError
from phasewatch.pipeline import Pipeline
from phasewatch.profile.load import load_builtin_profile
from phasewatch.profile.remedy_table import RemedyRule, parse_remedies
from phasewatch.records import JournalRecord
from phasewatch.stages.s4_judge.remedies import NO_UNIT, UnitSettings, argv_arguments, choose, line_facts

ENGINES = ("sglang", "vllm")
RULES = [(engine, rule) for engine in ENGINES for rule in load_builtin_profile(engine).remedies]
IDS = [f"{engine}-{rule.id}" for engine, rule in RULES]
OTHER_CAUSE = "no_such_cause"


def _situation(rule: RemedyRule) -> tuple[str | None, str | None, dict[str, str]]:
    """A cause, phase and the fewest facts under which `rule`'s condition holds."""
    cause = sorted(rule.causes)[0] if rule.causes else None
    phase = sorted(rule.phases)[0] if rule.phases else "weight_load"
    facts = {name: "7" for name in rule.needs}
    return cause, phase, facts


@pytest.mark.parametrize("engine", ENGINES)
def test_every_cause_class_has_a_remedy(engine: str) -> None:
    profile = load_builtin_profile(engine)
    causes = {c.id for c in profile.causes} | {"exit_code"}
    answered = {c for r in profile.remedies if r.kind == "crashed" for c in r.causes}
    assert causes <= answered, f"{engine}: no remedy for {sorted(causes - answered)}"
    assert answered <= causes, f"{engine}: remedies for causes the profile lacks: {sorted(answered - causes)}"


@pytest.mark.parametrize(("engine", "rule"), RULES, ids=IDS)
def test_remedy_applies_when_its_condition_holds(engine: str, rule: RemedyRule) -> None:
    cause, phase, facts = _situation(rule)
    found = choose([rule], rule.kind, cause, phase, facts)
    assert found is not None and found.id == rule.id
    assert "{" not in found.text and found.text
    assert found.arguments == {name: "7" for name in rule.arguments}
    # Reachable in its table: no remedy before it answers the same situation.
    table = load_builtin_profile(engine).remedies
    chosen = choose(table, rule.kind, cause, phase, facts)
    assert chosen is not None and chosen.id == rule.id, f"{rule.id} is shadowed by {chosen and chosen.id}"


@pytest.mark.parametrize(("engine", "rule"), RULES, ids=IDS)
def test_remedy_does_not_apply_when_its_condition_does_not(engine: str, rule: RemedyRule) -> None:
    cause, phase, facts = _situation(rule)
    for need in rule.needs:  # a fact it names unknown, or false
        assert choose([rule], rule.kind, cause, phase, {k: v for k, v in facts.items() if k != need}) is None
        assert choose([rule], rule.kind, cause, phase, {**facts, need: "False"}) is None
    for fact in rule.absent:  # a fact that rules it out
        assert choose([rule], rule.kind, cause, phase, {**facts, fact: "yes"}) is None
    other_kind = "straggler" if rule.kind != "straggler" else "stalled"
    assert choose([rule], other_kind, cause, phase, facts) is None
    if rule.causes:
        assert choose([rule], rule.kind, OTHER_CAUSE, phase, facts) is None
    if rule.phases:
        assert choose([rule], rule.kind, cause, "serving" if "serving" not in rule.phases else "launch", facts) is None


def test_a_table_that_names_an_unknown_fact_or_phase_is_refused() -> None:
    with pytest.raises(ProfileError, match="unknown fact"):
        parse_remedies([{"id": "x", "cause": "oom", "text": "lower {mem_fraction}"}], "t.yaml")
    with pytest.raises(ProfileError, match="phase"):
        parse_remedies([{"id": "x", "cause": "oom", "phase": "nowhere", "text": "t"}], "t.yaml")
    with pytest.raises(ProfileError, match="duplicate"):
        parse_remedies([{"id": "x", "text": "a"}, {"id": "x", "text": "b"}], "t.yaml")
    with pytest.raises(ProfileError, match="unknown key"):
        parse_remedies([{"id": "x", "text": "a", "when": "always"}], "t.yaml")


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.sampled_from(["mem-fraction-static", "cuda-graph-max-bs", "gpu-memory-utilization", "port"]),
       st.from_regex(r"[0-9][0-9.]{0,5}", fullmatch=True), st.booleans(), st.booleans())
def test_argv_gives_the_flags_in_server_args_spelling(flag: str, value: str, equals: bool, trailing: bool) -> None:
    words = ["/usr/bin/python3", "-m", "sglang.launch_server", *([f"--{flag}={value}"] if equals
                                                                 else [f"--{flag}", value])]
    if trailing:
        words.append("--enable-torch-compile")
    found = argv_arguments(words)
    assert found[flag.replace("-", "_")] == value
    assert found.get("enable_torch_compile") == ("True" if trailing else None)


def test_vllm_serve_positional_model_and_aliases() -> None:
    found = argv_arguments(["/opt/venv/bin/vllm", "serve", "/models/llama", "--tensor-parallel-size", "4",
                            "--enforce-eager"])
    assert found == {"model_path": "/models/llama", "tp_size": "4", "enforce_eager": "True"}


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(1, 999), st.integers(0, 99), st.integers(1, 999), st.sampled_from(["GiB", "MiB"]))
def test_the_oom_line_numbers_are_read(tried: int, free: int, total: int, unit: str) -> None:
    line = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {tried}.00 {unit}. GPU 3 has a total "
            f"capacity of {total}.19 GiB of which {free}.50 {unit} is free. Including non-PyTorch memory")
    facts = line_facts([line])
    assert facts["line.tried"] == f"{tried}.00 {unit}"
    assert facts["line.free"] == f"{free}.50 {unit}"
    assert facts["line.total"] == f"{total}.19 GiB"


SGLANG_ARGS = ("[2026-03-01 10:00:00] server_args=ServerArgs(model_path='/models/kimi', tp_size={tp}, "
               "mem_fraction_static={mem}, cuda_graph_max_bs={bs}, port=30000, dist_init_addr=None)")
CAPTURE_OOM = ["[2026-03-01 10:05:00 TP{r}] Capture cuda graph begin. This can take up to several minutes.",
               "[2026-03-01 10:05:09 TP{r}] Scheduler hit an exception: Traceback (most recent call last):",
               "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate {tried} GiB. GPU {r} has"
               " a total capacity of 79.11 GiB of which {free} GiB is free."]


def _replayed(lines: list[str], engine: str = "sglang", unit: UnitSettings | None = None,
              now: float = 1772359509.0 + 5) -> list:  # type: ignore[type-arg]
    pipeline = Pipeline(Config(unit="x.service", engine=engine))
    for line in lines:
        pipeline.feed(JournalRecord(line, None, pid=10, invocation_id="inv"), None)
    return [v for j in pipeline.judge(now, unit=unit or NO_UNIT) for v in j.verdicts]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.integers(0, 7), st.sampled_from(["0.7", "0.85", "0.88", "0.9"]), st.integers(1, 512),
       st.sampled_from(["1.26", "2.00", "12.50"]), st.sampled_from(["0.12", "0.50", "1.00"]))
def test_capture_oom_remedy_names_the_servers_values(rank: int, mem: str, bs: int, tried: str, free: str) -> None:
    lines = [SGLANG_ARGS.format(tp=8, mem=mem, bs=bs), *(x.format(r=rank, tried=tried, free=free) for x in CAPTURE_OOM)]
    crash = next(v for v in _replayed(lines) if v.kind == "crashed")
    assert crash.remedy is not None and crash.remedy.id == "oom_capture"
    assert f"--cuda-graph-max-bs ({bs} now)" in crash.remedy.text
    assert f"--mem-fraction-static ({mem} now)" in crash.remedy.text
    assert f"needed {tried} GiB, {free} GiB were free" in crash.remedy.text
    assert crash.remedy.arguments == {"cuda_graph_max_bs": str(bs), "mem_fraction_static": mem}


def test_no_remedy_names_a_fact_it_does_not_know() -> None:
    """The same OOM without server_args: no argument's value is known, so none is named; the remedy
    that names none is given."""
    lines = [x.format(r=0, tried="2.00", free="0.50") for x in CAPTURE_OOM]
    crash = next(v for v in _replayed(lines) if v.kind == "crashed")
    assert crash.cause == "oom" and crash.remedy is not None
    assert crash.remedy.id == "oom_no_arguments" and not crash.remedy.arguments and " now)" not in crash.remedy.text


def test_the_units_execstart_fills_in_what_the_log_does_not_say() -> None:
    lines = [x.format(r=0, tried="2.00", free="0.50") for x in CAPTURE_OOM]
    unit = UnitSettings(("/usr/bin/python3", "-m", "sglang.launch_server", "--mem-fraction-static", "0.91",
                         "--cuda-graph-max-bs", "64"))
    crash = next(v for v in _replayed(lines, unit=unit) if v.kind == "crashed")
    assert crash.remedy is not None
    assert "(64 now)" in crash.remedy.text and "(0.91 now)" in crash.remedy.text


def test_private_devices_of_the_unit_is_named_for_no_gpu() -> None:
    lines = ["[2026-03-01 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
             "RuntimeError: No CUDA GPUs are available"]
    hidden = UnitSettings(properties={"PrivateDevices": "yes"})
    crash = next(v for v in _replayed(lines, unit=hidden) if v.kind == "crashed")
    assert crash.remedy is not None and "PrivateDevices=yes" in crash.remedy.text
    crash = next(v for v in _replayed(lines) if v.kind == "crashed")
    assert crash.remedy is not None and crash.remedy.id == "no_gpu"  # the line alone: what to check
    other = [lines[0], "ValueError: rope_scaling must be a dictionary"]
    crash = next(v for v in _replayed(other, unit=hidden) if v.kind == "crashed")
    assert crash.remedy is not None and "PrivateDevices" not in crash.remedy.text  # not every error is the unit's


@pytest.mark.parametrize("engine", ENGINES)
def test_every_cause_has_a_row_in_the_runbooks_remedies(engine: str) -> None:
    from pathlib import Path

    runbook = (Path(__file__).resolve().parents[2] / "docs" / "runbook.md").read_text("utf-8")
    table = runbook.split("### Remedies by cause", 1)[1].split("\n<a id=", 1)[0]
    causes = {c.id for c in load_builtin_profile(engine).causes} | {"exit_code"}
    missing = sorted(c for c in causes if f"`{c}`" not in table)
    assert not missing, f"docs/runbook.md#remedies-by-cause has no row for {missing}"


@pytest.mark.parametrize("engine", ENGINES)
def test_every_crash_cause_has_a_remedy_in_every_phase_with_no_fact_known(engine: str) -> None:
    """A window of a log (a paste, a journalctl -n) shows the failing lines without the server's
    arguments: each specific cause still gets a remedy, one that names no fact."""
    from phasewatch.records import PHASE_NAMES

    profile = load_builtin_profile(engine)
    missing = [(cause.id, phase) for cause in profile.causes for phase in PHASE_NAMES
               if choose(profile.remedies, "crashed", cause.id, phase, {"rank": "TP3", "phase": phase}) is None]
    assert not missing, f"{engine}: no remedy without facts for {missing}"


def test_a_remedy_names_the_evidence_that_exists_or_what_to_run() -> None:
    """Issue 36: "the evidence file" is named by its path when evidence was written, else replaced by
    what to run to get the same facts; a text without it is left alone."""
    from phasewatch.stages.s4_judge.remedies import naming_evidence

    text = "TP3 makes no progress in cuda_graph_capture: its stack in the evidence file shows where it waits"
    path = "/var/lib/phasewatch/evidence/sglang-kimi.service-0123-stalled.txt"
    assert naming_evidence(text, path) == text.replace("the evidence file", path)
    without = naming_evidence(text, None)
    assert "evidence file" not in without and "py-spy dump --pid" in without
    assert naming_evidence("raise --mem-fraction-static", None) == "raise --mem-fraction-static"
