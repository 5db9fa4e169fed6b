"""The scheduler's lease: one holder among `orch serve` replicas on a PostgreSQL store, taken
over when it goes; one server at most on a SQLite store."""

from __future__ import annotations

import threading
import time

import pytest

from orchestrator.base.errors import StoreError
from orchestrator.store.lease import FileLease, PgLease


def test_a_sqlite_store_takes_one_server_and_says_so_to_a_second(tmp_path):
    first = FileLease(tmp_path / "orch.db").take()
    with pytest.raises(StoreError) as e:
        FileLease(tmp_path / "orch.db").take()
    assert "another orch serve (pid " in e.value.message and "a SQLite store has one server" in e.value.message
    assert "PostgreSQL" in e.value.hint
    assert FileLease(tmp_path / "other.db").take()  # another store: another server
    first.close()
    FileLease(tmp_path / "orch.db").take().close()  # free again once the first is gone


def test_one_replica_holds_the_lease_and_another_takes_it_when_it_goes(pg):
    a, b = PgLease(pg, "pg", slice_s=0.05), PgLease(pg, "pg", slice_s=0.05)
    try:
        assert a.held() is True
        assert b.held() is False and a.held() is True  # held again at each look
        a.close()  # its connection closed: as when its process dies
        # PostgreSQL frees the lock once the server's backend of that connection has ended:
        # at once on a quiet machine, a moment later on a loaded one (the suite at load 40).
        deadline = time.monotonic() + 10
        while not b.held() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.held() is True and a.held() is False
    finally:
        a.close()
        b.close()


def test_a_store_in_another_schema_has_a_lease_of_its_own(pg, postgres_base):
    from tests import pgserver

    name, other = pgserver.create_schema(postgres_base)
    a, b = PgLease(pg, "pg"), PgLease(other, "pg")
    try:
        assert a.held() and b.held()
    finally:
        a.close()
        b.close()
        pgserver.drop_schema(postgres_base, name)


def test_a_job_queued_at_a_standby_wakes_the_holder_at_once(pg):
    holder, standby = PgLease(pg, "pg", slice_s=0.05), PgLease(pg, "pg")
    try:
        assert holder.held() and not standby.held()
        threading.Timer(0.3, standby.poke).start()
        started = time.monotonic()
        holder.wait(10.0, threading.Event())
        assert time.monotonic() - started < 3  # the NOTIFY, not the 10 s
        woken = threading.Event()
        woken.set()
        started = time.monotonic()
        holder.wait(10.0, woken)  # this replica's own wake
        assert time.monotonic() - started < 1
    finally:
        holder.close()
        standby.close()


def test_a_lease_whose_database_is_away_is_not_held():
    lease = PgLease("postgresql://orch@127.0.0.1:1/orch", "pg")  # nothing listens on port 1
    assert lease.held() is False
    lease.poke()  # quietly: the holder looks at its next period anyway
    started = time.monotonic()
    lease.wait(0.3, threading.Event())
    assert 0.25 < time.monotonic() - started < 2
