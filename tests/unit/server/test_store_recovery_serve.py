"""Repairing a damaged store that `orch serve` used: its API tokens (a revoked one stays
revoked) and cron schedules (next_at and last_slot kept, so no slot runs twice) are
salvaged row by row with their logs, and what a damaged page cost is said per table."""

from __future__ import annotations

import json
import shutil

import pytest

from orchestrator.server import auth
from orchestrator.server.scheduler import Scheduler
from orchestrator.settings import Settings
from orchestrator.store import Store, iso
from tests.unit.store.test_store_recovery import BIG, orch

pytestmark = pytest.mark.sqlite_only

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
NIGHT = T0 - 5 * 3600  # 2027-01-15T03:00:00Z: the slot every schedule last ran
DAY = 86_400.0
SCHEDULES = (("nightly", False), ("hourly", True), ("weekly", False))  # (name, paused)


def serve_store(path) -> dict:
    """A store as `orch serve` leaves it: tokens for alice, bob (revoked) and root (admin);
    three schedules (hourly paused), each on a page of its own, that ran NIGHT; two cron
    jobs and four submitted ones, each on a page of its own. Returns the tokens' texts and
    the schedules as stored."""
    store = Store(path)
    tokens = {}
    for name in ("alice", "bob", "root"):
        tokens[name], digest = auth.new_token()
        store.add_token(name, digest, admin=name == "root")
    store.revoke_token("bob")
    scheds = []
    for i, (name, paused) in enumerate(SCHEDULES):
        s = store.add_schedule(name=name, owner="alice", cron="0 3 * * *", spec={"run": "echo"},
                               source_text=f"# SCHED{i}\n{BIG}", source_file=None, next_at=NIGHT)
        events = []
        if i < 2:  # these two recorded a job for their slot; weekly's slot could not run
            job = _job(store, f"MARKC{i}", name, "alice", key=f"cron:{s.id}:{iso(NIGHT)}",
                       info={"queued": True, "schedule": s.id, "slot": iso(NIGHT)})
            events.append((NIGHT, job, f"slot {iso(NIGHT)}: queued {job}"))
        else:
            events.append((NIGHT, None, f"slot {iso(NIGHT)} not run: no such GPU"))
        s = store.schedule_done(s.id, last_slot=NIGHT, next_at=NIGHT + DAY, events=events)
        if paused:
            s = store.pause_schedule(s.id, True, NIGHT + DAY, "paused by alice")
        scheds.append(s)
    for i, owner in enumerate(("alice", "bob", None, "root")):
        _job(store, f"MARK{i:04d}", f"job{i}", owner)
    store.close()  # the last connection out checkpoints the WAL into the file
    return {"tokens": tokens, "schedules": scheds}


def _job(store, marker, name, owner, key=None, info=None) -> str:
    rec = store.create_job(name=name, spec={"run": BIG, "marker": marker}, kind="steady",
                           target="local", fingerprint="fp", owner=owner, idempotency_key=key,
                           info=info)
    store.set_status(rec.id, "RUNNING", "started")
    store.set_status(rec.id, "SUCCEEDED", "done")
    return rec.id


