"""The typed vocabulary: verdict kinds, outcomes, message ids, and the rule attributes the tracker
and the policy read from the profile instead of naming rules in code."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from phasewatch.config.load import VERDICT_KINDS
from phasewatch.errors import ProfileError
from phasewatch.profile.load import builtin_engines, load_builtin_profile, parse_profile, parse_rule
from phasewatch.records import FAILED_STARTUP, STUCK, EventKind, JournalRecord, Outcome, VerdictKind
from phasewatch.stages.s1_read.lines import LineSplitter
from phasewatch.stages.s2_interpret.events import EventMapper
from phasewatch.stages.s4_judge import policy


def test_kinds_and_outcomes_are_the_strings_they_always_were() -> None:
    assert VERDICT_KINDS == ("stalled", "straggler", "rank_died", "crashed", "unhealthy", "lines_lost",
                            "waiting_for_node", "gpu_fault")
    assert policy.OUTCOMES == ("starting", "ready", "serving", "stalled", "crashed", "stopped")
    assert f"{VerdictKind.RANK_DIED}" == "rank_died" and Outcome.CRASHED == "crashed"
    assert STUCK < FAILED_STARTUP and VerdictKind.UNHEALTHY not in FAILED_STARTUP


def test_the_profile_names_the_rules_that_prove_life_and_the_per_request_ones() -> None:
    profile = load_builtin_profile("sglang")
    assert profile.proof_of_life_rules == {"decode_batch", "prefill_batch"}
    assert profile.per_request_rules == {"uncaught_exception", "logged_traceback", "traceback_frames", "cuda_error"}


@pytest.mark.parametrize("flag", ["proof_of_life", "per_request", "record_head"])
def test_a_rule_flag_must_be_a_boolean(flag: str) -> None:
    with pytest.raises(ProfileError, match=rf"^patterns\[0\]\.{flag}: expected true or false, got 'yes'$"):
        parse_rule({"id": "x", "match": "x", "event": "activity", flag: "yes"}, "patterns[0]")


def test_an_echo_is_its_own_flag_on_the_event() -> None:
    profile = load_builtin_profile("sglang")
    record = JournalRecord("[2026-11-29 08:00:00] Received sigquit from a child process. It usually means "
                           "the child failed.", 1_800_000_000.0, pid=1, invocation_id="inv")
    lines = LineSplitter().feed(record)
    events = [e for line in lines for e in EventMapper(profile).map_line(line)]
    [fatal] = [e for e in events if e.kind is EventKind.FATAL]
    assert fatal.echo and fatal.rule == "parent_sigquit"


def test_an_override_keeps_what_the_rule_meant_unless_it_says() -> None:
    profile = load_builtin_profile("sglang")
    kept = profile.with_overrides([{"id": "decode_batch", "event": "activity", "match": "^Decode"}])
    assert "decode_batch" in kept.proof_of_life_rules
    dropped = profile.with_overrides([{"id": "cuda_error", "event": "fatal", "match": "x", "per_request": False}])
    assert "cuda_error" not in dropped.per_request_rules
    frames = profile.with_overrides([{"id": "traceback_frames", "event": "fatal", "match": "^ +File"}])
    assert next(r for r in frames.rules if r.id == "traceback_frames").record_head


@pytest.mark.parametrize("engine", builtin_engines())
def test_a_builtin_profile_is_what_safe_load_reads(engine: str) -> None:
    """load_builtin_profile reads the package's profiles with libyaml's loader (start-up time): the
    same documents, so the same profiles, as PyYAML's own safe_load."""
    text = resources.files("phasewatch").joinpath("profile", "profiles", f"{engine}.yaml").read_text("utf-8")
    assert yaml.__with_libyaml__  # (the PyYAML of the venv and of Debian both have it)
    assert yaml.load(text, Loader=yaml.CSafeLoader) == yaml.safe_load(text)
    assert load_builtin_profile(engine) == parse_profile(yaml.safe_load(text), f"{engine}.yaml")


def test_rank_labels_sort_main_first_then_by_their_numbers() -> None:
    from phasewatch.ranks import rank_sort_key, tp_index

    labels = ["DP1 TP0", "TP10", "main", "TP2", "DP0 TP3", "TP" + "9" * 30]
    assert sorted(labels, key=rank_sort_key) == ["main", "DP0 TP3", "DP1 TP0", "TP2", "TP10", "TP" + "9" * 30]
    assert (tp_index("DP1 TP3"), tp_index("TP0"), tp_index("main")) == (3, 0, None)
