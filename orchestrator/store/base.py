"""What every part of the store shares: the connection it talks to, one write transaction, a row by id.

`Connection` is the subset of sqlite3.Connection the store uses; `sqlite.SqliteConnection`
and `pg.PgConnection` are the two that have it. Its rows are sqlite3.Row or psycopg's dict
rows, both read by column name, and typed Any as sqlite3's own stubs type them: the
connection's row factory decides their shape.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Protocol

from orchestrator.base.errors import NotFound
from orchestrator.records import iso  # noqa: F401  (re-exported: the store shows times so)

DOCTOR_HINT = ("`orch doctor` shows what is wrong; `orch doctor --repair-store` moves the file "
               "aside (keeping it) and salvages every readable job, API token and schedule into "
               "a new store")


class Row(Protocol):
    """One result row, read by column name."""

    def __getitem__(self, key: str, /) -> Any: ...

    def keys(self) -> Iterable[str]: ...


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...  # a row, or None

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """SQLite's or PostgreSQL's, with the few dialect hooks where their SQL differs."""

    @property
    def Error(self) -> type[Exception]: ...  # the driver's root error

    @property
    def dialect(self) -> str: ...

    @property
    def greatest(self) -> str: ...  # the two-argument maximum: MAX or GREATEST

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, params: Any = ()) -> Cursor: ...

    def begin_write(self) -> None: ...

    def tables(self) -> list[str]: ...

    def ddl(self, sql: str) -> str: ...  # a migration's SQL in this dialect

    def close(self) -> None: ...


@contextmanager
def transaction(db: Connection) -> Iterator[Connection]:
    """One write transaction at a time over every process: writers queue on the lock
    (SQLite's IMMEDIATE transaction, PostgreSQL's advisory lock) instead of failing."""
    db.begin_write()
    try:
        yield db
    except BaseException:
        if db.in_transaction:  # SQLite rolls back itself on some errors (disk full)
            db.execute("ROLLBACK")
        raise
    else:
        db.execute("COMMIT")


class StoreBase:
    """The connection and what the store's parts (jobs, tokens, schedules) do with it."""

    url: Optional[str]  # a PostgreSQL store's URL; None for SQLite
    path: Optional[Path]  # a SQLite store's file; None for PostgreSQL
    where: str  # either, as messages show it (no password)
    _db: Connection

    def close(self) -> None:
        self._db.close()

    def _write(self) -> AbstractContextManager[Connection]:
        return transaction(self._db)

    def _one(self, table: str, key: str, what: str, hint: str) -> Row:
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
