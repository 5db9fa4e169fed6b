"""The job store on PostgreSQL: what differs from SQLite, and what a team's user sees.

The first tests need no server and run on each store; the rest need PostgreSQL (`--store
both`, as `make test` runs, or `--store postgresql`: tests/conftest.py starts the server) and
skip on SQLite.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

from orchestrator.base.errors import StoreError
from orchestrator.store import Store
from tests.conftest import run_orch, store_at

SECRET = "s3cr3t-pw"
DOWN = f"postgresql://orch:{SECRET}@127.0.0.1:1/orch"  # port 1: nothing listens there


def test_an_unreachable_database_is_one_message_without_its_password(orch_home):
    proc = run_orch(orch_home, "status", ORCH_DATABASE_URL=DOWN)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "postgresql://orch:***@127.0.0.1:1/orch: cannot connect to the PostgreSQL job store" \
        in proc.stderr, proc.stderr
    assert "ORCH_DATABASE_URL" in proc.stderr and SECRET not in proc.stderr + proc.stdout


def test_a_database_url_that_is_not_postgresql_is_bad_input(orch_home):
    proc = run_orch(orch_home, "status", ORCH_DATABASE_URL="mysql://u:pw@db/orch")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "database_url" in proc.stderr and "postgresql://" in proc.stderr
    assert "pw@" not in proc.stderr


def test_config_show_never_prints_the_password(orch_home):
    proc = run_orch(orch_home, "config", "show", "--json", ORCH_DATABASE_URL=DOWN)
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout and '"database_url"' in proc.stdout


def test_another_programs_tables_are_left_alone(pg):
    import psycopg

    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute("CREATE TABLE invoices (id int)")
    with pytest.raises(StoreError, match="another program's tables \\(invoices\\)") as e:
        Store(pg)
    assert "CREATE SCHEMA orch" in e.value.hint
    with psycopg.connect(pg, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema "
                            "= current_schema()").fetchone()[0] == 1  # nothing was created


def test_a_missing_schema_is_named(pg):
    url = pg.rsplit("options=", 1)[0] + "options=-csearch_path%3Dno_such_schema"
    with pytest.raises(StoreError, match="schemas in the connection's search_path exists"):
        Store(url)


def test_text_and_flags_survive_the_round_trip(pg, tmp_path):
    store = store_at(tmp_path)
    rec = store.create_job(name="nul\x00name", spec={"run": "x\x00y"}, kind=None, target=None,
                           fingerprint=None, info={"queued": True})
    store.update(rec.id, cancel_requested=True, message="stopped \x00 here")
    got = store.get(rec.id)
    assert got.name == "nul\ufffdname" and got.spec == {"run": "x\x00y"}  # JSON escapes it
    assert got.cancel_requested is True and got.message == "stopped \ufffd here"
    raw = store._db.execute("SELECT created_at FROM jobs WHERE id = ?", (rec.id,)).fetchone()
    assert isinstance(raw["created_at"], float) and got.created_at > 1.7e9  # not a 4-byte real


def test_two_servers_claiming_one_job_never_both_win(pg, tmp_path):
    """claim() is a read-then-write: under PostgreSQL's advisory lock, as under SQLite's
    IMMEDIATE transaction, exactly one of many racing claimers gets each job."""
    store = store_at(tmp_path)
    ids = [store.create_job(name=f"q{i}", spec={}, kind=None, target=None, fingerprint=None,
                            info={"queued": True}).id for i in range(20)]
    store.close()
    wins: dict[str, list[str]] = {i: [] for i in ids}
    barrier = threading.Barrier(6)

    def claimer(n: int) -> None:
        mine = Store(os.environ["ORCH_DATABASE_URL"])
        barrier.wait()
        for job_id in ids:
            if mine.claim(job_id, f"server-{n}"):
                wins[job_id].append(f"server-{n}")
        mine.close()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(len(w) == 1 for w in wins.values()), wins
    store = store_at(tmp_path)
    assert all(store.get(i).info.launcher == wins[i][0] for i in ids)


def test_doctor_checks_a_postgresql_store(pg, orch_home):
    store = store_at(orch_home)
    rec = store.create_job(name="a", spec={}, kind=None, target=None, fingerprint=None)
    store.set_status(rec.id, "SUCCEEDED", "done")
    store.add_token("alice", "d" * 64)
    store.close()
    proc = run_orch(orch_home, "doctor", "--json")
    check = next(c for c in json.loads(proc.stdout)["checks"] if c["name"] == "store")
    assert check["ok"] is True, check
    assert check["detail"].startswith("postgresql://orch:***@127.0.0.1:") or "ORCH_TEST" in os.environ
    assert "PostgreSQL 1" in check["detail"] and "schema 5, 1 job: 1 SUCCEEDED; 1 live API token; " \
        "0 schedules" in check["detail"]
    proc = run_orch(orch_home, "doctor", "--repair-store")
    assert proc.returncode == 2 and "--repair-store mends a SQLite store" in proc.stderr
    assert "pg_dump" in proc.stderr and "Traceback" not in proc.stderr


def test_doctor_names_an_unreachable_postgresql_store(orch_home):
    proc = run_orch(orch_home, "doctor", "--json", ORCH_DATABASE_URL=DOWN)
    check = next(c for c in json.loads(proc.stdout)["checks"] if c["name"] == "store")
    assert check["ok"] is False and "cannot connect to the PostgreSQL job store" in check["detail"]
    assert SECRET not in proc.stdout + proc.stderr
