"""Open PostgreSQL stores kept for reuse by a long-running process (`orch serve`).

Opening a PostgreSQL store connects, authenticates and checks the schema: about 11 ms,
against 0.1 ms for a query on an open one, and `orch serve` opens one (or two) for every
request. A process that calls `enable()` gets, from `open_store`, a store another thread
closed before: its `close()` puts it back. A store is handed to one thread at a time; one
that is in a transaction or whose connection failed is closed for good, and each is asked
`SELECT 1` before it is handed out again (a database restart cuts them all). At most
`MAX_IDLE` wait; the others are closed.
"""

from __future__ import annotations

import threading
from typing import Optional, Protocol

from orchestrator.store.base import Connection


class PooledStore(Protocol):
    """What the pool uses of a store (orchestrator.store.Store, which imports this)."""

    url: Optional[str]
    _db: Connection

    def close_now(self) -> None: ...

MAX_IDLE = 16

_lock = threading.Lock()
_enabled = False
_idle: dict[str, list[PooledStore]] = {}


def enable(on: bool = True) -> None:
    """Keep this process's PostgreSQL stores for reuse (off: close the idle ones)."""
    global _enabled
    with _lock:
        _enabled = on
        dropped = [s for stores in _idle.values() for s in stores] if not on else []
        if not on:
            _idle.clear()
    for store in dropped:
        store.close_now()


def enabled() -> bool:
    return _enabled


def take(url: str) -> Optional[PooledStore]:
    """An idle store on `url` that answers, or None (open a new one)."""
    while True:
        with _lock:
            stores = _idle.get(url)
            if not stores:
                return None
            store = stores.pop()
        try:
            store._db.execute("SELECT 1").fetchall()
            return store
        except Exception:  # noqa: BLE001  (StoreError, or the driver's: a cut connection)
            store.close_now()


def give_back(store: PooledStore) -> None:
    """A store a thread is done with: kept for the next, or closed."""
    url = store.url
    if _enabled and url is not None and not store._db.in_transaction:
        with _lock:
            stores = _idle.setdefault(url, [])
            if len(stores) < MAX_IDLE:
                stores.append(store)
                return
    store.close_now()
