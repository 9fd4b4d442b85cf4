"""Edge: acting off the loop. A response's actions (evidence, alerts, hooks, the restart) run in one
worker thread, in order, while the main loop keeps judging and pinging the watchdog; each job's
outcome comes back to the loop (`Done`), which records it. Every action is bounded: evidence by
`evidence.timeout`, each hook by its timeout (children killed with their process group, output
capped: sinks/children.py), the restart by its tries (RESTART_TRIES) and D-Bus's own call timeout.

A restart is made only on the start-up it was decided for: just before the D-Bus call the unit's
InvocationID is read again, and a unit started again meanwhile (by the operator, or by systemd's own
Restart= while the evidence and hooks ran) is not restarted; that is reported (`Done.restart_skipped`),
never tried again. When the check cannot be made (the facts read fails) the restart is made as decided,
and the log says so: a stuck start-up must still be restarted within its bound.

A restart that systemd refused (a transient D-Bus or polkit error) is reported as such; the
actor tries it again after RESTART_BACKOFF seconds, RESTART_TRIES times in all (sinks/acting/actor.py).
`Inline` runs a job at once in the caller's thread (tests, replay).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable, Protocol

from ...errors import UnitError
from ...stages.s3_track.snapshot import InvocationView
from ...stages.s4_judge.remedies import naming_evidence
from ...stages.s5_act.respond import Action
from ...systemd_unit import UnitFacts
from ..actions import stderr_is_journal

logger = logging.getLogger(__name__)
RESTART_TRIES = 4
RESTART_BACKOFF = (1.0, 2.0, 4.0)  # seconds before the 2nd, 3rd and 4th try


@dataclass(frozen=True)
class Job:
    actions: tuple[Action, ...]
    inv: InvocationView | None
    facts: UnitFacts


@dataclass(frozen=True)
class Done:
    job: Job
    evidence: str | None = None
    restart: Action | None = None  # the restart this job asked systemd for
    job_path: str | None = None  # systemd's job: the restart is systemd's now
    restart_error: str | None = None  # the restart was not made (refused: tried again)
    restart_skipped: str | None = None  # the restart was not made, on purpose: why (never tried again)
    partial: bool = False  # progress of a job still running: its alerts were sent


class Unit(Protocol):
    def facts(self) -> UnitFacts: ...

    def restart(self) -> str: ...


class ActionUnit(Protocol):
    """The unit as the actions see it: a restart, or (guarded) a stop, a look and a start."""

    def facts(self) -> UnitFacts: ...

    def restart(self) -> str: ...

    def stop(self) -> str: ...

    def start(self) -> str: ...


class Restarter(Protocol):
    def begin(self, action: Action, control_group: str | None, now: float) -> str: ...


class Evidence(Protocol):
    def take(self, inv: InvocationView, actions: list[Action], facts: UnitFacts) -> str | None: ...


class ActionRunner:
    """Runs one job's actions in order: evidence, alerts (with the evidence's path), hooks, restart."""

    def __init__(self, name: str, unit: Unit, alert: Callable[[Action], None], *, wall: Callable[[], float],
                 evidence: Evidence | None = None, run_hook: Callable[[Action], object] | None = None,
                 guarded: Restarter | None = None) -> None:
        self.name = name
        self.unit = unit
        self.alert = alert
        self.wall = wall
        self.evidence = evidence
        self.run_hook = run_hook
        self.guarded = guarded  # restart as stop, leftovers check, start (None: RestartUnit)

    def run(self, job: Job, progress: Callable[[Done], None] = lambda done: None) -> Done:
        """`progress`: told after each alert (the Worker's)."""
        wanted = [a for a in job.actions if a.kind == "evidence"]
        path = self._take_evidence(job, wanted) if wanted and job.inv is not None else None
        done = Done(job, evidence=path)
        hooks_run: set[tuple[str | None, str | None, str]] = set()
        for original in job.actions:
            action = original
            if path is not None and job.inv is not None and action.invocation_id == job.inv.invocation_id:
                action = replace(action, evidence=path)
            action = replace(action, message=naming_evidence(action.message, action.evidence),
                             remedy=naming_evidence(action.remedy, action.evidence) if action.remedy else None)
            if action.kind == "hook":
                once = (action.hook, action.invocation_id, action.verdict_kind)
                run_hook = self.run_hook
                if once not in hooks_run and run_hook is not None and not action.dry_run:
                    hooks_run.add(once)
                    ranks = ",".join(a.rank for a in job.actions if a.kind == "hook" and a.rank
                                     and (a.hook, a.invocation_id, a.verdict_kind) == once)
                    self._guard(f"hook {action.hook}", partial(run_hook, replace(action, rank=ranks or None)))
            elif action.kind == "alert":
                if not stderr_is_journal():  # else the alert's own journal entry would show twice
                    logger.info("[%s rank=%s phase=%s] alert %s: %s", self.name, action.rank, action.phase,
                                action.verdict_kind, action.message)
                self._guard("alert", partial(self.alert, action))
                progress(Done(replace(job, actions=(original,)), partial=True))
            elif action.kind == "restart" and action.dry_run:
                logger.info("[%s] dry run: would restart (%s)", self.name, action.verdict_kind)
            elif action.kind == "restart":
                done = self._restart(done, action)
        return done

    def _guard(self, what: str, act: Callable[[], object]) -> None:
        """One action failing unexpectedly never stops the next (the restart above all)."""
        try:
            act()
        except Exception as exc:  # (a bug or an unexpected error in one sink)
            logger.exception("[%s] %s failed: %s", self.name, what, exc)

    def _take_evidence(self, job: Job, wanted: list[Action]) -> str | None:
        """Bounded by `evidence.timeout`; a failure to capture never stops the alert or the restart."""
        if self.evidence is None or job.inv is None:
            return None
        try:
            path = self.evidence.take(job.inv, wanted, job.facts)
        except Exception as exc:  # OSError above all; never the restart's end
            logger.error("[%s] evidence not captured: %s", self.name, exc)
            return None
        if path is not None:
            logger.info("[%s] evidence for %s written to %s", self.name, wanted[0].verdict_kind, path)
        return path

    def _restart(self, done: Done, action: Action) -> Done:
        """One try (a signal's EINTR is retried inside the call: systemd_unit.py); the actor
        tries again after RESTART_BACKOFF, on the loop's clock."""
        why = self._not_now(action)
        if why is not None:
            logger.warning("[%s] the restart decided for %s (%s) is not made: %s", self.name, action.invocation_id,
                           action.verdict_kind, why)
            return replace(done, restart=action, restart_skipped=why)
        try:
            job = (self.guarded.begin(action, done.job.facts.control_group, self.wall())
                   if self.guarded is not None else self.unit.restart())
        except UnitError as exc:
            logger.error("[%s] %s", self.name, exc)
            return replace(done, restart=action, restart_error=str(exc))
        logger.info("[%s] restart requested (%s), job %s", self.name, action.verdict_kind, job)
        return replace(done, restart=action, job_path=job)


    def _not_now(self, action: Action) -> str | None:
        """Why the restart must not be made now: the start-up it was decided for no longer runs."""
        if action.invocation_id is None:
            return None
        try:
            current = self.unit.facts().invocation_id
        except UnitError as exc:
            logger.warning("[%s] cannot check that %s still runs before restarting it (%s): restarting as decided",
                           self.name, action.invocation_id, exc)
            return None
        if current is not None and current != action.invocation_id:
            return f"the unit was started again since (now {current})"
        return None


class Inline:
    """Runs each job at once, in the caller's thread."""

    def __init__(self) -> None:
        self.done: list[Done] = []

    @property
    def busy(self) -> bool:
        return False

    def fds(self) -> list[int]:
        return []

    def submit(self, job: Job, runner: ActionRunner) -> None:
        self.done.append(runner.run(job))

    def take_done(self) -> list[Done]:
        done, self.done = self.done, []
        return done


class Worker:
    """One thread that runs jobs in turn, each by the runner it was handed with (a reload's new one for
    the jobs after it); `fds()` is readable when one is done (the loop's poll)."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Job, ActionRunner]] = queue.SimpleQueue()
        self.done: queue.SimpleQueue[Done] = queue.SimpleQueue()
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._pending = 0  # jobs submitted and not taken back (the loop's thread only)
        self._thread = threading.Thread(target=self._work, name="phasewatch-actions", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._pending > 0

    def fds(self) -> list[int]:
        return [self._read]

    def submit(self, job: Job, runner: ActionRunner) -> None:
        self._pending += 1
        self.jobs.put((job, runner))

    def take_done(self) -> list[Done]:
        try:
            while os.read(self._read, 512):
                pass
        except BlockingIOError:
            pass
        out = []
        while True:
            try:
                out.append(self.done.get_nowait())
            except queue.Empty:
                break
        self._pending -= sum(not d.partial for d in out)
        return out

    def _work(self) -> None:
        while True:
            job, runner = self.jobs.get()
            try:
                done = runner.run(job, self._post)
            except Exception as exc:  # never lose the worker: the job is reported as not restarted
                logger.exception("actions failed: %s", exc)
                restart = next((a for a in job.actions if a.kind == "restart"), None)
                done = Done(job, restart=restart, restart_error=str(exc) if restart else None)
            self._post(done)

    def _post(self, done: Done) -> None:
        self.done.put(done)
        try:
            os.write(self._write, b"x")
        except BlockingIOError:
            pass  # (the loop has a wake-up to read already)
