"""Who crashed and why, as the failure lines tell it: the ranks the lines name healthy, waiting or
to blame (crashfacts.py), the record that shows the failure, the phase it died in and the line
that tells it best. Pure; policy.py's `crashed_verdict` makes the verdict from these."""

from __future__ import annotations

import re
from dataclasses import replace

from ...profile.load import Profile
from ...records import MAIN, PHASE_NAMES
from ..s2_interpret.crashfacts import (
    FRAME_RE,
    CrashFacts,
    ServerRanks,
    crash_facts,
    mentions_in,
    traceback_phase,
)
from ..s3_track.snapshot import FatalView, InvocationView, RankView

GENERIC_CAUSES = frozenset({"python_exception", "killed", "exit_code"})
EXCEPTION_LINE_RE = re.compile(r"^(?:[a-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit)\b")
# Under a traceback's frames, its last line names the exception whatever its class is called
# (KeyboardInterrupt, torch._dynamo.exc.Unsupported, triton's OutOfResources).
RAISED_LINE_RE = re.compile(r"^(?:[a-z_]\w*\.)*[A-Z]\w*(?::\s|\s*$)")


def failing_fatal(inv: InvocationView, bystanders: frozenset[str] = frozenset()) -> FatalView | None:
    """The rank whose own line shows the exception, not the parent's SIGQUIT line that came first,
    nor a rank the failure lines show healthy or waiting on the others (`bystanders`)."""
    own = [f for f in inv.fatals if not f.echo and f.rank not in (None, MAIN) and f.rank not in bystanders]
    if own:
        # A rank's own prefixed record beats torch's "[rankN]:" C++ lines about it.
        return next((f for f in own if f.prefixed), own[0])
    main = [f for f in inv.fatals if not f.echo]
    if main:
        return main[0]
    return inv.fatals[0] if inv.fatals else None


def rank_facts(inv: InvocationView) -> CrashFacts:
    """Healthy, waiting and culprit ranks as the failure lines name them (crashfacts.py)."""
    fatals = [(f.rank, f.texts) for f in inv.fatals]
    server = inv.server
    layout = None
    if server is not None and server.plausible:
        every = replace(server, nnodes=1, node_rank=0)
        layout = ServerRanks(server.tp, server.dp, server.pp, server.dp_attention, server.expected_ranks(),
                             every.expected_ranks() if every.plausible else ())
    known = [r.rank for r in inv.ranks if r.seen]
    return crash_facts(fatals, layout, known, _behind_the_reporters(inv, fatals))


def progress_key(rank: RankView) -> tuple[int, bool]:
    return (PHASE_NAMES.index(rank.phase.value), rank.phase_ended)


def _behind_the_reporters(inv: InvocationView, fatals: list[tuple[str | None, tuple[str, ...]]]) -> list[str]:
    """Seen scheduler ranks behind every rank that reported a failure (without a layout, the ranks
    that never got as far as the healthy ones are the ones to blame)."""
    reporters = [v for r, _ in fatals if r not in (None, MAIN) and (v := inv.rank(r)) is not None and v.seen]
    if not reporters:
        return []
    least = min(progress_key(v) for v in reporters)
    return [r.rank for r in inv.scheduler_ranks if r.seen and progress_key(r) < least]


def find_culprit(inv: InvocationView, facts: CrashFacts) -> tuple[FatalView | None, str | None]:
    """The failure record to show, and the rank the verdict names."""
    if not facts.known:
        fatal = failing_fatal(inv)
        # No culprit line at all: PID 1 says the unit failed, which is the main process's doing.
        return fatal, (fatal.rank if fatal is not None else MAIN)
    if facts.culprits:
        rank = facts.culprits[0]
        own = next((f for f in inv.fatals if f.rank == rank and not f.echo), None)
        naming = next((f for f in inv.fatals if any(mentions_in(t, f.rank) for t in f.texts)), None)
        return own or naming or failing_fatal(inv), rank
    own = failing_fatal(inv, facts.bystanders())
    if own is not None and own.rank not in (None, MAIN) and own.rank not in facts.bystanders():
        return own, own.rank  # a rank with its own exception, while the others waited on it
    # Only healthy or waiting ranks speak: the culprit is not in the journal.
    return failing_fatal(inv), None


def crash_phase(inv: InvocationView, culprit: FatalView | None, rank: str | None,
                 facts: CrashFacts) -> str | None:
    """The deepest traceback frame that names a phase, else the rank's phase; for a culprit the
    journal does not show, the furthest phase of the ranks that reported."""
    if culprit is not None and (culprit.rank == rank or rank is None):
        died_in = traceback_phase(culprit.texts)
        if died_in is not None and (rank is not None or not facts.known):
            return died_in.value
    view = inv.rank(rank) if rank is not None else None
    if view is not None and (view.seen or not facts.known):
        return view.phase.value
    if facts.phase is not None:
        return facts.phase.value
    if facts.known:
        seen = [r for r in inv.scheduler_ranks if r.seen]
        return max(seen, key=progress_key).phase.value if seen else None
    return None


def telling_line(fatal: FatalView, cause: str | None, profile: Profile) -> str:
    """The line that best says what happened: the one showing the cause, else the exception line."""
    pattern = next((c.pattern for c in profile.causes if c.id == cause), None)
    if pattern is not None and cause not in GENERIC_CAUSES:
        found = next((t for t in fatal.texts if pattern.search(t)), None)
        if found:
            return found.strip()
    exception = next((t for t in reversed(fatal.texts) if EXCEPTION_LINE_RE.match(t)), None)
    if exception is None and any(FRAME_RE.match(t) for t in fatal.texts):
        exception = next((t for t in reversed(fatal.texts) if RAISED_LINE_RE.match(t)), None)
    return (exception or fatal.texts[0]).strip()
