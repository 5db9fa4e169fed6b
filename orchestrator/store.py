"""The job store: SQLite under ORCH_HOME, safe for several orch processes writing at once.

Rows are JSON columns with a schema version, never pickles. Each status change is one
transaction that updates the job and appends to its history, so a reader never sees one
without the other.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

from orchestrator.errors import InputError, NotFound, StoreError

SCHEMA_VERSION = 2
STATUSES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})

_MIGRATIONS = {
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
}

class NameTaken(InputError):
    """A name that must be unique (a token's) is in use."""


_JSON_COLUMNS = {"spec_json": "spec", "decision_json": "decision", "metrics_json": "metrics",
                 "info_json": "info"}


def database_url(settings) -> Optional[str]:
    """The PostgreSQL URL a team's store is at; None: SQLite under the home folder."""
    url = getattr(settings, "database_url", None)
    return url.get_secret_value() if url is not None else None


def store_location(settings) -> str:
    """Where the store is, as shown to a user: a file path, or the URL without its password."""
    url = database_url(settings)
    return shown_url(url) if url else str(settings.home / "orch.db")


def shown_url(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def store_exists(settings) -> bool:
    """Whether there is a store to read: the SQLite file exists, or a database URL is set
    (reading a PostgreSQL store that orch never wrote finds it empty, and creates its tables)."""
    return bool(database_url(settings)) or (settings.home / "orch.db").exists()


def open_store(settings) -> Store:
    """The job store these settings name: PostgreSQL at `database_url`, else SQLite."""
    url = database_url(settings)
    return Store(url) if url else Store(settings.home / "orch.db")


def new_job_id() -> str:
    return "orch-" + uuid.uuid4().hex[:8]


def iso(ts: Optional[float]) -> Optional[str]:
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


DOCTOR_HINT = ("`orch doctor` shows what is wrong; `orch doctor --repair-store` moves the file "
               "aside (keeping it) and salvages every readable job, API token and schedule into "
               "a new store")

# SQLite's primary result codes that mean the file, not the query, is the problem.
_CORRUPT, _NOTADB, _IOERR, _FULL = 11, 26, 10, 13
_ACCESS = {3, 8, 14, 23}  # PERM, READONLY, CANTOPEN, AUTH
_BY_TEXT = {"file is not a database": _NOTADB, "database disk image is malformed": _CORRUPT,
            "disk I/O error": _IOERR, "database or disk is full": _FULL,
            "unable to open database file": 14, "attempt to write a readonly database": 8}


def stored_version(db: sqlite3.Connection) -> int:
    """The schema version recorded in a store (0: none yet); OperationalError without meta."""
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else 0


def access_problem(path: Path) -> Optional[str]:
    """Which of the store's files or its folder this process cannot write, with owner and mode."""
    me = os.geteuid()
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), path.parent):
        try:
            st = p.stat()
            if p.is_dir():
                if not os.access(p, os.W_OK | os.X_OK):
                    raise PermissionError
            else:
                open(p, "r+b").close()
        except FileNotFoundError:
            continue
        except PermissionError:
            return (f"{p} is mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}, and orch "
                    f"runs as uid {me}: make it yours and writable (chmod "
                    f"{'700' if p.is_dir() else '600'} {p}) or run orch as its owner; "
                    "`orch doctor` checks the modes")
        except OSError:
            continue
    return None


def store_error(path: Path, e: sqlite3.Error) -> Optional[StoreError]:
    """One clear StoreError for SQLite errors that mean the file is damaged or unusable;
    None for the rest (a query's own errors, a busy store), which keep their type."""
    code = getattr(e, "sqlite_errorcode", None)
    code = (code & 0xFF) if code is not None else _BY_TEXT.get(str(e))
    if code == _NOTADB:
        return StoreError(f"{path}: cannot open the job store: not a SQLite database (damaged, "
                          "or another program's file)", DOCTOR_HINT)
    if code == _CORRUPT:
        return StoreError(f"{path}: the job store is damaged (SQLite: {e})", DOCTOR_HINT)
    if code == _IOERR:
        return StoreError(f"{path}: cannot read the job store (SQLite: {e})",
                          access_problem(path) or DOCTOR_HINT)
    if code == _FULL:
        return StoreError(f"{path}: the disk holding the job store is full",
                          "free some space on it; nothing was lost")
    if code in _ACCESS:
        return StoreError(f"{path}: orch cannot open the job store for writing (SQLite: {e})",
                          access_problem(path) or "check the owner and mode of the file, its "
                          "-wal/-shm files and its folder; `orch doctor` checks them")
    return None


