"""The store's schema, version by version, and bringing a store to the current one.

Each version is a list of steps, SQL in the dialect SQLite and PostgreSQL share (a
connection's `ddl` adapts its column types) or a data migration (a function of the
connection). The same migrations run on both databases.
"""

from __future__ import annotations

import sqlite3
from typing import Callable, Mapping, Optional, Sequence, Union

from orchestrator.base.errors import StoreError
from orchestrator.store.base import DOCTOR_HINT, Connection, transaction

SCHEMA_VERSION = 5

Step = Union[str, Callable[[Connection], None]]

# Versions that only add (tables, indexes, nullable columns): the code of the version
# before still works on a store at such a version, so replicas of `orch serve` on one
# PostgreSQL store upgrade one by one. Each migration records, as `compatible_from`, the
# oldest version whose code may use the store ("<version>:<oldest>"); a store newer than this code is used when
# this code's version is at least that. (Code of version 3 and older predates the key.)
ADDITIVE = {4, 5}

MIGRATIONS: dict[int, list[Step]] = {
    1: [
        """CREATE TABLE IF NOT EXISTS jobs (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            status TEXT NOT NULL,
            kind TEXT,
            target TEXT,
            fingerprint TEXT,
            spec_json TEXT NOT NULL,
            source_file TEXT,
            decision_json TEXT,
            backend_id TEXT,
            address TEXT,
            log_path TEXT,
            metrics_json TEXT NOT NULL DEFAULT '{}',
            info_json TEXT NOT NULL DEFAULT '{}',
            message TEXT,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            idempotency_key TEXT UNIQUE,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            started_at REAL,
            finished_at REAL
        )""",
        "CREATE INDEX IF NOT EXISTS jobs_fingerprint ON jobs(fingerprint, created_at)",
        "CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status)",
        """CREATE TABLE IF NOT EXISTS job_events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            job_id TEXT NOT NULL REFERENCES jobs(id),
            ts REAL NOT NULL,
            status TEXT NOT NULL,
            message TEXT
        )""",
        "CREATE INDEX IF NOT EXISTS job_events_job ON job_events(job_id, seq)",
    ],
    # `orch serve`: who submitted a job, its place in the queue, API tokens, cron schedules.
    2: [
        "ALTER TABLE jobs ADD COLUMN owner TEXT",
        "ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0",
        # A token is kept only as the sha256 of its text: the store never holds a usable one.
        """CREATE TABLE tokens (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            name TEXT NOT NULL UNIQUE,
            hash TEXT NOT NULL UNIQUE,
            admin INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            revoked_at REAL
        )""",
        """CREATE TABLE schedules (
            id TEXT PRIMARY KEY,
            name TEXT NOT NULL,
            owner TEXT,
            cron TEXT NOT NULL,
            spec_json TEXT NOT NULL,
            source_text TEXT NOT NULL,
            source_file TEXT,
            priority INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            next_at REAL,
            last_slot REAL,
            paused INTEGER NOT NULL DEFAULT 0
        )""",
        """CREATE TABLE schedule_events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            schedule_id TEXT NOT NULL REFERENCES schedules(id),
            ts REAL NOT NULL,
            slot REAL,
            job_id TEXT,
            message TEXT NOT NULL
        )""",
        "CREATE INDEX schedule_events_schedule ON schedule_events(schedule_id, seq)",
    ],
    # The status page's job list (store/job_pages.py): each filter with the newest first, and
    # by name, each ending in the id that breaks ties, so a page is read off one index.
    3: [
        "CREATE INDEX jobs_created ON jobs(created_at, id)",
        "DROP INDEX jobs_status",
        "CREATE INDEX jobs_status_created ON jobs(status, created_at, id)",
        "CREATE INDEX jobs_owner_created ON jobs(owner, created_at, id)",
        "CREATE INDEX jobs_target_created ON jobs(target, created_at, id)",
        "CREATE INDEX jobs_kind_created ON jobs(kind, created_at, id)",
        "CREATE INDEX jobs_name ON jobs(name, id)",
    ],
    # Replicas of `orch serve` (store/shared.py): what must not live on one replica's disk
    # (a finished job's log, zlib-compressed; an upload's archive and who sent it), and
    # each replica's last look, by which another tells whether it is alive.
    4: [
        """CREATE TABLE job_logs (
            job_id TEXT PRIMARY KEY,
            body BLOB NOT NULL,
            bytes INTEGER NOT NULL,
            kept_at REAL NOT NULL
        )""",
        """CREATE TABLE uploads (
            digest TEXT PRIMARY KEY,
            archive BLOB NOT NULL,
            bytes INTEGER NOT NULL,
            created_at REAL NOT NULL,
            used_at REAL NOT NULL
        )""",
        """CREATE TABLE upload_owners (
            digest TEXT NOT NULL REFERENCES uploads(digest) ON DELETE CASCADE,
            owner TEXT NOT NULL,
            PRIMARY KEY (digest, owner)
        )""",
        # A schedule registered through the API keeps its idempotency key, as a job does:
        # a client's resend after a lost answer returns it rather than a second one.
        "ALTER TABLE schedules ADD COLUMN idempotency_key TEXT",
        "CREATE UNIQUE INDEX schedules_key ON schedules(idempotency_key)",
        """CREATE TABLE replicas (
            id TEXT PRIMARY KEY,
            url TEXT,
            role TEXT NOT NULL,
            started_at REAL NOT NULL,
            seen_at REAL NOT NULL
        )""",
    ],
    # What planning learns from a run (records.metrics.learned_part), beside its whole
    # metrics: {"of": the metrics' length, "metrics": {...}}. A row whose metrics an older
    # orch rewrote (its length no longer the one noted) or wrote before this column is read
    # whole (store/jobs.py `learning_runs`).
    5: [
        "ALTER TABLE jobs ADD COLUMN learned_json TEXT",
    ],
}


