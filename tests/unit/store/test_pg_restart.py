"""A PostgreSQL store across a database restart: a connection the restart cut is one clear
StoreError (the API's 503), never a driver's traceback; a new one works once the database is
back; the scheduler's lease holder sees it lost the lease and the lease is taken again.

Each test restarts a PostgreSQL server of this module's own (the suite's shared one serves
other tests meanwhile)."""

from __future__ import annotations

import threading
import time

import pytest

from orchestrator.base.errors import StoreError
from orchestrator.store import Store
from orchestrator.store.lease import PgLease


@pytest.fixture(scope="module")
def server():
    from tests import pgserver

    why = pgserver.unavailable()
    if why:
        pytest.skip(f"needs a PostgreSQL server of its own to restart: {why}")
    srv = pgserver.PgServer()
    try:
        srv.start()
        yield srv
    finally:
        srv.stop()


def add_job(store: Store, name: str) -> str:
    return store.create_job(name=name, spec={"name": name}, kind="exploratory", target="local",
                            fingerprint=None).id


def test_a_cut_connection_is_one_store_error_and_a_new_one_works_after(server):
    store = Store(server.url)
    job = add_job(store, "before")
    server.restart()
    for call in (lambda: store.get(job), lambda: add_job(store, "lost")):  # a read, a write
        with pytest.raises(StoreError) as e:
            call()
        assert "the PostgreSQL job store failed" in e.value.message and "ORCH_DATABASE_URL" in e.value.hint
    store.close()
    again = Store(server.url)
    try:
        assert again.get(job).name == "before" and again.get(add_job(again, "after")).name == "after"
    finally:
        again.close()


def test_while_the_database_is_down_opening_the_store_is_a_store_error(server):
    restart = threading.Thread(target=server.restart, kwargs={"down_s": 2.0})
    restart.start()
    try:
        time.sleep(1.0)  # stopped by now: it stops in well under a second
        with pytest.raises(StoreError) as e:
            Store(server.url)
        assert "cannot connect to the PostgreSQL job store" in e.value.message
    finally:
        restart.join()
    Store(server.url).close()


def test_the_lease_holder_sees_the_lease_lost_and_one_replica_takes_it_again(server):
    a, b = PgLease(server.url, "pg", slice_s=0.05), PgLease(server.url, "pg", slice_s=0.05)
    try:
        assert a.held() and not b.held()
        assert a.problem is None and b.problem is None  # b: another holds it, nothing wrong
        server.restart()
        # The restart freed the lock: the holder's next look says so (its connection is gone),
        # and why: not another replica's lease, the database (the scheduler logs which).
        assert a.held() is False and a.problem and a.problem.startswith("pg: ")
        deadline, holders = time.monotonic() + 10, 0
        while time.monotonic() < deadline:
            holders = sum((b.held(), a.held()))
            if holders:
                break
            time.sleep(0.1)
        assert holders == 1  # taken again, by one
        assert sum((a.held(), b.held())) == 1  # and kept
        assert a.problem is None and b.problem is None  # both asked the store again
        woken = threading.Event()
        woken.set()
        a.wait(5.0, woken)  # waiting works on the new connection
    finally:
        a.close()
        b.close()


def test_a_waiting_holder_stops_waiting_when_the_restart_cuts_its_lease(server):
    """The scheduler waits out its period in `wait`: a cut connection ends the wait at once,
    so the holder's next look (which says the lease is gone) does not wait for the period."""
    holder = PgLease(server.url, "pg", slice_s=0.05)
    try:
        assert holder.held()
        restart = threading.Timer(0.5, server.restart, kwargs={"down_s": 2.0})
        restart.start()
        started = time.monotonic()
        holder.wait(30.0, threading.Event())
        waited = time.monotonic() - started
        restart.join()
        assert waited < 5, waited  # the stop, not the 30 s period
        assert holder.held() is True  # back, and free: taken again at the next look
    finally:
        holder.close()


def test_a_followed_log_waits_out_a_database_restart_and_ends_with_its_job(server, tmp_path):
    """`orch logs -f` through the API while the database restarts: the stream keeps polling
    rather than ending on the store's error, and ends when the job does."""
    from fastapi.testclient import TestClient

    from orchestrator.server import auth
    from orchestrator.server.app import create_app
    from orchestrator.server.scheduler import Scheduler
    from orchestrator.settings import Settings

    store = Store(server.url)
    token, digest = auth.new_token()
    store.add_token(f"follower-{time.monotonic_ns()}", digest)
    job = store.create_job(name="waits", spec={"name": "waits", "run": "echo"}, kind="exploratory",
                           target="local", fingerprint=None, info={"queued": True})
    store.close()
    settings = Settings(home=tmp_path / "home", mode="local", database_url=server.url)

    def restart_then_cancel():
        time.sleep(1.5)
        server.restart(down_s=2.0)
        after = Store(server.url)
        after.set_status(job.id, "CANCELLED", "cancelled while followed")
        after.close()

    worker = threading.Thread(target=restart_then_cancel)
    with TestClient(create_app(settings, Scheduler(settings), run_scheduler=False)) as client:
        worker.start()
        started = time.monotonic()
        with client.stream("GET", f"/v1/jobs/{job.id}/logs?follow=true",
                           headers={"Authorization": f"Bearer {token}"}) as r:
            assert r.status_code == 200
            body = r.read().decode()
        worker.join()
    assert "this stream ended" not in body, body
    assert time.monotonic() - started > 3  # it lasted across the outage
