"""Pages of jobs (store/job_pages.py): filters, search, sorts, keyset cursors, and one page's
query time with 100,000 jobs in the store.

Run on SQLite, and on PostgreSQL too with `pytest --store both` (tests/conftest.py)."""

from __future__ import annotations

import json
import time

import pytest

from orchestrator.base.errors import InputError
from orchestrator.store import JobQuery, Store
from tests.conftest import store_at


def fill(store: Store, n: int, t0: float = 1.7e9) -> None:
    """`n` finished jobs written in one transaction (create_job is one each: too slow for
    100,000): names digits-<i> or tiny-<i>, owners ann/bob/cyd, targets local/onprem/cloud;
    job i created at t0 + i, so the newest is n-1."""
    owners, targets, states = ("ann", "bob", "cyd"), ("local", "onprem", "cloud"), ("SUCCEEDED", "FAILED")
    rows = [(f"orch-{i:08x}", f"{'digits' if i % 2 else 'tiny'}-{i}", states[i % 7 == 0],
             "steady" if i % 5 == 0 else "exploratory", targets[i % 3], owners[i % 4 % 3],
             json.dumps({"run": "echo"}), t0 + i, t0 + i, t0 + i + 60) for i in range(n)]
    with store._write() as db:
        if db.dialect == "postgresql":  # one statement a row over the network: batch it
            from psycopg.types.json import Json  # noqa: F401  (psycopg is here for this store)
            conn = db._conn  # type: ignore[attr-defined]
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO jobs (id, name, status, kind, target, owner, spec_json, "
                                "created_at, updated_at, finished_at) VALUES "
                                "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", rows)
        else:
            db.executemany("INSERT INTO jobs (id, name, status, kind, target, owner, spec_json, "  # type: ignore[attr-defined]
                           "created_at, updated_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           rows)
    if store._db.dialect == "postgresql":
        store._db.execute("ANALYZE jobs")
    else:
        store._db.execute("ANALYZE")


def pages(store: Store, **kw) -> list[list[str]]:
    out, cursor = [], None
    while True:
        rows, cursor = store.page(JobQuery(cursor=cursor, **kw))
        out.append([r.id for r in rows])
        if cursor is None:
            return out


def test_filters_search_sorts_and_cursors(tmp_path):
    store = store_at(tmp_path)
    fill(store, 40)
    newest = [f"orch-{i:08x}" for i in reversed(range(40))]
    got = pages(store, limit=15)
    assert [len(p) for p in got] == [15, 15, 10] and sum(got, []) == newest
    assert sum(pages(store, limit=15, sort="-created"), []) == newest[::-1]
    by_name = sum(pages(store, limit=7, sort="name"), [])
    assert [store.get(i).name for i in by_name] == sorted(store.get(i).name for i in newest)
    bob = sum(pages(store, limit=4, owner="bob"), [])
    assert bob == [i for i in newest if int(i[5:], 16) % 4 % 3 == 1]
    mixed = sum(pages(store, limit=3, owner="ann", target="cloud", status="FAILED"), [])
    assert mixed == [i for i in newest if (n := int(i[5:], 16)) % 4 % 3 == 0 and n % 3 == 2 and n % 7 == 0]
    steady = sum(pages(store, limit=50, kind="steady"), [])
    assert len(steady) == 8 and len(pages(store, limit=50, kind="steady")) == 1
    # The name, any part of it and any case; '%' and '_' only themselves.
    assert sum(pages(store, search="GITS-3"), []) == [f"orch-{i:08x}" for i in (39, 37, 35, 33, 31, 3)]
    assert pages(store, search="%") == [[]] and pages(store, search="tiny_") == [[]]
    assert pages(store, owner="nobody") == [[]]


def test_a_bad_sort_or_cursor_is_bad_input(tmp_path):
    store = store_at(tmp_path)
    fill(store, 3)
    _, cursor = store.page(JobQuery(limit=1))
    with pytest.raises(InputError, match="not a sort"):
        store.page(JobQuery(sort="cost"))
    with pytest.raises(InputError, match="made for sort 'created', not 'name'"):
        store.page(JobQuery(sort="name", cursor=cursor))
    for junk in ("x", "!!", "W10", cursor[:-3]):
        with pytest.raises(InputError, match="cursor"):
            store.page(JobQuery(cursor=junk))


def test_a_page_of_100000_jobs_is_read_off_an_index(tmp_path):
    store = store_at(tmp_path)
    t = time.perf_counter()
    fill(store, 100_000)
    print(f"\n{store._db.dialect}: 100,000 jobs written in {time.perf_counter() - t:.1f} s")
    cases = {"newest": {}, "bob's": {"owner": "bob"}, "cloud FAILED": {"target": "cloud", "status": "FAILED"},
             "by name": {"sort": "name"}, "oldest": {"sort": "-created"}, "search": {"search": "its-9999"}}
    for what, kw in cases.items():
        first, cursor = store.page(JobQuery(limit=50, **kw))
        deep = None
        for _ in range(20):  # 20 pages in: a cursor's page costs what the first does
            deep, cursor = store.page(JobQuery(limit=50, cursor=cursor, **kw))
        t = time.perf_counter()
        rows, _ = store.page(JobQuery(limit=50, cursor=cursor, **kw))
        took = time.perf_counter() - t
        where = "a scan of every name" if kw.get("search") else "21 pages in"
        print(f"{store._db.dialect}: one page of 50 ({what}, {where}): {took * 1000:.1f} ms")
        assert first and (deep or kw.get("search"))
        assert took < 1.0, f"{what}: {took:.2f} s"  # a generous bound: it is milliseconds
    t = time.perf_counter()
    counts = store.state_counts(time.time() - 86400)
    took = time.perf_counter() - t
    print(f"{store._db.dialect}: jobs per state (the glance line) over 100,000: {took * 1000:.1f} ms")
    assert sum(c["all"] for c in counts.values()) == 100_000 and took < 2.0


def test_each_sort_and_filter_reads_an_index_in_order(tmp_path):
    """No page sorts its rows itself (a temporary B-tree): each walks an index in order and
    stops at its limit. (SQLite's plan; PostgreSQL's indexes are the same.)"""
    from orchestrator.store.job_pages import page_sql

    store = store_at(tmp_path)
    if store._db.dialect != "sqlite":
        pytest.skip("reads SQLite's query plan")
    fill(store, 2000)
    _, cursor = store.page(JobQuery(limit=10))
    for kw in ({}, {"sort": "-created"}, {"sort": "name"}, {"status": "FAILED"}, {"owner": "bob"},
               {"target": "cloud"}, {"kind": "steady"}, {"cursor": cursor}, {"search": "git"}):
        sql, args = page_sql(JobQuery(**kw))
        plan = " / ".join(r[3] for r in store._db.execute("EXPLAIN QUERY PLAN " + sql, args).fetchall())
        assert "USING INDEX" in plan and "TEMP B-TREE" not in plan, (kw, plan)
