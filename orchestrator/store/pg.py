"""The job store on PostgreSQL: one store for a team's `orch serve` and every teammate.

`Store` writes its SQL once, in the dialect both databases share; this connection
adapts the few places PostgreSQL differs:
- placeholders: `?` becomes `%s` (a literal `%` is escaped);
- the migrations' column types: SQLite's `INTEGER PRIMARY KEY AUTOINCREMENT` is a
  `BIGSERIAL` key, and `REAL` (a timestamp) is `DOUBLE PRECISION`, not PostgreSQL's 4-byte
  real; `BLOB` is `BYTEA`;
- parameters: booleans go in as 0/1 (the columns are integers, as on SQLite), and NUL
  characters, which PostgreSQL's text refuses, as U+FFFD;
- the list of tables comes from information_schema, in the connection's current schema
  (a URL may choose one: `?options=-csearch_path%3Dorch`);
- writes are serialised as on SQLite (`BEGIN IMMEDIATE`): each write transaction first
  takes one transaction-scoped advisory lock, so a read-then-write (a status change, a
  claim) never races another process's.
Nothing here is imported unless a database URL is set.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, TypeVar

import psycopg
from psycopg.rows import dict_row

from orchestrator.base.errors import StoreError

T = TypeVar("T")

LOCK_KEY = 0x6F726368  # "orch": the advisory lock every write transaction holds
HINT = ("check database_url (ORCH_DATABASE_URL): the server must be up and accept this user "
        "and password; `orch doctor` checks it")


def _param(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, str) and "\x00" in v:
        return v.replace("\x00", "\ufffd")
    return v


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class PgCursor:
    def __init__(self, owner: PgConnection, cur: psycopg.Cursor[dict[str, Any]]):
        self._owner, self._cur = owner, cur

    @property
    def rowcount(self) -> int:
        return self._cur.rowcount

    def fetchone(self) -> Optional[dict[str, Any]]:
        return self._owner._guard(self._cur.fetchone)

    def fetchall(self) -> list[dict[str, Any]]:
        return self._owner._guard(self._cur.fetchall)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.fetchall())


class PgConnection:
    """The subset of sqlite3.Connection the store uses, on a psycopg connection."""

    Error = psycopg.Error
    dialect = "postgresql"

    def __init__(self, url: str, shown: str, connect_timeout_s: int = 10):
        self.shown = shown
        try:
            self._conn = psycopg.connect(url, autocommit=True, row_factory=dict_row,
                                         connect_timeout=connect_timeout_s)
        except psycopg.Error as e:
            raise StoreError(f"{shown}: cannot connect to the PostgreSQL job store: "
                             f"{_first_line(e)}", HINT) from None

    def _guard(self, call: Callable[..., T], *args: Any) -> T:
        """A lost or refused connection is one StoreError; a query's own errors keep their type."""
        try:
            return call(*args)
        except psycopg.OperationalError as e:
            raise StoreError(f"{self.shown}: the PostgreSQL job store failed: {_first_line(e)}",
                             HINT) from None

    def execute(self, sql: str, params: Any = ()) -> PgCursor:
        cur = self._guard(self._conn.cursor)  # a connection a restart cut refuses even this
        if params:
            sql = sql.replace("%", "%%").replace("?", "%s")
            self._guard(cur.execute, sql, [_param(p) for p in params])
        else:
            self._guard(cur.execute, sql)
        return PgCursor(self, cur)

    @property
    def in_transaction(self) -> bool:
        # A lost connection's status is UNKNOWN: no transaction left to roll back there (the
        # server ended it), and a ROLLBACK would only hide the StoreError that says so.
        return self._conn.info.transaction_status not in (psycopg.pq.TransactionStatus.IDLE,
                                                         psycopg.pq.TransactionStatus.UNKNOWN)

    def begin_write(self) -> None:
        self.execute("BEGIN")
        self.execute("SELECT pg_advisory_xact_lock(?)", (LOCK_KEY,))

    def tables(self) -> list[str]:
        schema = self.execute("SELECT current_schema() AS s").fetchall()[0]["s"]  # one row
        if schema is None:
            raise StoreError(f"{self.shown}: none of the schemas in the connection's search_path "
                             "exists", "create it (CREATE SCHEMA name), or drop `options=-csearch_"
                             "path` from the URL to use the public schema")
        return sorted(r["table_name"] for r in self.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = ?", (schema,)))

    @staticmethod
    def ddl(sql: str) -> str:
        return (sql.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
                .replace(" REAL", " DOUBLE PRECISION").replace(" BLOB", " BYTEA"))

    greatest = "GREATEST"

    def close(self) -> None:
        self._conn.close()
