"""The stores `orch serve` keeps open for reuse (store/pool.py): one thread's closed store is
the next one's, never two threads' at once; one left in a transaction, or cut by a database
restart, is never handed out again."""

from __future__ import annotations

import threading

import pytest

from orchestrator.settings import Settings
from orchestrator.store import open_store, pool


@pytest.fixture
def pooled(job_store):
    if job_store is None:
        pytest.skip("needs PostgreSQL: runs with --store both (make test) or --store postgresql")
    pool.enable()
    yield job_store
    pool.enable(False)


def _pid(store) -> int:
    return store._db.execute("SELECT pg_backend_pid() AS p").fetchone()["p"]


def test_a_closed_store_is_the_next_ones_and_one_in_a_transaction_is_not(pooled, tmp_path):
    settings = Settings(home=tmp_path, database_url=pooled)
    first = open_store(settings)
    pid = _pid(first)
    first.close()
    again = open_store(settings)
    assert _pid(again) == pid  # the same connection: no connect, no schema check
    other = open_store(settings)  # while `again` is out: another connection
    assert _pid(other) != pid
    other.close()
    again._db.begin_write()  # left in a transaction (a bug's way out): closed, not kept
    again.close()
    assert again._db._conn.closed
    assert _pid(open_store(settings)) != pid


def test_threads_never_share_a_store(pooled, tmp_path):
    settings = Settings(home=tmp_path, database_url=pooled)
    seen: list[tuple[int, int]] = []
    lock = threading.Lock()
    holding: set[int] = set()
    clash: list[int] = []

    def work(n: int) -> None:
        for _ in range(20):
            store = open_store(settings)
            key = id(store)
            with lock:
                if key in holding:
                    clash.append(key)
                holding.add(key)
            seen.append((n, _pid(store)))
            store.list(limit=1)  # used while held
            with lock:
                holding.discard(key)
            store.close()

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clash == [] and len(seen) == 120
    assert len({pid for _, pid in seen}) <= 6  # reused: at most one connection per thread


def test_a_store_the_database_cut_is_not_handed_out(pooled, tmp_path, postgres_base):
    settings = Settings(home=tmp_path, database_url=pooled)
    store = open_store(settings)
    pid = _pid(store)
    store.close()
    import psycopg

    with psycopg.connect(postgres_base, autocommit=True) as admin:  # as a restart would
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    fresh = open_store(settings)
    assert _pid(fresh) != pid and fresh.list() == []
    fresh.close()
