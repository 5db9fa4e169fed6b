"""Which `orch serve` runs the scheduler's duties: the one that holds its store's lease.

Every replica answers the whole API; launching from the queue, cron slots, reconciling
running jobs, budget stops and the upload clean-up run in the lease holder alone.

- PostgreSQL: a session advisory lock, taken with `pg_try_advisory_lock` on a connection
  of the lease's own. It is held while that connection lives: a replica that dies, SIGKILL
  included, has its socket closed by the kernel, PostgreSQL frees the lock at once, and a
  standby takes it at its next look (every LOOK_S). A holder whose connection is lost (the
  database restarted) has lost the lock with it: its wait ends at once, its next look fails,
  it stops its duties and competes again. The lock is keyed by the store's schema, so stores in other schemas of
  one database have leases of their own. Chosen over claiming each item (`FOR UPDATE SKIP
  LOCKED`): the scheduler's passes read the whole queue and every running job's backend at
  once (the queue is launched in order per target, against each target's room), which a
  per-item claim would split between replicas. Jobs keep their per-item claims and
  idempotency keys too, so the moment two replicas could both believe they hold the lease
  (a holder cut off from the database mid-pass) launches nothing twice.
- SQLite: the store is one file on one machine, and one `orch serve` uses it: an exclusive
  lock on the file `<store>.serve.lock`, taken at start, refuses a second.
"""

from __future__ import annotations

import contextlib
import os
import threading
import zlib
from pathlib import Path
from typing import Any, Optional, Protocol

from orchestrator.base.errors import StoreError

LEASE_CLASS = 0x6F726368  # "orch", the first half of the lease's advisory lock key
WAKE_CHANNEL = "orch_wake"  # a replica's NOTIFY that a job was queued: the holder looks now
LOOK_S = 2.0  # how often a standby looks for the lease


class Lease(Protocol):
    problem: Optional[str]  # why the last look could not ask the store; None: it could
    def held(self) -> bool:
        """Whether this process holds the lease now (taking it when it is free)."""

    def wait(self, timeout_s: float, woken: threading.Event) -> None:
        """Until `timeout_s` passes, `woken` is set, or another replica says a job was queued."""

    def poke(self) -> None:
        """Tell the holder, wherever it runs, that a job was queued."""

    def close(self) -> None:
        """Give the lease up (a standby takes it at its next look)."""


class Sole:
    """The lease of a store only this process serves (SQLite, whose file lock `orch serve`
    took at start; or a scheduler run in a test): always held."""

    problem: Optional[str] = None

    def held(self) -> bool:
        return True

    def wait(self, timeout_s: float, woken: threading.Event) -> None:
        woken.wait(timeout_s)

    def poke(self) -> None:
        pass

    def close(self) -> None:
        pass


class PgLease:
    """The lease on a PostgreSQL store: a session advisory lock on a connection of its own."""

    def __init__(self, url: str, shown: str, slice_s: float = 0.2):
        self.url, self.shown, self.slice_s = url, shown, slice_s
        self._conn: Any = None  # a psycopg connection, once made
        self._key: Optional[int] = None
        self._holding = False
        self._lock = threading.Lock()  # the connection, between the scheduler and API threads
        self.problem: Optional[str] = None  # why the last look could not ask (the database away)

    def _connect(self):
        import psycopg

        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        schema = conn.execute("SELECT current_schema()").fetchone()
        name = (schema[0] if schema else None) or "public"
        self._key = zlib.crc32(name.encode()) - (1 << 31)  # an int4, as the lock takes
        conn.execute(f"LISTEN {WAKE_CHANNEL}")
        return conn

    def held(self) -> bool:
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._holding = False
                    self._conn = self._connect()
                if self._holding:
                    self._conn.execute("SELECT 1")  # the lock lives as long as this connection
                else:
                    row = self._conn.execute("SELECT pg_try_advisory_lock(%s, %s)",
                                             (LEASE_CLASS, self._key)).fetchone()
                    self._holding = bool(row and row[0])
                self.problem = None
            except Exception as e:  # noqa: BLE001  (psycopg's errors: the database is away)
                self._drop()
                text = str(e).strip()
                self.problem = f"{self.shown}: {text.splitlines()[0] if text else type(e).__name__}"
            return self._holding

    def wait(self, timeout_s: float, woken: threading.Event) -> None:
        import time

        deadline = time.monotonic() + timeout_s
        while not woken.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            step = min(self.slice_s, left)
            with self._lock:
                if self._conn is not None and not self._conn.closed:
                    try:
                        if any(True for _ in self._conn.notifies(timeout=step, stop_after=1)):
                            return  # another replica queued a job
                        continue
                    except Exception:  # noqa: BLE001  (the database is away)
                        # A holder's lock went with the connection: back to the loop now,
                        # whose next look says so, rather than leading on to the period's end.
                        self._drop()
                        return
            woken.wait(step)

    def poke(self) -> None:
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                self._conn.execute(f"NOTIFY {WAKE_CHANNEL}")
            except Exception:  # noqa: BLE001  (the holder looks at its next period anyway)
                self._drop()

    def _drop(self) -> None:
        self._holding = False
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop()


class FileLease:
    """The one `orch serve` of a SQLite store: an exclusive lock on `<store>.serve.lock`."""

    def __init__(self, store_path: Path):
        self.store = Path(store_path)
        self.path = Path(f"{store_path}.serve.lock")
        self._fd: Optional[int] = None

    def take(self) -> FileLease:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StoreError(
                f"another orch serve ({holder}) serves the SQLite store {self.store}: "
                "a SQLite store has one server",
                "stop that one first; for several replicas, put the store on PostgreSQL "
                "(database_url) and start each with it") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()}".encode())
        self._fd = fd
        return self

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # the lock goes with it
            self._fd = None


def lease_for(settings) -> Lease:
    """The scheduler's lease: a PostgreSQL store's advisory lock, else Sole (a SQLite store
    is refused a second server at start: FileLease)."""
    from orchestrator.store.location import database_url, shown_url

    url = database_url(settings)
    return PgLease(url, shown_url(url)) if url else Sole()
