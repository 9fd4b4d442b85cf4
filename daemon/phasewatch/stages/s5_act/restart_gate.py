"""Stage 5: the restart gate. Pure: whether a restart the budget would allow is refused anyway, and
the words that say why.

- A broken GPU: a `gpu_fault` verdict of the start-up whose recommended action is reset_gpu, reboot
  or drain (not the application's own fault) holds every restart back, as an operator's hold does,
  until a person acts (a configured hook may run instead: nothing resets a GPU by itself).
- The same failure again: each start-up that ends in a verdict phasewatch restarts for gets a
  fingerprint (its phase, cause, culprit rank and, for a crash, the exception's class); a restart
  after `restart_budget.same_failure` start-ups in a row with one fingerprint is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from ...records import VerdictKind
from ..s4_judge.gpu_fault import blocking_faults
from ..s4_judge.verdict import Verdict

GPU_FAULT = "gpu_fault"
SAME_FAILURE = "same_failure"
KEPT_PRINTS = 16  # failed start-ups' fingerprints remembered
EXCEPTION_RE = re.compile(r"\b((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt))\b")


@dataclass(frozen=True)
class Refusal:
    why: str  # GPU_FAULT or SAME_FAILURE: the `phasewatch_restarts_not_made` label
    words: str  # `not restarting: ...`, for the alert and `status`
    remedy: str | None = None


def fingerprint(verdict: Verdict) -> str:
    """`stalled in cuda_graph_capture (no_progress) on TP3`; a crash adds its exception's class;
    a GPU fault names the GPU's cause."""
    parts = [f"{str(verdict.kind)} in {verdict.phase or 'an unknown phase'}"]
    if verdict.cause:
        parts.append(f"({verdict.cause})")
    if verdict.rank:
        parts.append(f"on {verdict.rank}")
    exception = EXCEPTION_RE.search(verdict.quote or "") if verdict.kind is VerdictKind.CRASHED else None
    if exception is not None:
        parts.append(exception.group(1))
    return " ".join(parts)


def with_print(prints: tuple[tuple[str, str], ...], invocation: str, print_: str) -> tuple[tuple[str, str], ...]:
    """The failed start-ups' fingerprints with this one's (once per start-up), the last KEPT_PRINTS."""
    if any(i == invocation for i, _ in prints):
        return prints
    return (*prints, (invocation, print_))[-KEPT_PRINTS:]


def same_in_a_row(prints: Sequence[tuple[str, str]]) -> int:
    """How many of the last start-ups in a row failed with the last one's fingerprint."""
    if not prints:
        return 0
    last = prints[-1][1]
    count = 0
    for _, print_ in reversed(prints):
        if print_ != last:
            break
        count += 1
    return count


def refusal(verdicts: Iterable[Verdict], prints: Sequence[tuple[str, str]], invocation: str,
            same_failure: int) -> Refusal | None:
    """Why a restart of `invocation` is refused (a broken GPU first), or None."""
    verdicts = list(verdicts)
    broken = [v for v in blocking_faults(verdicts) if v.invocation_id == invocation]
    if broken:
        fault = broken[0]
        remedy = fault.remedy.text if fault.remedy is not None else None
        return Refusal(GPU_FAULT, f"not restarting onto a faulted GPU: {fault.rank} needs {fault.gpu_action} "
                       f"({fault.cause}); a person must act first", remedy)
    if not prints or prints[-1][0] != invocation:
        return None
    alike = same_in_a_row(prints)
    if alike < same_failure:
        return None
    failed = next((v for v in verdicts if v.invocation_id == invocation and v.remedy is not None), None)
    words = "the same failure twice" if alike == 2 else f"the same failure {alike} times in a row"
    return Refusal(SAME_FAILURE, f"not restarting: {words}: {prints[-1][1]} (restart_budget.same_failure: "
                   f"{same_failure}); a restart would fail the same way", failed.remedy.text if failed and
                   failed.remedy else None)
