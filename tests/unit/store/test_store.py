"""The job store: records, status history, concurrency, schema version and migrations.

Run on SQLite, and on PostgreSQL too with `pytest --store both` (make test; tests/conftest.py)."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import stat

import pytest

from orchestrator import store as store_mod
from orchestrator.base.errors import NotFound, StoreError
from orchestrator.records import JobDetail, JobRow
from orchestrator.store import SCHEMA_VERSION, Store
from tests.conftest import store_at, store_where


def _new(store: Store, **kw) -> JobRow:
    args = dict(name="j", spec={"run": "echo"}, kind="exploratory", target="local", fingerprint="fp1")
    args.update(kw)
    return store.create_job(**args)


def test_record_lifecycle_and_history(tmp_path):
    store = store_at(tmp_path)
    rec = _new(store)
    assert rec.status == "PENDING" and rec.id.startswith("orch-")
    store.update(rec.id, backend_id="b-1")
    store.set_status(rec.id, "RUNNING", "started", metrics={"epoch": 1})
    store.set_status(rec.id, "RUNNING", "still running", metrics={"epoch": 2})
    done = store.set_status(rec.id, "SUCCEEDED", "done", metrics={"epoch": 3})
    assert done.status == "SUCCEEDED" and done.metrics.to_json() == {"epoch": 3}
    assert done.started_at <= done.finished_at
    # A finished job stays finished: a late RUNNING or FAILED changes nothing.
    again = store.set_status(rec.id, "FAILED", "late")
    assert again.status == "SUCCEEDED"
    # A new message in the same state is news too; a finished job's late news is not.
    assert [(h["status"], h["message"]) for h in store.history(rec.id)] == [
        ("PENDING", "recorded"), ("RUNNING", "started"), ("RUNNING", "still running"),
        ("SUCCEEDED", "done")]
    pub = JobDetail.from_history(done, store.history(rec.id)).to_json()
    for key in ("id", "name", "status", "kind", "target", "created_at", "metrics"):
        assert key in pub


def test_jobs_are_counted_by_state_target_and_kind_in_one_query(tmp_path):
    store = store_at(tmp_path)
    assert store.counts() == []
    for target, kind in (("local", "exploratory"), ("local", "exploratory"), ("cloud", "steady"),
                         ("onprem", None)):
        _new(store, target=target, kind=kind)
    done = _new(store, target="local")
    store.set_status(done.id, "SUCCEEDED", "done")
    assert [tuple(c) for c in store.counts()] == [
        ("PENDING", "cloud", "steady", 1), ("PENDING", "local", "exploratory", 2),
        ("PENDING", "onprem", None, 1), ("SUCCEEDED", "local", "exploratory", 1)]
    assert store.counts()[0].n == 1 and store.counts()[0].status == "PENDING"


def test_prefix_lookup_and_not_found(tmp_path):
    store = store_at(tmp_path)
    rec = _new(store)
    assert store.get(rec.id[:9]).id == rec.id
    with pytest.raises(NotFound):
        store.get("orch-nothere")


def test_idempotency_key_returns_the_same_job(tmp_path):
    store = store_at(tmp_path)
    a = _new(store, idempotency_key="k1")
    b = _new(store, idempotency_key="k1")
    assert a.id == b.id and len(store.list()) == 1


def test_schema_version_and_a_newer_store(tmp_path):
    store = store_at(tmp_path / "home")
    assert store.schema_version == SCHEMA_VERSION
    store.close()
    store_at(tmp_path / "home").close()  # migrations re-run safely
    store = store_at(tmp_path / "home")
    store._db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    store.close()
    with pytest.raises(StoreError, match="newer orch") as e:
        store_at(tmp_path / "home")
    assert "postgresql://" not in str(e.value) or ":***@" in str(e.value)  # never the password


@pytest.mark.sqlite_only
def test_file_mode(tmp_path):
    path = tmp_path / "home" / "orch.db"
    Store(path).close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta").fetchone() == (str(SCHEMA_VERSION),)
    db.close()


def test_a_schema_1_store_is_migrated_with_its_jobs(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", 1)
    old = store_at(tmp_path)
    rec = _new(old)
    old.set_status(rec.id, "SUCCEEDED", "done")
    assert old.schema_version == 1 and "tokens" not in old._db.tables()
    old.close()
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", SCHEMA_VERSION)
    store = store_at(tmp_path)
    assert store.schema_version == SCHEMA_VERSION == 5
    got = store.get(rec.id)
    assert got.status == "SUCCEEDED" and got.owner is None and got.priority == 0
    assert [h["status"] for h in store.history(rec.id)] == ["PENDING", "SUCCEEDED"]
    store.add_token("ann", "h" * 64)  # the schema-2 tables exist now
    assert store.token_by_hash("h" * 64)["name"] == "ann"


@pytest.mark.sqlite_only
def test_corrupt_store_is_a_clear_error(tmp_path):
    path = tmp_path / "orch.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="cannot open the job store"):
        Store(path)


def _writer(path: str, n: int) -> None:
    store = Store(path)
    for i in range(n):
        rec = _new(store, name=f"w{os.getpid()}-{i}")
        store.set_status(rec.id, "RUNNING", "r")
        store.set_status(rec.id, "SUCCEEDED", "s")


def test_concurrent_writers(tmp_path):
    path = str(store_where(tmp_path))
    Store(path).close()
    procs = [mp.get_context("spawn").Process(target=_writer, args=(path, 15)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = Store(path)
    recs = store.list(limit=1000)
    assert len(recs) == 60
    for r in recs:
        assert [h["status"] for h in store.history(r.id)] == ["PENDING", "RUNNING", "SUCCEEDED"]


def test_an_id_prefix_is_matched_literally(tmp_path):
    store = store_at(tmp_path)
    rec = store.create_job(name="a", spec={}, kind=None, target=None, fingerprint=None,
                           job_id="orch-1234abcd")
    assert store.get("orch-12").id == rec.id
    for pattern in ("o_ch-", "%", "orch-1_34", "orch%"):  # wildcards in LIKE, not in an id
        with pytest.raises(NotFound):
            store.get(pattern)


def test_a_schedule_removed_during_a_scheduler_pass_is_left_gone(tmp_path):
    store = store_at(tmp_path)
    s = store.add_schedule(name="n", owner="ann", cron="* * * * *", spec={}, source_text="run: x",
                           source_file=None, next_at=60.0)
    store.remove_schedule(s.id)
    # The pass that read it before the removal moves it on: nothing to move, and no error.
    assert store.schedule_done(s.id, last_slot=60.0, next_at=120.0,
                               events=[(60.0, "orch-1", "slot ran")]) is None
    assert store.schedules() == [] and store.schedule_events(s.id) == []


def test_a_newer_store_that_only_added_is_used_and_one_that_changed_is_refused(tmp_path, monkeypatch):
    """Replicas upgrade one by one: code of schema N works on a store a replica with N+1
    brought to N+1, where N+1 only added tables (schema.ADDITIVE)."""
    from orchestrator.store import schema

    store = store_at(tmp_path)
    assert store._db.execute("SELECT value FROM meta WHERE key = 'compatible_from'"
                             ).fetchone()["value"] == f"{SCHEMA_VERSION}:3"  # 4 and 5 only added
    store.close()
    newer = {**store_mod._MIGRATIONS, SCHEMA_VERSION + 1: ["CREATE TABLE extra (x INTEGER)"],
             SCHEMA_VERSION + 2: ["CREATE TABLE more (x INTEGER)"]}
    monkeypatch.setattr(store_mod, "_MIGRATIONS", newer)
    monkeypatch.setattr(schema, "ADDITIVE", {4, 5, SCHEMA_VERSION + 1, SCHEMA_VERSION + 2})
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 2)
    store_at(tmp_path).close()  # a replica of the newer orch migrates it
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", SCHEMA_VERSION)
    old = store_at(tmp_path)  # this orch still uses it
    assert old.schema_version == SCHEMA_VERSION + 2 and _new(old).status == "PENDING"
    old.close()
    monkeypatch.setattr(store_mod, "_MIGRATIONS", {**newer, SCHEMA_VERSION + 3: [
        "ALTER TABLE jobs ADD COLUMN changed TEXT NOT NULL DEFAULT 'x'"]})
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", SCHEMA_VERSION + 3)  # not additive
    store_at(tmp_path).close()
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", SCHEMA_VERSION)
    with pytest.raises(StoreError, match="newer orch"):
        store_at(tmp_path)


def test_a_plan_reads_what_it_learns_from_without_the_runs_telemetry(tmp_path):
    """`learning_runs` gives the rows `runs_for_fingerprint` and `list` give, with only the
    metrics planning reads; a row whose metrics an older orch rewrote, or wrote before the
    note beside them existed, is read whole."""
    import time

    from orchestrator.decision.models import PastRun
    from orchestrator.records.metrics import learned_part

    store = store_at(tmp_path)
    series = [{"t": 30 * i, "util": 71.3, "mem_gb": 9.4} for i in range(50)]
    ids = []
    for i, fp in enumerate(["fp1", "fp2", "fp1", "fp3", "fp2"]):
        rec = _new(store, fingerprint=fp, decision={"choice": {"target": "onprem", "gpu": "A100", "count": 2}})
        metrics = {"epoch": 3, "wall_s": 100.0 + i, "samples_per_sec": 1000.0 * (i + 1), "data_fraction": 0.25,
                   "run_settings": {"gpu_name": "NVIDIA A100-SXM4-40GB", "precision": "bf16"},
                   "telemetry": {"workers": {"0": {"series": series}}}, "loss": float("nan")}
        store.set_status(rec.id, "SUCCEEDED" if i != 3 else "FAILED", "done", metrics=metrics)
        ids.append(rec.id)
    now, since = time.time(), time.time() - 3600

    def same(lean, whole):
        assert [r.id for r in lean] == [r.id for r in whole]
        # Every column but the metrics as the whole row has it (a column added to the jobs
        # table and not to the learning read's list would show here).
        assert [r.model_dump(exclude={"metrics"}) for r in lean] == \
            [r.model_dump(exclude={"metrics"}) for r in whole]
        assert [PastRun.from_row(r) for r in lean] == [PastRun.from_row(r) for r in whole]
        assert [r.metrics.to_dict() for r in lean] == [learned_part(r.metrics.to_dict()) for r in whole]

    mine, team = store.learning_runs("fp1", 10, since)
    same(mine, store.runs_for_fingerprint("fp1"))
    same(team, store.list(10, ("SUCCEEDED",), since))
    assert "telemetry" not in mine[0].metrics.to_dict() and mine[0].metrics.wall_s == 100.0
    assert [r.id for r in store.learning_runs("fp1", 2, since)[1]] == [ids[4], ids[2]]
    assert store.learning_runs("fp1", 10, now + 60)[1] == []

    # An older orch rewrites one run's metrics and leaves the note as it was; another row
    # has no note at all (written before schema 5): both are read whole.
    with store._write() as db:
        db.execute("UPDATE jobs SET metrics_json = ? WHERE id = ?",
                   ('{"wall_s": 7.0, "samples_per_sec": 5.0}', ids[0]))
        db.execute("UPDATE jobs SET learned_json = NULL WHERE id = ?", (ids[2],))
    mine, _ = store.learning_runs("fp1", 10, since)
    assert [r.metrics.to_dict() for r in mine] == [{"wall_s": 7.0, "samples_per_sec": 5.0},
                                                   learned_part(store.get(ids[2]).metrics.to_dict())]
    same(mine, store.runs_for_fingerprint("fp1"))