class _Cursor(sqlite3.Cursor):
    """A cursor whose damaged-file errors arrive as StoreError, wherever SQLite finds them:
    a bad page deep in a table shows up mid-scan, long after the store opened."""

    def _fail(self, e: sqlite3.Error):
        err = store_error(self.connection.path, e)
        if err is None:
            raise e
        raise err from None

    def execute(self, *args):
        try:
            return super().execute(*args)
        except sqlite3.Error as e:
            self._fail(e)

    def fetchone(self):
        try:
            return super().fetchone()
        except sqlite3.Error as e:
            self._fail(e)

    def fetchmany(self, *args):
        try:
            return super().fetchmany(*args)
        except sqlite3.Error as e:
            self._fail(e)

    def fetchall(self):
        try:
            return super().fetchall()
        except sqlite3.Error as e:
            self._fail(e)

    def __next__(self):
        try:
            return super().__next__()
        except sqlite3.Error as e:
            self._fail(e)


class _Connection(sqlite3.Connection):
    """SQLite, with the few dialect hooks `store_pg.PgConnection` also has."""

    path: Path
    Error = sqlite3.Error
    dialect = "sqlite"
    greatest = "MAX"  # SQLite's two-argument MAX is PostgreSQL's GREATEST

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        return self.cursor(_Cursor).execute(sql, params)

    def begin_write(self) -> None:
        self.execute("BEGIN IMMEDIATE")  # writers queue on the lock instead of failing

    def tables(self) -> list[str]:
        return [r[0] for r in self.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
            "ORDER BY name")]

    @staticmethod
    def ddl(sql: str) -> str:
        return sql


def is_database_url(where: Any) -> bool:
    return isinstance(where, str) and where.startswith(("postgresql://", "postgres://"))


