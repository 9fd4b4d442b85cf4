"""Past start-ups: what each phase really took on this host with this model.

`summarize()` (pure) turns a finished start-up into a `StartupRecord`; `History` keeps them in
SQLite in the state directory (WAL, synchronous=FULL: a kill -9 mid-write loses at most the record
being written, never the file), at most `KEEP` per unit. A file that is not a readable database is
moved aside with a warning and a fresh one is started.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from . import __version__
from .records import MAIN, PHASE_NAMES, Phase
from .tracker import InvocationView, ServerInfo

logger = logging.getLogger(__name__)
KEEP = 500  # start-ups kept per unit


@dataclass(frozen=True)
class PhaseRecord:
    phase: str
    duration: float  # first rank's begin to last rank's end: the phase's wall time
    spread: float  # last rank's end minus first rank's end
    progress_total: int | None  # shards, capture batch sizes, ...
    max_silence: float  # the longest time no rank in the phase showed a sign of life
    slowest_rank: str | None = None


@dataclass(frozen=True)
class StartupRecord:
    unit: str
    invocation_id: str
    fingerprint: str
    started_at: float
    ended_at: float
    outcome: str
    cause: str | None
    phases: tuple[PhaseRecord, ...]
    spans: dict[str, list[tuple[str, float | None, float | None]]] = field(default_factory=dict)  # rank -> phases
    verdicts: tuple[tuple[str, str | None, str | None, float], ...] = ()  # kind, rank, phase, at

    def phase(self, name: str) -> PhaseRecord | None:
        return next((p for p in self.phases if p.phase == name), None)

    @property
    def duration(self) -> float:
        return self.ended_at - self.started_at


def fingerprint(server: ServerInfo | None) -> str:
    """What changes timing: model and draft, parallelism, speculative algorithm, graph sizes, us."""
    if server is None:
        parts: dict[str, Any] = {"server": None}
    else:
        parts = {"model": server.model_path, "draft": server.draft_model_path, "tp": server.tp, "dp": server.dp,
                 "pp": server.pp, "ep": server.ep, "nnodes": server.nnodes, "spec": server.speculative,
                 "graph_max_bs": server.cuda_graph_max_bs, "graph_bs": server.cuda_graph_bs}
    parts["phasewatch"] = __version__.rsplit(".", 1)[0]  # minor versions share history
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def summarize(unit: str, inv: InvocationView, outcome: str, cause: str | None, ended_at: float,
              verdicts: Sequence[tuple[str, str | None, str | None, float]] = ()) -> StartupRecord | None:
    """A finished start-up (ready, or failed) as a record; None when it has no time at all."""
    if inv.started_at is None:
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
    spans_by_rank = {r.rank: [(s.phase.value, s.start, s.end) for s in r.spans] for r in inv.ranks if r.seen}
    return StartupRecord(unit, inv.invocation_id, fingerprint(inv.server), inv.started_at, ended_at, outcome,
                         cause, tuple(phases), spans_by_rank, tuple(verdicts))


SCHEMA = """
CREATE TABLE IF NOT EXISTS startups (
    id INTEGER PRIMARY KEY,
    unit TEXT NOT NULL,
    invocation TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    started_at REAL NOT NULL,
    ended_at REAL NOT NULL,
    outcome TEXT NOT NULL,
    cause TEXT,
    spans TEXT NOT NULL,
    verdicts TEXT NOT NULL,
    UNIQUE (unit, invocation)
);
CREATE TABLE IF NOT EXISTS phases (
    startup INTEGER NOT NULL REFERENCES startups(id) ON DELETE CASCADE,
    phase TEXT NOT NULL,
    duration REAL NOT NULL,
    spread REAL NOT NULL,
    progress_total INTEGER,
    max_silence REAL NOT NULL,
    slowest_rank TEXT
);
CREATE INDEX IF NOT EXISTS phases_by_startup ON phases(startup);
CREATE INDEX IF NOT EXISTS startups_by_unit ON startups(unit, fingerprint, started_at);
"""


class History:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            db = self._connect()
            db.execute("SELECT count(*) FROM startups").fetchone()
            if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                raise sqlite3.DatabaseError("quick_check failed")
            return db
        except sqlite3.DatabaseError as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            logger.warning("history %s is unreadable (%s): moved to %s, starting a fresh one", self.path, exc,
                           aside.name)
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.replace(f"{self.path}{suffix}", f"{aside}{suffix}")
                except FileNotFoundError:
                    pass
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, isolation_level=None, timeout=5)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA foreign_keys=ON")
        db.executescript(SCHEMA)
        return db

    def close(self) -> None:
        self._db.close()

    def add(self, record: StartupRecord) -> bool:
        """Store a start-up once (an invocation seen again is ignored); trim to KEEP per unit."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            cursor = db.execute(
                "INSERT OR IGNORE INTO startups (unit, invocation, fingerprint, started_at, ended_at, outcome, cause,"
                " spans, verdicts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.unit, record.invocation_id, record.fingerprint, record.started_at, record.ended_at,
                 record.outcome, record.cause, json.dumps(record.spans), json.dumps(record.verdicts)))
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
            db.execute("ROLLBACK")
            raise

    def startups(self, unit: str, fingerprint: str | None = None, last: int | None = None) -> list[StartupRecord]:
        query = "SELECT id, unit, invocation, fingerprint, started_at, ended_at, outcome, cause, spans, verdicts " \
                "FROM startups WHERE unit = ?"
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
            phases = tuple(PhaseRecord(*p) for p in self._db.execute(
                "SELECT phase, duration, spread, progress_total, max_silence, slowest_rank FROM phases "
                "WHERE startup = ?", (row[0],)).fetchall())
            spans = {rank: [tuple(s) for s in items] for rank, items in json.loads(row[8]).items()}
            verdicts = tuple(tuple(v) for v in json.loads(row[9]))
            out.append(StartupRecord(row[1], row[2], row[3], row[4], row[5], row[6], row[7], phases,
                                     spans, verdicts))
        return list(reversed(out))

    def durations(self, unit: str, fingerprint: str, phase: str, outcome: str = "ready") -> list[float]:
        rows = self._db.execute(
            "SELECT p.duration FROM phases p JOIN startups s ON s.id = p.startup WHERE s.unit = ? AND "
            "s.fingerprint = ? AND p.phase = ? AND s.outcome IN (?, 'serving')", (unit, fingerprint, phase, outcome))
        return [r[0] for r in rows.fetchall()]

    def silences(self, unit: str, fingerprint: str, phase: str) -> list[float]:
        rows = self._db.execute(
            "SELECT p.max_silence FROM phases p JOIN startups s ON s.id = p.startup WHERE s.unit = ? AND "
            "s.fingerprint = ? AND p.phase = ? AND s.outcome IN ('ready', 'serving')", (unit, fingerprint, phase))
        return [r[0] for r in rows.fetchall()]


def p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=20, method="inclusive")[-1]
