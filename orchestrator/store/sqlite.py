"""The job store on SQLite: its file, created owner-only, and its errors, each one clear message.

SQLite reports a damaged or unusable file as the error of whichever query meets it; here
those errors become one StoreError that names the file and says what to do, while a
query's own errors (and a busy store) keep their type.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, NoReturn, Optional

from orchestrator.base.errors import StoreError
from orchestrator.store.base import DOCTOR_HINT

# SQLite's primary result codes that mean the file, not the query, is the problem.
_CORRUPT, _NOTADB, _IOERR, _FULL = 11, 26, 10, 13
_ACCESS = {3, 8, 14, 23}  # PERM, READONLY, CANTOPEN, AUTH
_BY_TEXT = {"file is not a database": _NOTADB, "database disk image is malformed": _CORRUPT,
            "disk I/O error": _IOERR, "database or disk is full": _FULL,
            "unable to open database file": 14, "attempt to write a readonly database": 8}


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

    connection: SqliteConnection

    def _fail(self, e: sqlite3.Error) -> NoReturn:
        err = store_error(self.connection.path, e)
        if err is None:
            raise e
        raise err from None

    def execute(self, *args: Any) -> _Cursor:
        try:
            return super().execute(*args)
        except sqlite3.Error as e:
            self._fail(e)

    def fetchone(self) -> Any:
        try:
            return super().fetchone()
        except sqlite3.Error as e:
            self._fail(e)

    def fetchmany(self, *args: Any) -> list[Any]:
        try:
            return super().fetchmany(*args)
        except sqlite3.Error as e:
            self._fail(e)

    def fetchall(self) -> list[Any]:
        try:
            return super().fetchall()
        except sqlite3.Error as e:
            self._fail(e)

    def __next__(self) -> Any:
        try:
            return super().__next__()
        except sqlite3.Error as e:
            self._fail(e)


class SqliteConnection(sqlite3.Connection):
    """SQLite, with the few dialect hooks `pg.PgConnection` also has."""

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


def connect(path: Path) -> SqliteConnection:
    """The store's file, created (with its folder) readable by its owner only; no statement
    has run on it yet."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    db = sqlite3.connect(path, timeout=30.0, isolation_level=None, factory=SqliteConnection)
    db.path = path
    db.row_factory = sqlite3.Row
    return db


@contextmanager
def open_errors(path: Path) -> Iterator[None]:
    """While a store opens: SQLite's errors (those of connect itself; the connection converts
    the rest) and the file system's, as StoreError."""
    try:
        yield
    except sqlite3.Error as e:
        raise store_error(path, e) or StoreError(
            f"{path}: cannot open the job store: {e}", DOCTOR_HINT) from None
    except OSError as e:
        raise StoreError(f"{path}: cannot create the job store: {e.strerror}",
                         access_problem(path) or DOCTOR_HINT) from None
