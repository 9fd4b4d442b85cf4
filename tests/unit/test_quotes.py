"""PROBE-S4 C-3: the line a crash verdict quotes is masked (redact.py) wherever the verdict goes, and
/status holds it only for a reader who may read the unit's journal (sinks/peers.py may_read_journal);
anyone else gets the verdict with the line withheld, and the document says so."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from fakes import INV, UNIT, Journal, MetricsFixture, capture_bar, up_to_capture
from phasewatch.judge import Judge
from phasewatch.output.render import WITHHELD, status_document, verdict_json, without_quote
from phasewatch.sinks.http import PEER_UID, phasewatch_app
from phasewatch.sinks.peers import JOURNAL_GROUPS, groups_of, may_read_journal
from phasewatch.stages.s5_act.respond import Memory, UnitStatus, respond

SECRETS = ("hf_SECRETTOKEN9876", "hunter2")
CREDENTIALED = ("OSError: 401 Client Error: Unauthorized for url: "
                "https://alice:hf_SECRETTOKEN9876@huggingface.co/api/models/org/private-model (password=hunter2)")
MASKED = ("OSError: 401 Client Error: Unauthorized for url: "
          "https://alice:***@huggingface.co/api/models/org/private-model (password=***)")


def crash_with_credentials(j: Journal) -> None:
    up_to_capture(j)
    j.wait(2)
    j.log("TP3", "Scheduler hit an exception: Traceback (most recent call last):")
    j.raw("TP3", '  File "/usr/lib/python3/dist-packages/huggingface_hub/utils/_http.py", line 409, in hf_raise')
    j.raw("TP3", "    raise _format(HfHubHTTPError, str(e), response) from e")
    j.raw("TP3", CREDENTIALED)
    j.wait(120)  # past the wait for a specific cause


def test_the_crash_verdict_quotes_the_line_masked_and_keeps_the_quote_apart() -> None:
    journal = Journal()
    crash_with_credentials(journal)
    (verdict,) = journal.verdicts()
    assert verdict.kind == "crashed" and verdict.rank == "TP3"
    assert verdict.quote == MASKED
    assert f": {MASKED}" in verdict.message
    assert not any(secret in verdict.message for secret in SECRETS)


def test_alerts_hooks_and_evidence_carry_the_masked_message_only() -> None:
    journal = Journal()
    crash_with_credentials(journal)
    verdicts = journal.verdicts()
    config = replace(journal.config, actions={"crashed": ("evidence", "alert", "hook:page", "restart")})
    response = respond(verdicts, Memory(), UnitStatus("activating", "start", INV), journal.now, config)
    assert {a.kind for a in response.actions} == {"evidence", "alert", "hook", "restart"}
    for action in response.actions:
        assert MASKED in action.message and not any(s in action.message for s in SECRETS)
    assert next(a for a in response.actions if a.kind == "restart").quote == MASKED


def test_withholding_replaces_the_quote_and_nothing_else() -> None:
    assert without_quote("u: TP3 crashed (oom): line x (unit result exit-code)", "line x") == \
        f"u: TP3 crashed (oom): {WITHHELD} (unit result exit-code)"
    assert without_quote("u: TP3 stalled", None) == "u: TP3 stalled"
    assert without_quote("u: TP3 crashed: ", "") == "u: TP3 crashed: "  # an empty quote is no quote


def test_a_verdict_without_quotes_keeps_kind_rank_cause_and_what_the_message_says_around_the_line() -> None:
    journal = Journal()
    crash_with_credentials(journal)
    (verdict,) = journal.verdicts()
    shown, withheld = verdict_json(verdict), verdict_json(verdict, quotes=False)
    assert shown["message"] == verdict.message
    assert withheld["message"] == verdict.message.replace(MASKED, WITHHELD)
    assert "Unauthorized" not in withheld["message"] and withheld["message"].startswith(f"{UNIT}: TP3 crashed")
    assert {k: v for k, v in withheld.items() if k != "message"} == {k: v for k, v in shown.items() if k != "message"}


def test_the_status_document_without_quotes_says_so_and_drops_the_bars_descriptions() -> None:
    m = MetricsFixture()
    up_to_capture(m.journal)
    m.journal.wait(1)
    capture_bar(m.journal, 3)
    judgement = Judge(m.journal.config, m.journal.pipeline).judge(m.journal.now).current
    shown = status_document(judgement, m.journal.now, m.journal.config)
    withheld = status_document(judgement, m.journal.now, m.journal.config, quotes=False)
    assert shown["log_text_withheld"] is False and withheld["log_text_withheld"] is True
    bars = [r["progress"] for r in shown["invocation"]["ranks"].values() if r["progress"]]
    assert bars and all(bar["desc"] for bar in bars)
    assert all(r["progress"] is None or r["progress"]["desc"] is None
               for r in withheld["invocation"]["ranks"].values())


def _exporter_after_a_crash_restarted() -> MetricsFixture:
    m = MetricsFixture()
    crash_with_credentials(m.journal)
    m.publish()
    verdict = m.journal.verdicts()[0]
    # what the actor keeps after its restart (sinks/acting/actor.py), shown as previous_startup
    m.exporter.set_why({"previous_startup": {"invocation_id": "an-older-one", "verdict": "crashed",
                                             "message": verdict.message, "evidence": None, "quote": verdict.quote,
                                             "outcome": "restarted by phasewatch"}})
    return m


def test_the_exporters_status_withholds_the_verdicts_and_the_previous_start_ups_quotes() -> None:
    m = _exporter_after_a_crash_restarted()
    shown, withheld = m.exporter.status(), m.exporter.status(quotes=False)
    assert MASKED in json.dumps(shown)
    assert "Unauthorized" not in json.dumps(withheld) and WITHHELD in withheld["invocation"]["verdicts"][0]["message"]
    assert WITHHELD in withheld["previous_startup"]["message"]
    assert withheld["previous_startup"]["verdict"] == "crashed" and withheld["log_text_withheld"] is True
    assert "quote" not in shown["previous_startup"] and "quote" not in withheld["previous_startup"]
    assert not any(secret in json.dumps(doc) for doc in (shown, withheld) for secret in SECRETS)


def _get_status(app: Any, environ: dict[str, Any]) -> dict[str, Any]:
    answered: list[str] = []
    body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/status", **environ},
                        lambda status, headers, exc_info=None: answered.append(status)))
    assert answered == ["200 OK"]
    return json.loads(body)


def test_the_app_shows_quotes_only_to_a_peer_that_may_read_the_journal() -> None:
    m = _exporter_after_a_crash_restarted()
    asked: list[int | None] = []

    def may_read(uid: int | None) -> bool:
        asked.append(uid)
        return uid == 0

    app = phasewatch_app(m.exporter, may_read)
    assert MASKED in json.dumps(_get_status(app, {PEER_UID: 0}))
    for environ in ({PEER_UID: 65534}, {PEER_UID: None}, {}):  # a user, a remote peer, not said
        document = _get_status(app, environ)
        assert "Unauthorized" not in json.dumps(document) and document["log_text_withheld"] is True
    assert asked == [0, 65534, None, None]


def test_metrics_never_ask_who_the_peer_is() -> None:
    m = MetricsFixture()
    app = phasewatch_app(m.exporter, lambda uid: pytest.fail("asked for /metrics"))
    body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", PEER_UID: 65534},
                        lambda status, headers, exc_info=None: None))
    assert b"phasewatch_unit_ready" in body


@pytest.mark.parametrize(("uid", "groups", "may"), [
    (0, frozenset(), True),                               # root
    (990, frozenset(), True),                             # the daemon's own user
    (1000, frozenset({"users", "systemd-journal"}), True),
    (1001, frozenset({"adm"}), True),                     # Debian's journal ACL
    (1002, frozenset({"users", "sudo", "wheel"}), False),  # neither group on Debian
    (65534, frozenset({"nogroup"}), False),
    (None, frozenset({"systemd-journal"}), False),        # a remote peer, or a socket not found
])
def test_who_may_read_the_journal(uid: int | None, groups: frozenset[str], may: bool) -> None:
    assert may_read_journal(uid, 990, lambda _: groups) is may


def test_the_groups_come_from_the_user_database() -> None:
    assert "root" in groups_of(0)
    assert groups_of(2_000_000_000) == frozenset()  # no such user: no group
    assert JOURNAL_GROUPS == {"systemd-journal", "adm"}
