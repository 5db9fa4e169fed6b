"""The job store: SQLite under ORCH_HOME, safe for several orch processes writing at once, or
PostgreSQL for a team.

Rows are JSON columns with a schema version, never pickles. `Store` opens the database,
brings it to the current schema and closes it; what it holds is in its parts: jobs and
their history (jobs.py), API tokens (tokens.py), cron schedules (schedules.py), what
`orch serve`'s replicas share (shared.py: finished logs, uploads, who is alive). The
schema and its migrations are schema.py; what SQLite and PostgreSQL each need, sqlite.py
and pg.py.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from orchestrator.store import pool
from orchestrator.store.base import DOCTOR_HINT, iso
from orchestrator.store.job_pages import SORTS, JobQuery
from orchestrator.store.jobs import STATUSES, TERMINAL, JobCount, Jobs, new_job_id
from orchestrator.store.location import database_url, is_database_url, shown_url, store_exists, store_location
from orchestrator.store.schedules import Schedules
from orchestrator.store.schema import MIGRATIONS as _MIGRATIONS
from orchestrator.store.schema import SCHEMA_VERSION, migrate, refuse_foreign, stored_version
from orchestrator.store.shared import REPLICA_STALE_S, Shared
from orchestrator.store.sqlite import access_problem, open_errors, store_error
from orchestrator.store.sqlite import connect as sqlite_connect
from orchestrator.store.tokens import NameTaken, Tokens

__all__ = ["DOCTOR_HINT", "SCHEMA_VERSION", "SORTS", "STATUSES", "TERMINAL", "JobCount", "JobQuery", "NameTaken", "REPLICA_STALE_S", "Store",
           "access_problem", "database_url", "is_database_url", "iso", "new_job_id",
           "open_store", "shown_url", "store_error", "store_exists",
           "store_location", "stored_version"]


class Store(Jobs, Tokens, Schedules, Shared):
    """The job store: a SQLite file (a Path), or PostgreSQL (a postgresql:// URL)."""

    _pooled = False  # handed out by store/pool.py: close() gives it back

    def __init__(self, where: Path | str):
        if is_database_url(where):
            self.url, self.path, self.where = where, None, shown_url(where)
            self._open_pg(where)
        else:
            self.url, self.path = None, Path(where)
            self.where = str(self.path)
            self._open_sqlite(self.path)

    def _open_pg(self, url: str) -> None:
        from orchestrator.store.pg import PgConnection  # psycopg: only for a database URL

        self._db = PgConnection(url, self.where)
        with self._closed_on_failure():
            refuse_foreign(self._db, self.where, database=True)
            self._migrate()

    def _open_sqlite(self, path: Path) -> None:
        with open_errors(path):
            self._db = sqlite_connect(path)
        with self._closed_on_failure(), open_errors(path):
            self._db.execute("PRAGMA busy_timeout = 30000")
            # Before WAL mode, which would rewrite another program's file.
            refuse_foreign(self._db, self.where, database=False)
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA foreign_keys = ON")
            self._migrate()

    @contextmanager
    def _closed_on_failure(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self._db.close()  # leave nothing holding the file (or its WAL) open
            raise

    def _migrate(self) -> None:
        # This module's names, read now: a test stands in another schema by setting them here.
        migrate(self._db, self.where, SCHEMA_VERSION, _MIGRATIONS)

    def close(self) -> None:
        if self._pooled:
            pool.give_back(self)
        else:
            self._db.close()

    def close_now(self) -> None:
        """Close the connection, pooled or not."""
        try:
            self._db.close()
        except Exception:  # noqa: BLE001  (a connection the database already cut)
            pass

    @property
    def schema_version(self) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row["value"])


def open_store(settings) -> Store:
    """The job store these settings name: PostgreSQL at `database_url`, else SQLite; in a
    process that keeps them (`pool.enable()`: `orch serve`), one opened before if one is idle."""
    url = database_url(settings)
    if not url:
        return Store(settings.home / "orch.db")
    if not pool.enabled():
        return Store(url)
    taken = pool.take(url)
    store = taken if isinstance(taken, Store) else Store(url)
    store._pooled = True
    return store
