"""The history file's schema and its version (SQLite `PRAGMA user_version`): the tables, the
migrations from older versions, and the refusal of a newer one (sinks/history.py opens the file)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

logger = logging.getLogger(__name__)


class MalformedHistory(sqlite3.DatabaseError):
    """The file is a database, but not a history phasewatch can use (failed quick_check, tables
    without their columns): moved aside like a corrupt one."""


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
    ended_by TEXT,
    remedy TEXT,
    failure TEXT,
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
# The schema's version, in the file's `PRAGMA user_version`. 0: a file of a phasewatch from before
# versioning (the tables above, unstamped). Each migration takes a file from version n-1 to n inside
# one transaction; a file newer than SCHEMA_VERSION is never written, moved or migrated back.
SCHEMA_VERSION = 4
COLUMNS = {"startups": {"id", "unit", "invocation", "fingerprint", "started_at", "ended_at", "outcome", "cause",
                        "spans", "verdicts"},
           "phases": {"startup", "phase", "duration", "spread", "progress_total", "max_silence", "slowest_rank"}}


def _migrate_unversioned(db: sqlite3.Connection) -> None:
    """0 -> 1: the unversioned tables are version 1's; check that they are, then stamp the file."""
    for table, wanted in COLUMNS.items():
        have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if have and not wanted <= have:
            raise MalformedHistory(f"table {table} lacks columns {sorted(wanted - have)}")


def _add_ended_by(db: sqlite3.Connection) -> None:
    """1 -> 2: `ended_by`, what ended a start-up from outside it (the group's restart decision)."""
    have = {row[1] for row in db.execute("PRAGMA table_info(startups)")}
    if have and "ended_by" not in have:
        db.execute("ALTER TABLE startups ADD COLUMN ended_by TEXT")


def _add_remedy(db: sqlite3.Connection) -> None:
    """2 -> 3: `remedy`, what to do about the start-up's first verdict (stages/s4_judge/remedies.py)."""
    have = {row[1] for row in db.execute("PRAGMA table_info(startups)")}
    if have and "remedy" not in have:
        db.execute("ALTER TABLE startups ADD COLUMN remedy TEXT")


def _add_failure(db: sqlite3.Connection) -> None:
    """3 -> 4: `failure`, the failed start-up's fingerprint (phase, cause, culprit, exception class:
    stages/s5_act/restart_gate.py), which the restart gate counts in a row."""
    have = {row[1] for row in db.execute("PRAGMA table_info(startups)")}
    if have and "failure" not in have:
        db.execute("ALTER TABLE startups ADD COLUMN failure TEXT")


def has_column(db: sqlite3.Connection, column: str) -> bool:
    """A file of an older version opened read only lacks the columns added since (ended_by: 2, remedy: 3,
    failure: 4)."""
    return column in {row[1] for row in db.execute("PRAGMA table_info(startups)")}


MIGRATIONS = {1: _migrate_unversioned, 2: _add_ended_by, 3: _add_remedy, 4: _add_failure}  # version reached -> step


class HistoryTooNew(Exception):
    """The file was written by a newer phasewatch: read or written by this one, it would be misread or
    clobbered, so it is left alone."""

    def __init__(self, path: Path, version: int) -> None:
        super().__init__(f"{path} has history schema version {version}, newer than this phasewatch's "
                         f"{SCHEMA_VERSION} (written by a newer phasewatch): left as it is; upgrade phasewatch "
                         "to use it, or move it away to start a new history")
        self.version = version


def schema_version(db: sqlite3.Connection) -> int:
    version: int = db.execute("PRAGMA user_version").fetchone()[0]
    return version


OBJECTS = {"startups": "table", "phases": "table", "phases_by_startup": "index", "startups_by_unit": "index"}


def check_shape(db: sqlite3.Connection) -> None:
    """A file phasewatch can use: a version it knows the way to (`PRAGMA user_version` is a signed
    32-bit field), its names the kind of object the schema makes (a view named `startups` cannot be
    indexed), and no view or trigger (the schema has none: one would change what is read or written).
    Else `MalformedHistory`: moved aside like a corrupt file."""
    version = schema_version(db)
    if version < 0:
        raise MalformedHistory(f"schema version {version} is not a version of phasewatch's")
    for name, kind in db.execute("SELECT name, type FROM sqlite_master"):
        wanted = OBJECTS.get(name)
        if kind in ("view", "trigger") or (wanted is not None and kind != wanted):
            raise MalformedHistory(f"{name} is a {kind}" + (f", not a {wanted}" if wanted else "")
                                   + ": not phasewatch's schema")


def migrate(db: sqlite3.Connection, path: Path) -> None:
    """Bring a writable file to SCHEMA_VERSION: create a new one, or migrate an older one step by step."""
    version = schema_version(db)
    if version > SCHEMA_VERSION:
        raise HistoryTooNew(path, version)
    check_shape(db)
    if version == SCHEMA_VERSION:
        db.executescript(SCHEMA)
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        for target in range(version + 1, SCHEMA_VERSION + 1):
            MIGRATIONS[target](db)
        for statement in SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    if version > 0 or _had_rows(db):
        logger.info("history %s: schema migrated from version %d to %d", path, version, SCHEMA_VERSION)


def _had_rows(db: sqlite3.Connection) -> bool:
    count: int = db.execute("SELECT count(*) FROM startups").fetchone()[0]
    return count > 0


def is_corrupt(exc: sqlite3.Error) -> bool:
    """The file itself is bad (not a database, malformed), as opposed to the host failing to write it
    (disk full, read-only, permissions, I/O): only the first may be moved aside."""
    if isinstance(exc, MalformedHistory):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def quick_check(db: sqlite3.Connection) -> None:
    """SQLite's own check of the file (a page it cannot read is `MalformedHistory`)."""
    db.execute("SELECT count(*) FROM startups").fetchone()
    if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
        raise MalformedHistory("quick_check failed")


def prepare_memory(memory: sqlite3.Connection) -> None:
    """An in-memory history's schema (over what was copied into it, if anything)."""
    memory.execute("PRAGMA foreign_keys=ON")
    memory.executescript(SCHEMA)
    memory.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

