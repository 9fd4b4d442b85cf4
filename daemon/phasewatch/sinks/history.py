"""Past start-ups: what each phase really took on this host with this model.

`summarize()` (pure) turns a finished start-up into a `StartupRecord`; `History` keeps them in
SQLite in the state directory (WAL, synchronous=FULL: a kill -9 mid-write loses at most the record
being written, never the file), at most `KEEP` per unit. A file that is demonstrably corrupt (SQLite
says it is not a database, or it fails the quick check) is moved aside with a warning and a fresh one
is started; a host that cannot write (full, read-only, permissions) never gets a file moved: the
history goes on in memory (`degraded`). Every value read back is checked; a bad one is dropped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Sequence

from .. import __version__
from ..engines import ServerInfo
from ..errors import HistoryUnreadable
from ..records import MAIN, PHASE_NAMES, Phase
from ..stages.s1_read.timestamps import is_dated
from ..stages.s3_track.snapshot import InvocationView
from .history_records import PhaseRecord, StartupRecord, startup_from_row, valid_seconds
from .history_schema import (
    SCHEMA_VERSION,
    HistoryTooNew,
    check_shape,
    has_column,
    is_corrupt,
    migrate,
    prepare_memory,
    quick_check,
    schema_version,
)

__all__ = ["KEEP", "History", "PhaseRecord", "StartupRecord", "fingerprint", "summarize"]
logger = logging.getLogger(__name__)
KEEP = 500  # start-ups kept per unit


def fingerprint(server: ServerInfo | None, cold: bool = False) -> str:
    """What changes timing: model and draft, parallelism, speculative algorithm, graph sizes, us; and
    whether the start-up JIT-compiled (cold), minutes apart from a warm one. A warm start-up keeps the
    key it had before cold ones were told apart, so existing histories stay valid (as warm)."""
    if server is None:
        parts: dict[str, Any] = {"server": None}
    else:
        parts = {"model": server.model_path, "draft": server.draft_model_path, "tp": server.tp, "dp": server.dp,
                 "pp": server.pp, "ep": server.ep, "nnodes": server.nnodes, "spec": server.speculative,
                 "graph_max_bs": server.cuda_graph_max_bs, "graph_bs": server.cuda_graph_bs}
    parts["phasewatch"] = __version__.rsplit(".", 1)[0]  # minor versions share history
    if cold:
        parts["cold"] = True
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def summarize(unit: str, inv: InvocationView, outcome: str, cause: str | None, ended_at: float,
              verdicts: Sequence[tuple[str, str | None, str | None, float]] = ()) -> StartupRecord | None:
    """A finished start-up (ready, or failed) as a record; None when it has no date (no time at all,
    or times of day from a log that never names its date: nothing to put on a calendar)."""
    if inv.started_at is None or not is_dated(inv.started_at):
        return None
    ranks = [r for r in inv.ranks if r.rank != MAIN and r.seen]
    phases: list[PhaseRecord] = []
    for name in PHASE_NAMES:
        phase = Phase(name)
        spans = [(r.rank, s) for r in ranks for s in r.spans if s.phase is phase and s.start is not None]
        if not spans:
            continue
        starts = [s.start for _, s in spans if s.start is not None]
        ends = [s.end for _, s in spans if s.end is not None]
        if not ends:
            continue  # never finished: a failed start-up's last phase has no duration to learn from
        totals = [r.progress_totals[phase] for r in ranks if phase in r.progress_totals]
        slowest = max(spans, key=lambda item: item[1].end or 0.0)[0]
        phases.append(PhaseRecord(name, max(ends) - min(starts), max(ends) - min(ends),
                                  max(totals) if totals else None, inv.phase_silence.get(phase, 0.0), slowest))
    jits = [(r.rank, r.jit) for r in ranks if r.jit is not None and r.jit.first is not None and r.jit.end is not None]
    if jits:
        # The jit_compile sub-phase, as a phase of its own: first JIT line to the last compile's end.
        firsts = [j.first for _, j in jits if j.first is not None]
        ends = [j.end for _, j in jits if j.end is not None]
        slowest = max(jits, key=lambda item: item[1].end or 0.0)[0]
        phases.append(PhaseRecord(Phase.JIT_COMPILE.value, max(ends) - min(firsts), max(ends) - min(ends), None,
                                  inv.phase_silence.get(Phase.JIT_COMPILE, 0.0), slowest))
    spans_by_rank = {r.rank: [(s.phase.value, s.start, s.end) for s in r.spans] for r in inv.ranks if r.seen}
    return StartupRecord(unit, inv.invocation_id, fingerprint(inv.server, inv.cold), inv.started_at, ended_at, outcome,
                         cause, tuple(phases), spans_by_rank, tuple(verdicts))


class History:
    """The history file, or, once the host cannot keep it (full, read-only or unwritable state
    directory), a copy in memory for the rest of this run: `degraded` then says why."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.degraded: str | None = None
        if read_only:
            self._db = self._open_read_only()
            return
        try:
            self._db = self._open()
        except Exception as exc:  # a shape of file not foreseen: never the daemon's end (it would crash-loop)
            logger.exception("history %s: cannot be used: %s", self.path, exc)
            self._db = self._in_memory(f"cannot use {self.path}: {exc}")

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = self._connect()
            quick_check(db)
            return db
        except OSError as exc:
            return self._in_memory(f"cannot open {self.path}: {exc}")
        except HistoryTooNew as exc:
            return self._in_memory(str(exc))  # neither moved aside nor written: it is not broken
        except sqlite3.Error as exc:
            if not is_corrupt(exc):
                return self._in_memory(f"cannot open {self.path}: {exc}")
            cause = exc
        self._move_aside(cause)
        try:
            return self._connect()
        except (OSError, sqlite3.Error) as exc:
            return self._in_memory(f"cannot start a fresh {self.path}: {exc}")

    def _move_aside(self, exc: sqlite3.Error) -> None:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        logger.warning("history %s is unreadable (%s): moved to %s, starting a fresh one", self.path, exc,
                       aside.name)
        for suffix in ("", "-wal", "-shm"):
            try:
                os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
            except FileNotFoundError:
                pass
            except OSError as error:
                logger.warning("history: cannot move %s%s aside: %s", self.path, suffix, error)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=5)
        try:
            version = schema_version(db)  # before anything is written to the file
            if version > SCHEMA_VERSION:
                raise HistoryTooNew(self.path, version)
            check_shape(db)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.execute("PRAGMA foreign_keys=ON")
            migrate(db, self.path)
        except BaseException:
            db.close()
            raise
        return db

    def _open_read_only(self) -> sqlite3.Connection:
        """For `report`: never creates, writes or renames anything. Without a write-ahead log beside
        it (no daemon has it open) the file is complete and is read as immutable, which creates no
        -wal/-shm; with one, read-only through the log (immutable as a fallback: the last checkpoint)."""
        errors = []
        live = Path(f"{self.path}-wal").exists()
        for options in ("mode=ro", "immutable=1") if live else ("immutable=1",):
            try:
                db = sqlite3.connect(f"{self.path.resolve().as_uri()}?{options}", uri=True, isolation_level=None,
                                     timeout=5)
            except sqlite3.Error as exc:
                errors.append(str(exc))
                continue
            try:
                quick_check(db)
                version = schema_version(db)
                if version <= SCHEMA_VERSION:
                    check_shape(db)
            except sqlite3.Error as exc:
                db.close()
                errors.append(str(exc))
                if is_corrupt(exc):
                    break
                continue
            if version > SCHEMA_VERSION:
                db.close()
                raise HistoryUnreadable(str(HistoryTooNew(self.path, version)))
            return db  # an older version is read as it is (migrated by the daemon, not here)
        raise HistoryUnreadable(f"{self.path}: not a readable history ({'; '.join(errors)})")

    def _in_memory(self, reason: str) -> sqlite3.Connection:
        """Keep going in memory, starting from whatever of the file can still be read."""
        self.degraded = reason
        memory = sqlite3.connect(":memory:", isolation_level=None)
        source = getattr(self, "_db", None)
        copied = False
        if source is not None:
            try:
                source.backup(memory)
                copied = True
            except sqlite3.Error:
                pass
            source.close()
        if not copied and self.path.exists():
            try:
                reader = History(self.path, read_only=True)
                reader._db.backup(memory)
                reader.close()
                copied = True
            except (HistoryUnreadable, OSError, sqlite3.Error):
                pass
        try:
            if copied:
                check_shape(memory)
            prepare_memory(memory)
        except sqlite3.Error as exc:  # what was copied is not phasewatch's schema: start from nothing
            logger.warning("history: what could be read of %s is not usable (%s): not copied", self.path, exc)
            memory.close()
            memory = sqlite3.connect(":memory:", isolation_level=None)
            prepare_memory(memory)
            copied = False
        logger.warning("history degraded: %s; start-ups are kept in memory until phasewatch restarts (%s)",
                       reason, "past start-ups copied" if copied else "past start-ups not available")
        return memory

    def close(self) -> None:
        self._db.close()

    def add(self, record: StartupRecord) -> bool:
        """Store a start-up once (an invocation seen again is ignored); trim to KEEP per unit. A write
        the host refuses moves the history to memory (once) and stores it there."""
        try:
            return self._insert(record)
        except sqlite3.Error as exc:
            if self.degraded is not None:
                raise
            self._db = self._in_memory(f"cannot write {self.path}: {exc}")
            return self._insert(record)

    def _insert(self, record: StartupRecord) -> bool:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            cursor = db.execute(
                "INSERT OR IGNORE INTO startups (unit, invocation, fingerprint, started_at, ended_at, outcome, cause,"
                " spans, verdicts, ended_by, remedy, failure) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.unit, record.invocation_id, record.fingerprint, record.started_at, record.ended_at,
                 record.outcome, record.cause, json.dumps(record.spans), json.dumps(record.verdicts),
                 record.ended_by, record.remedy, record.failure))
            if cursor.rowcount == 0:
                db.execute("ROLLBACK")
                return False
            startup = cursor.lastrowid
            db.executemany("INSERT INTO phases VALUES (?, ?, ?, ?, ?, ?, ?)",
                           [(startup, p.phase, p.duration, p.spread, p.progress_total, p.max_silence, p.slowest_rank)
                            for p in record.phases])
            db.execute("DELETE FROM startups WHERE unit = ? AND id NOT IN (SELECT id FROM startups WHERE unit = ? "
                       "ORDER BY started_at DESC LIMIT ?)", (record.unit, record.unit, KEEP))
            db.execute("COMMIT")
            return True
        except BaseException:
            if db.in_transaction:  # SQLITE_FULL may have rolled back already
                db.execute("ROLLBACK")
            raise

    def startups(self, unit: str, fingerprint: str | None = None, last: int | None = None) -> list[StartupRecord]:
        """Past start-ups, oldest first; a row or value that is not what this version writes is dropped
        with a warning."""
        added = ", ".join(column if has_column(self._db, column) else "NULL" for column in ("ended_by", "remedy",
                                                                                      "failure"))
        query = "SELECT id, unit, invocation, fingerprint, started_at, ended_at, outcome, cause, spans, verdicts, " \
                f"{added} FROM startups WHERE unit = ?"
        args: list[Any] = [unit]
        if fingerprint is not None:
            query += " AND fingerprint = ?"
            args.append(fingerprint)
        query += " ORDER BY started_at DESC"
        if last is not None:
            query += " LIMIT ?"
            args.append(last)
        out = []
        for row in self._db.execute(query, args).fetchall():
            phase_rows = self._db.execute(
                "SELECT phase, duration, spread, progress_total, max_silence, slowest_rank FROM phases "
                "WHERE startup = ?", (row[0],)).fetchall()
            record = startup_from_row(row, phase_rows)
            if record is None:
                logger.warning("history %s: start-up row %s has invalid values: ignored", self.path, row[0])
            else:
                out.append(record)
        return list(reversed(out))

    def durations(self, unit: str, fingerprint: str, phase: str, outcome: str = "ready") -> list[float]:
        return self._seconds("SELECT p.duration FROM phases p JOIN startups s ON s.id = p.startup WHERE s.unit = ? "
                             "AND s.fingerprint = ? AND p.phase = ? AND s.outcome IN (?, 'serving')",
                             (unit, fingerprint, phase, outcome), "duration", phase)

    def silences(self, unit: str, fingerprint: str, phase: str) -> list[float]:
        return self._seconds("SELECT p.max_silence FROM phases p JOIN startups s ON s.id = p.startup WHERE "
                             "s.unit = ? AND s.fingerprint = ? AND p.phase = ? AND s.outcome IN ('ready', 'serving')",
                             (unit, fingerprint, phase), "max_silence", phase)

    def _seconds(self, query: str, args: tuple[str, ...], column: str, phase: str) -> list[float]:
        """Valid durations only; none (judged with the configured limits) when the file cannot be read."""
        try:
            rows = self._db.execute(query, args).fetchall()
        except sqlite3.Error as exc:
            logger.warning("history %s: cannot read %s of %s: %s", self.path, column, phase, exc)
            return []
        values = [valid_seconds(r[0]) for r in rows]
        bad = values.count(None)
        if bad:
            logger.warning("history %s: %d %s value(s) of %s are not durations: ignored", self.path, bad, column,
                           phase)
        return [v for v in values if v is not None]