class Store:
    """The job store: a SQLite file (a Path), or PostgreSQL (a postgresql:// URL)."""

    def __init__(self, where: Path | str):
        self.url = where if is_database_url(where) else None
        self.path = None if self.url else Path(where)
        self.where = shown_url(self.url) if self.url else str(self.path)  # for messages
        self._db: Optional[_Connection] = None
        try:
            self._open()
        except BaseException:
            if self._db is not None:  # leave nothing holding the file (or its WAL) open
                self._db.close()
            raise

    def _open(self) -> None:
        if self.url:
            from orchestrator.store_pg import PgConnection

            self._db = PgConnection(self.url, self.where)
            self._refuse_foreign()
            self._migrate()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fresh = not self.path.exists()
            if fresh:  # created readable by its owner only
                os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None,
                                       factory=_Connection)
            self._db.path = self.path
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA busy_timeout = 30000")
            self._refuse_foreign()  # before WAL mode, which would rewrite another's file
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.Error as e:  # from connect itself; the connection converts the rest
            raise store_error(self.path, e) or StoreError(
                f"{self.path}: cannot open the job store: {e}", DOCTOR_HINT) from None
        except OSError as e:
            raise StoreError(f"{self.path}: cannot create the job store: {e.strerror}",
                             access_problem(self.path) or DOCTOR_HINT) from None

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction at a time over every process: writers queue on the lock
        (SQLite's IMMEDIATE transaction, PostgreSQL's advisory lock) instead of failing."""
        self._db.begin_write()
        try:
            yield self._db
        except BaseException:
            if self._db.in_transaction:  # SQLite rolls back itself on some errors (disk full)
                self._db.execute("ROLLBACK")
            raise
        else:
            self._db.execute("COMMIT")

    def _refuse_foreign(self) -> None:
        """A database with tables but no `meta` is another program's: touch nothing."""
        tables = self._db.tables()
        if tables and "meta" not in tables:
            if self.url:
                raise StoreError(f"{self.where}: this database (schema) holds another program's "
                                 f"tables ({', '.join(tables[:5])}) and no orch schema version",
                                 "give orch a database of its own, or a schema of its own: "
                                 "CREATE SCHEMA orch, then add ?options=-csearch_path%3Dorch to "
                                 "the URL")
            raise StoreError(f"{self.path}: a SQLite database, but not orch's job store (tables "
                             f"{', '.join(tables[:5])}; no schema version)",
                             "point ORCH_HOME at another folder, or move this file aside: "
                             "`orch doctor --repair-store` does that and keeps it")

    def _version(self) -> Optional[int]:
        """The recorded schema version; None before the `meta` table exists."""
        if "meta" not in self._db.tables():
            return None
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row["value"]) if row else 0

    def _migrate(self) -> None:
        """Bring the store to SCHEMA_VERSION one version per transaction, each recording its
        number with its changes: a crash between versions leaves a store the next open
        finishes, and no version ever runs twice. The same migrations run on SQLite and
        PostgreSQL."""
        current = self._version() or 0  # the common case, without taking the write lock
        while current < SCHEMA_VERSION:
            with self._write() as db:
                current = self._version()  # again, under the lock: another process may have
                if current is None:        # migrated meanwhile
                    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                    current = 0
                if current >= SCHEMA_VERSION:
                    break
                version = current + 1
                try:
                    for step in _MIGRATIONS[version]:
                        if callable(step):  # a data migration
                            step(db)
                        else:
                            db.execute(db.ddl(step))
                except db.Error as e:
                    raise StoreError(f"{self.where}: migrating the job store to schema {version} "
                                     f"failed: {e}", f"it stays at schema {current}, unchanged; "
                                     "`orch doctor` checks it") from None
                db.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                           "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(version),))
                current = version
        if current > SCHEMA_VERSION:
            raise StoreError(f"{self.where}: written by a newer orch (schema {current}, this orch "
                             f"knows {SCHEMA_VERSION})", "upgrade orch to the version that wrote "
                             "it; the store is left as it is (`orch doctor` shows its state)")
        self._check_tables()

    def _check_tables(self) -> None:
        have = set(self._db.tables())
        missing = [t for t in ("jobs", "job_events") if t not in have]
        if missing:
            raise StoreError(f"{self.where}: the job store is damaged: table "
                             f"{', '.join(missing)} is missing", DOCTOR_HINT)

    @property
    def schema_version(self) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row["value"])

    # -- jobs -------------------------------------------------------------------------

    def create_job(self, *, name: str, spec: dict, kind: Optional[str], target: Optional[str],
                   fingerprint: Optional[str], decision: Optional[dict] = None,
                   source_file: Optional[str] = None, address: Optional[str] = None,
                   idempotency_key: Optional[str] = None, job_id: Optional[str] = None,
                   message: str = "recorded", info: Optional[dict] = None,
                   owner: Optional[str] = None, priority: int = 0) -> dict:
        """Record a job as PENDING before anything is launched for it. `owner` is the API
        token's name that submitted it (None: submitted embedded)."""
        now = time.time()
        job_id = job_id or new_job_id()
        row = {"id": job_id, "name": name, "status": "PENDING", "kind": kind, "target": target,
               "fingerprint": fingerprint, "spec_json": json.dumps(spec),
               "source_file": source_file,
               "decision_json": json.dumps(decision) if decision is not None else None,
               "address": address, "idempotency_key": idempotency_key,
               "info_json": json.dumps(info or {}), "created_at": now, "updated_at": now}
        if owner is not None or priority:  # columns of schema 2; left to their defaults else
            row.update(owner=owner, priority=int(priority))
        with self._write() as db:
            if idempotency_key:
                found = db.execute("SELECT id FROM jobs WHERE idempotency_key = ?",
                                   (idempotency_key,)).fetchone()
                if found:
                    return self.get(found["id"])
            db.execute(f"INSERT INTO jobs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                       tuple(row.values()))
            db.execute("INSERT INTO job_events (job_id, ts, status, message) VALUES (?, ?, ?, ?)",
                       (job_id, now, "PENDING", message))
        return self.get(job_id)

    def update(self, job_id: str, **fields: Any) -> dict:
        """Change columns other than status; JSON columns take Python values."""
        if not fields:
            return self.get(job_id)
        cols, values = [], []
        for key, value in fields.items():
            column = next((c for c, k in _JSON_COLUMNS.items() if k == key), key)
            if column in _JSON_COLUMNS:
                value = json.dumps(value)
            cols.append(f"{column} = ?")
            values.append(value)
        with self._write() as db:
            db.execute(f"UPDATE jobs SET {', '.join(cols)}, updated_at = ? WHERE id = ?",
                       (*values, time.time(), job_id))
        return self.get(job_id)

    def set_status(self, job_id: str, status: str, message: Optional[str] = None,
                   **fields: Any) -> dict:
        """Move a job to `status` and append to its history; a finished job stays finished."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status}")
        now = time.time()
        with self._write() as db:
            row = db.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id}")
            if row["status"] in TERMINAL:
                changed = False
            elif row["status"] == status:
                # Same state, new news (a cloud job recovering): note it in the history too.
                changed = False
                if message and message != db.execute("SELECT message FROM jobs WHERE id = ?",
                                                      (job_id,)).fetchone()["message"]:
                    db.execute("UPDATE jobs SET message = ?, updated_at = ? WHERE id = ?",
                               (message, now, job_id))
                    db.execute("INSERT INTO job_events (job_id, ts, status, message) "
                               "VALUES (?, ?, ?, ?)", (job_id, now, status, message))
            else:
                changed = True
                extra = {"status": status, "message": message}
                if status == "RUNNING":
                    extra["started_at"] = now
                if status in TERMINAL:
                    extra["finished_at"] = now
                extra.update(fields)
                cols, values = [], []
                for key, value in extra.items():
                    column = next((c for c, k in _JSON_COLUMNS.items() if k == key), key)
                    cols.append(f"{column} = ?")
                    values.append(json.dumps(value) if column in _JSON_COLUMNS else value)
                db.execute(f"UPDATE jobs SET {', '.join(cols)}, updated_at = ? WHERE id = ?",
                           (*values, now, job_id))
                db.execute("INSERT INTO job_events (job_id, ts, status, message) VALUES (?, ?, ?, ?)",
                           (job_id, now, status, message))
        if not changed and fields:
            return self.update(job_id, **fields)
        return self.get(job_id)

    def get(self, job_id: str) -> dict:
        """A job by id, or by a unique prefix of it."""
        return self._record(self._one("jobs", job_id, "job",
                                      "`orch status` lists the jobs with their ids"))

    def _one(self, table: str, key: str, what: str, hint: str):
        """The row of `table` whose id is `key`, or the one whose id starts with it;
        NotFound for none (an empty key matches none) or several."""
        row = self._db.execute(f"SELECT * FROM {table} WHERE id = ?", (key,)).fetchone()
        if row is not None:
            return row
        # A prefix, literally: '_' and '%' in what was typed match only themselves.
        prefix = key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = self._db.execute(f"SELECT * FROM {table} WHERE id LIKE ? ESCAPE '\\' LIMIT 2",
                                (prefix + "%",)).fetchall() if key else []
        if len(rows) != 1:
            raise NotFound(f"no {what} {key!r}" if not rows else f"{key!r} matches several "
                           f"{what}s", hint)
        return rows[0]

    def list(self, limit: int = 50, statuses: Optional[tuple] = None,
             since: Optional[float] = None) -> list[dict]:
        """Newest first; `since`: created at or after (epoch seconds), or not yet finished."""
        q, where, args = "SELECT * FROM jobs", [], []
        if statuses:
            where.append(f"status IN ({','.join('?' * len(statuses))})")
            args.extend(statuses)
        if since is not None:
            where.append("(created_at >= ? OR finished_at >= ? OR finished_at IS NULL)")
            args.extend((since, since))
        if where:
            q += " WHERE " + " AND ".join(where)
        q += " ORDER BY created_at DESC, id LIMIT ?"
        args.append(limit)
        return [self._record(r) for r in self._db.execute(q, args).fetchall()]

    def history(self, job_id: str) -> list[dict]:
        rows = self._db.execute("SELECT ts, status, message FROM job_events WHERE job_id = ? "
                                "ORDER BY seq", (job_id,)).fetchall()
        return [{"at": iso(r["ts"]), "ts": r["ts"], "status": r["status"], "message": r["message"]}
                for r in rows]

    def runs_for_fingerprint(self, fingerprint: str, since: float = 0.0) -> list[dict]:
        rows = self._db.execute(
            "SELECT * FROM jobs WHERE fingerprint = ? AND created_at >= ? ORDER BY created_at",
            (fingerprint, since)).fetchall()
        return [self._record(r) for r in rows]

    def queued(self) -> list[dict]:
        """Jobs an `orch serve` recorded and has not launched yet, in launch order:
        priority first (highest), then submission time."""
        rows = self._db.execute(
            "SELECT * FROM jobs WHERE status = 'PENDING' AND backend_id IS NULL "
            "ORDER BY priority DESC, created_at, id").fetchall()
        return [rec for rec in map(self._record, rows) if (rec["info"] or {}).get("queued")]

    def claim(self, job_id: str, launcher: str, expect: Optional[str] = None) -> bool:
        """Take a queued job for launching, as `launcher`: only while it is still queued and
        not cancelled, and only from `expect` (None: nobody had it; else a launcher that
        died). Two servers on one store never both launch a job."""
        with self._write() as db:
            row = db.execute("SELECT status, backend_id, cancel_requested, info_json FROM jobs "
                             "WHERE id = ?", (job_id,)).fetchone()
            if row is None or row["status"] != "PENDING" or row["backend_id"] is not None \
                    or row["cancel_requested"]:
                return False
            info = json.loads(row["info_json"] or "{}")
            if not info.get("queued") or info.get("launcher") != expect:
                return False
            info["launcher"] = launcher
            db.execute("UPDATE jobs SET info_json = ?, updated_at = ? WHERE id = ?",
                       (json.dumps(info), time.time(), job_id))
            return True

    # -- API tokens (orch serve) -------------------------------------------------------

    def add_token(self, name: str, token_hash: str, admin: bool = False) -> dict:
        """Record a token by its hash. A revoked token's name may be given a new token; a
        live one's may not (NameTaken)."""
        now = time.time()
        with self._write() as db:
            row = db.execute("SELECT revoked_at FROM tokens WHERE name = ?", (name,)).fetchone()
            if row is not None and row["revoked_at"] is None:
                raise NameTaken(f"a token named {name!r} exists",
                                f"`orch token revoke {name}` first to replace it, or choose "
                                "another name")
            if row is not None:
                db.execute("UPDATE tokens SET hash = ?, admin = ?, created_at = ?, revoked_at = "
                           "NULL WHERE name = ?", (token_hash, int(admin), now, name))
            else:
                db.execute("INSERT INTO tokens (name, hash, admin, created_at) VALUES (?, ?, ?, ?)",
                           (name, token_hash, int(admin), now))
        return self.token(name)

    def token(self, name: str) -> dict:
        row = self._db.execute("SELECT * FROM tokens WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFound(f"no token named {name!r}", "`orch token list` shows the tokens")
        return _token(row)

    def token_by_hash(self, token_hash: str) -> Optional[dict]:
        """The live token with this hash; None for an unknown or revoked one."""
        row = self._db.execute("SELECT * FROM tokens WHERE hash = ? AND revoked_at IS NULL",
                               (token_hash,)).fetchone()
        return _token(row) if row else None

    def tokens(self) -> list[dict]:
        return [_token(r) for r in self._db.execute("SELECT * FROM tokens ORDER BY name")]

    def revoke_token(self, name: str) -> dict:
        self.token(name)  # NotFound for a name never given
        with self._write() as db:
            db.execute("UPDATE tokens SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL",
                       (time.time(), name))
        return self.token(name)

    # -- cron schedules (orch serve) ---------------------------------------------------

    def add_schedule(self, *, name: str, owner: Optional[str], cron: str, spec: dict,
                     source_text: str, source_file: Optional[str], next_at: float,
                     priority: int = 0) -> dict:
        """Register a schedule; `spec` redacted, `source_text` free of secret values (the
        caller refuses any), `next_at` its first slot."""
        sched_id, now = "sched-" + uuid.uuid4().hex[:8], time.time()
        with self._write() as db:
            db.execute("""INSERT INTO schedules (id, name, owner, cron, spec_json, source_text,
                          source_file, priority, created_at, next_at) VALUES
                          (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                       (sched_id, name, owner, cron, json.dumps(spec), source_text, source_file,
                        int(priority), now, next_at))
            db.execute("INSERT INTO schedule_events (schedule_id, ts, message) VALUES (?, ?, ?)",
                       (sched_id, now, f"registered: cron {cron!r}"))
        return self.schedule(sched_id)

    def schedule(self, sched_id: str) -> dict:
        """A schedule by id, or by a unique prefix of it."""
        return _schedule(self._one("schedules", sched_id, "schedule",
                                   "`orch schedule list` shows the schedules with their ids"))

    def schedules(self) -> list[dict]:
        return [_schedule(r) for r in
                self._db.execute("SELECT * FROM schedules ORDER BY created_at, id")]

    def schedule_done(self, sched_id: str, *, last_slot: Optional[float], next_at: float,
                      events: list[tuple] = ()) -> Optional[dict]:
        """Advance a schedule past a slot, with its log lines (slot, job id, message), in
        one write: the log never says a slot ran that the schedule has not moved past.
        None when the schedule was removed meanwhile (its slot's job, if any, stays)."""
        now = time.time()
        with self._write() as db:
            if db.execute("SELECT id FROM schedules WHERE id = ?", (sched_id,)).fetchone() is None:
                return None
            if last_slot is None:
                db.execute("UPDATE schedules SET next_at = ? WHERE id = ?", (next_at, sched_id))
            else:
                db.execute(f"UPDATE schedules SET next_at = ?, last_slot = {db.greatest}("
                           "COALESCE(last_slot, 0), ?) WHERE id = ?", (next_at, last_slot, sched_id))
            for slot, job_id, message in events:
                db.execute("INSERT INTO schedule_events (schedule_id, ts, slot, job_id, message) "
                           "VALUES (?, ?, ?, ?, ?)", (sched_id, now, slot, job_id, message))
        return self.schedule(sched_id)

    def pause_schedule(self, sched_id: str, paused: bool, next_at: float, message: str) -> dict:
        """Pause or resume a schedule; a resumed one starts again from `next_at`, so the
        slots it missed while paused are not caught up."""
        sched_id = self.schedule(sched_id)["id"]  # NotFound; a prefix resolved
        with self._write() as db:
            db.execute("UPDATE schedules SET paused = ?, next_at = ? WHERE id = ?",
                       (int(paused), next_at, sched_id))
            db.execute("INSERT INTO schedule_events (schedule_id, ts, message) VALUES (?, ?, ?)",
                       (sched_id, time.time(), message))
        return self.schedule(sched_id)

    def schedule_events(self, sched_id: str, limit: int = 20) -> list[dict]:
        """The schedule's log, newest last."""
        rows = self._db.execute("SELECT * FROM (SELECT * FROM schedule_events WHERE schedule_id "
                                "= ? ORDER BY seq DESC LIMIT ?) AS recent ORDER BY seq",
                                (sched_id, limit)).fetchall()
        return [{"at": iso(r["ts"]), "slot": iso(r["slot"]), "job_id": r["job_id"],
                 "message": r["message"]} for r in rows]

    def remove_schedule(self, sched_id: str) -> None:
        """Delete a schedule and its log in one transaction; the jobs it ran are kept."""
        sched_id = self.schedule(sched_id)["id"]  # NotFound; a prefix resolved
        with self._write() as db:
            db.execute("DELETE FROM schedule_events WHERE schedule_id = ?", (sched_id,))
            db.execute("DELETE FROM schedules WHERE id = ?", (sched_id,))

    def _record(self, row: sqlite3.Row) -> dict:
        rec = {k: row[k] for k in row.keys()}
        for column, key in _JSON_COLUMNS.items():
            raw = rec.pop(column)
            rec[key] = json.loads(raw) if raw else None
        rec["cancel_requested"] = bool(rec["cancel_requested"])
        return rec


def _token(row: sqlite3.Row) -> dict:
    return {"name": row["name"], "admin": bool(row["admin"]), "created_at": iso(row["created_at"]),
            "revoked_at": iso(row["revoked_at"])}


def _schedule(row: sqlite3.Row) -> dict:
    rec = {k: row[k] for k in row.keys()}
    rec["spec"] = json.loads(rec.pop("spec_json"))
    rec["paused"] = bool(rec["paused"])
    return rec


def public_schedule(rec: dict, events: Optional[list] = None) -> dict:
    """The JSON a user sees for a schedule: no job file text."""
    out = {"id": rec["id"], "name": rec["name"], "owner": rec["owner"], "cron": rec["cron"],
           "priority": rec["priority"], "source_file": rec["source_file"],
           "created_at": iso(rec["created_at"]), "next_at": iso(rec["next_at"]),
           "last_slot": iso(rec["last_slot"]), "paused": rec["paused"]}
    if events is not None:
        out["log"] = events
    return out