def damage_table_page_of(path, marker: str) -> None:
    """Overwrite the page type byte of the one table leaf page (type 13) holding `marker`:
    an index's copy of the same text (a token's hash) is left alone."""
    data = bytearray(path.read_bytes())
    pages, at = set(), data.find(marker.encode())
    while at != -1:
        if at >= 4096 and data[at // 4096 * 4096] == 13:  # page 1 is sqlite_master's
            pages.add(at // 4096)
        at = data.find(marker.encode(), at + 1)
    assert len(pages) == 1, (marker, pages)
    data[pages.pop() * 4096] = 0xFF
    path.write_bytes(bytes(data))


def _table(store: Store, sql: str) -> list[tuple]:
    return [tuple(r) for r in store._db.execute(sql).fetchall()]


def test_repair_keeps_tokens_revocations_schedules_and_their_logs(orch_home, monkeypatch,
                                                                   capsys):
    path = orch_home / "orch.db"
    made = serve_store(path)
    before = Store(path)
    tokens_before = _table(before, "SELECT * FROM tokens ORDER BY id")
    scheds_before = _table(before, "SELECT * FROM schedules ORDER BY id")
    log_before = _table(before, "SELECT * FROM schedule_events ORDER BY seq")
    before.close()
    damage_table_page_of(path, "MARK0001")  # bob's job

    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--repair-store")
    assert code == 0, out + err
    assert ("salvaged 5 jobs, 15 history events, 3 API tokens (1 revoked), 3 schedules (1 "
            f"paused) and 7 schedule log events into a new store at {path}; unreadable: 1 job "
            "rows\n") in out
    assert "lost API tokens" not in out and "lost schedules" not in out
    assert (f"ok       store            {path}: schema 5, 5 jobs: 5 SUCCEEDED; 3 API tokens "
            "(1 revoked); 3 schedules (1 paused)\n") in out
    assert out.endswith("no problems\n")

    store = Store(path)
    try:
        # Every column as it was: hashes, admin, created_at, revoked_at; next_at, last_slot.
        assert _table(store, "SELECT * FROM tokens ORDER BY id") == tokens_before
        assert _table(store, "SELECT * FROM schedules ORDER BY id") == scheds_before
        assert _table(store, "SELECT * FROM schedule_events ORDER BY seq") == log_before
        alice = store.token_by_hash(auth.hash_token(made["tokens"]["alice"]))
        assert alice["name"] == "alice" and alice["admin"] is False
        assert store.token_by_hash(auth.hash_token(made["tokens"]["root"]))["admin"] is True
        assert store.token_by_hash(auth.hash_token(made["tokens"]["bob"])) is None  # revoked
        assert store.token("bob")["revoked_at"] is not None
        got = {s.name: s for s in store.schedules()}
        for name, paused in SCHEDULES:
            assert (got[name].last_slot, got[name].next_at, got[name].paused) == (
                NIGHT, NIGHT + DAY, paused)
        # New rows after the salvaged ones get new ids, not reused ones.
        store.add_token("dave", auth.new_token()[1])
        assert store._db.execute("SELECT id FROM tokens WHERE name = 'dave'").fetchone()[0] == 4
    finally:
        store.close()

    # The invariant of issue 9: a slot that ran before the damage is not run again.
    sched = Scheduler(Settings(home=orch_home, mode="local"))
    with sched.session() as service:
        assert sched.run_cron(service, NIGHT + 60) == []
        assert sched.run_cron(service, NIGHT + 3600) == []


def test_a_damaged_schedules_page_loses_only_that_schedule_and_says_which(orch_home, tmp_path,
                                                                          monkeypatch, capsys):
    path = orch_home / "orch.db"
    made = serve_store(path)
    hourly = made["schedules"][1]
    damage_table_page_of(path, "SCHED1")
    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--json")
    store_check = json.loads(out)["checks"][0]  # it reads the schedules too, not just the jobs
    assert code == 1 and store_check["state"] == "problem", store_check
    assert "the job store is damaged" in store_check["detail"] and "API token" in store_check["fix"]
    text_home = tmp_path / "copy"  # the same damaged file, for the text report
    text_home.mkdir(mode=0o700)
    shutil.copy2(path, text_home / "orch.db")

    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--repair-store", "--json")
    assert code == 0, out + err
    repair = json.loads(out)["repair"]
    assert repair["tables"] == {
        "jobs": {"salvaged": 6, "unreadable": 0, "dropped": 0, "more_may_be_lost": False},
        "job_events": {"salvaged": 18, "unreadable": 0, "dropped": 0, "more_may_be_lost": False},
        "tokens": {"salvaged": 3, "unreadable": 0, "dropped": 0, "more_may_be_lost": False,
                   "revoked": 1},
        "schedules": {"salvaged": 2, "unreadable": 1, "dropped": 0, "more_may_be_lost": False,
                      "paused": 0},
        # hourly's own log: registered, its slot, paused
        "schedule_events": {"salvaged": 4, "unreadable": 0, "dropped": 3,
                            "more_may_be_lost": False}}
    assert (repair["jobs"], repair["events"], repair["unreadable_jobs"]) == (6, 18, 0)
    assert repair["lost_schedules"] == [{"id": hourly.id, "name": "hourly"}]
    assert repair["lost_token_names"] == []
    store = Store(path)
    try:
        assert sorted(s.name for s in store.schedules()) == ["nightly", "weekly"]
        assert all(s.next_at == NIGHT + DAY for s in store.schedules())
        assert store.schedule_events(hourly.id) == []
        # Its job is kept, under its idempotency key: the slot it ran is still taken.
        job = store.list(limit=10, statuses=("SUCCEEDED",))
        assert f"cron:{hourly.id}:{iso(NIGHT)}" in {j.idempotency_key for j in job}
    finally:
        store.close()

    code, out, err = orch(monkeypatch, capsys, text_home, "doctor", "--repair-store")
    assert code == 0, out + err
    assert ("salvaged 6 jobs, 18 history events, 3 API tokens (1 revoked), 2 schedules and 4 "
            "schedule log events into a new store at "
            f"{text_home / 'orch.db'}; unreadable: 1 schedule rows\n") in out
    assert ("lost schedules: they no longer run; send their job files to `orch serve` again "
            f"(each starts at its next slot); salvaged jobs and logs name these: {hourly.id} "
            "(hourly); their 3 log events stay only in the file kept aside\n") in out
    assert "lost API tokens" not in out


def test_a_damaged_tokens_page_names_whose_token_is_gone(orch_home, monkeypatch, capsys):
    path = orch_home / "orch.db"
    made = serve_store(path)
    damage_table_page_of(path, auth.hash_token(made["tokens"]["alice"]))  # all three share it

    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--repair-store")
    assert code == 0, out + err
    assert ("salvaged 6 jobs, 18 history events, 0 API tokens, 3 schedules (1 paused) and 7 "
            f"schedule log events into a new store at {path}; unreadable at the end, so not "
            "counted: API token rows\n") in out
    assert ("lost API tokens: a lost live token is refused (401) until its holder is given a new "
            "one (`orch token create NAME`); salvaged jobs and schedules name owners whose "
            "token is gone: alice, bob, root\n") in out
    store = Store(path)
    try:
        assert store.tokens() == []
        assert store.token_by_hash(auth.hash_token(made["tokens"]["alice"])) is None
        assert len(store.schedules()) == 3
    finally:
        store.close()


def test_a_schema_1_store_repairs_as_before(orch_home, tmp_path, monkeypatch, capsys):
    from orchestrator import store as store_mod
    from tests.unit.store.test_store_recovery import damage_page_of, fill

    path = orch_home / "orch.db"
    with monkeypatch.context() as m:
        m.setattr(store_mod, "SCHEMA_VERSION", 1)
        fill(path, 6)
    damage_page_of(path, "MARK0002")
    json_home = tmp_path / "copy"
    json_home.mkdir(mode=0o700)
    shutil.copy2(path, json_home / "orch.db")

    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--repair-store")
    assert code == 0, out + err
    assert (f"salvaged 5 jobs and 15 history events into a new store at {path}; unreadable: 1 "
            "job rows\n") in out
    assert f"{path}: schema 5, 5 jobs: 5 SUCCEEDED\n" in out  # migrated; nothing of serve's
    code, out, err = orch(monkeypatch, capsys, json_home, "doctor", "--repair-store", "--json")
    assert code == 0, out + err
    repair = json.loads(out)["repair"]
    assert (repair["jobs"], repair["events"], repair["unreadable_jobs"]) == (5, 15, 1)
    for table in ("tokens", "schedules", "schedule_events"):
        assert repair["tables"][table]["salvaged"] == 0 == repair["tables"][table]["unreadable"]
    assert repair["lost_schedules"] == [] and repair["lost_token_names"] == []