def stored_version(db: sqlite3.Connection) -> int:
    """The schema version recorded in a store (0: none yet); OperationalError without meta."""
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


def recorded_version(db: Connection) -> Optional[int]:
    """The recorded schema version; None before the `meta` table exists."""
    if "meta" not in db.tables():
        return None
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row["value"]) if row else 0


def refuse_foreign(db: Connection, where: str, database: bool) -> None:
    """A database with tables but no `meta` is another program's: touch nothing.
    `database`: a PostgreSQL one (a URL), not a SQLite file."""
    tables = db.tables()
    if tables and "meta" not in tables:
        if database:
            raise StoreError(f"{where}: this database (schema) holds another program's "
                             f"tables ({', '.join(tables[:5])}) and no orch schema version",
                             "give orch a database of its own, or a schema of its own: "
                             "CREATE SCHEMA orch, then add ?options=-csearch_path%3Dorch to "
                             "the URL")
        raise StoreError(f"{where}: a SQLite database, but not orch's job store (tables "
                         f"{', '.join(tables[:5])}; no schema version)",
                         "point ORCH_HOME at another folder, or move this file aside: "
                         "`orch doctor --repair-store` does that and keeps it")


def migrate(db: Connection, where: str, target: int,
            migrations: Mapping[int, Sequence[Step]]) -> None:
    """Bring the store to schema `target` one version per transaction, each recording its
    number with its changes: a crash between versions leaves a store the next open
    finishes, and no version ever runs twice."""
    current = recorded_version(db) or 0  # the common case, without taking the write lock
    while current < target:
        with transaction(db):
            found = recorded_version(db)  # again, under the lock: another process may have
            if found is None:             # migrated meanwhile
                db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            current = found or 0
            if current >= target:
                break
            version = current + 1
            try:
                for step in migrations[version]:
                    if callable(step):  # a data migration
                        step(db)
                    else:
                        db.execute(db.ddl(step))
            except db.Error as e:
                raise StoreError(f"{where}: migrating the job store to schema {version} "
                                 f"failed: {e}", f"it stays at schema {current}, unchanged; "
                                 "`orch doctor` checks it") from None
            db.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                       "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(version),))
            compatible = _compatible_from(db, current) if version in ADDITIVE else version
            db.execute("INSERT INTO meta (key, value) VALUES ('compatible_from', ?) "
                       "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                       (f"{version}:{compatible}",))
            current = version
    if current > target and target < _compatible_from(db, current):
        raise StoreError(f"{where}: written by a newer orch (schema {current}, this orch "
                         f"knows {target})", "upgrade orch to the version that wrote "
                         "it; the store is left as it is (`orch doctor` shows its state)")
    check_tables(db, where)


def _compatible_from(db: Connection, current: int) -> int:
    """The oldest schema version whose code may use this store at `current` (`ADDITIVE`)."""
    row = db.execute("SELECT value FROM meta WHERE key = 'compatible_from'").fetchone()
    version, _, oldest = (row["value"] if row else "").partition(":")
    # Recorded with the version it was written for; any other (a version set by hand, or by
    # an orch before the key): none older than the store's own.
    return int(oldest) if version == str(current) and oldest.isdigit() else current


def check_tables(db: Connection, where: str) -> None:
    have = set(db.tables())
    missing = [t for t in ("jobs", "job_events") if t not in have]
    if missing:
        raise StoreError(f"{where}: the job store is damaged: table "
                         f"{', '.join(missing)} is missing", DOCTOR_HINT)
