"""`orch serve` replicas on one PostgreSQL store (issue 38): each in a home of its own, as on
two machines. One holds the store's lease and runs the scheduler's duties; when it is
killed (SIGKILL) or stopped (SIGTERM), another takes over within seconds. Jobs submitted
through either run once each on the on-prem cluster both reach; a finished job's log
reads the same from both; an upload sent to one is launched by the other; a cron job due
every minute runs once per slot across three slots with the holder killed between two. A
second server on a SQLite store is refused with one message. The test starts its servers
and stops exactly them."""

from __future__ import annotations

import json
import math
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from orchestrator.store import iso
from tests.conftest import run_orch, short_tmp
from tests.integration.conftest import remove_home, wait_until
from tests.integration.test_serve import Server

pytestmark = pytest.mark.integration


def role(server: Server):
    try:
        with urllib.request.urlopen(server.url + "/healthz", timeout=2) as r:
            return json.loads(r.read())["scheduler"]
    except OSError:
        return None


@pytest.fixture
def store(postgres_server):
    from tests import pgserver

    name, url = pgserver.create_schema(postgres_server)
    try:
        yield url
    finally:
        pgserver.drop_schema(postgres_server, name)


def test_one_replica_leads_and_another_takes_over_when_it_dies_or_stops(store, tmp_path):
    homes = [short_tmp(f"orp{i}") for i in range(3)]
    env = {"ORCH_DATABASE_URL": store, "ORCH_SECRET_KEY_FILE": str(tmp_path / "secret_key")}
    servers: list[Server] = []
    try:
        for h in homes[:2]:  # one at a time: a second that fails to start leaves the first stopped
            servers.append(Server(h, env=env))
        wait_until("one replica to lead", lambda: sorted(map(role, servers)) == ["leading", "standby"],
                   timeout=30)
        leader = next(s for s in servers if role(s) == "leading")
        standby = next(s for s in servers if s is not leader)
        time.sleep(3)  # a standby looks every 2 s: still one leader after a few looks
        assert (role(leader), role(standby)) == ("leading", "standby")

        killed = time.monotonic()
        leader.proc.send_signal(signal.SIGKILL)
        leader.proc.wait(10)
        wait_until("the standby to take over", lambda: role(standby) == "leading", timeout=20)
        took_over_s = time.monotonic() - killed
        assert took_over_s < 10, took_over_s
        assert "took on the scheduler's duties" in standby.log.read_text()

        third = Server(homes[2], env=env)  # a rolling restart: the new one waits its turn
        servers.append(third)
        wait_until("the new replica to answer as a standby", lambda: role(third) == "standby", timeout=10)
        stopped = time.monotonic()
        standby.stop()  # SIGTERM: its pass finishes, and the lease is given up
        assert standby.proc.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
        wait_until("the new replica to take over", lambda: role(third) == "leading", timeout=20)
        handed_s = time.monotonic() - stopped
        print(f"\ntaken over {took_over_s:.1f} s after SIGKILL, {handed_s:.1f} s after SIGTERM")
    finally:
        for s in servers:
            s.stop()
        for h in homes:
            remove_home(h)


def test_a_second_server_on_a_sqlite_store_is_refused(tmp_path):
    home = short_tmp("ors")
    first = Server(home, env={"ORCH_DATABASE_URL": ""})
    try:
        second = run_orch(home, "serve", "--port", str(first.port), ORCH_DATABASE_URL="", timeout=60)
        assert second.returncode != 0 and "Traceback" not in second.stderr, second.stderr
        assert (f"another orch serve (pid {first.proc.pid}) serves the SQLite store {home / 'orch.db'}: "
                "a SQLite store has one server") in second.stderr, second.stderr
        assert "database_url" in second.stderr
        assert role(first) == "leading"
    finally:
        first.stop()
        remove_home(home)


# -- jobs, logs, uploads and cron slots across replicas (on the two-node cluster) -------------

def _call(server: Server, token: str, method: str, path: str, body=None, data=None):
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    elif data is not None:
        headers["Content-Type"] = "application/octet-stream"
    req = urllib.request.Request(server.url + path, data=data, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read().decode()
        return json.loads(raw) if r.headers.get_content_type() == "application/json" else raw


def _job(name: str, run: str, extra: str = "") -> str:
    return (f"name: {name}\nrun: {run}\nschedule: {{kind: steady}}\n"
            f"placement: {{allow: [onprem]}}\n{extra}")


def _by_slot(store, sched_id: str) -> dict:
    out: dict = {}
    for r in store.list(limit=1000):
        key = r.idempotency_key or ""
        if key.startswith(f"cron:{sched_id}:"):
            out.setdefault(key.split(":", 2)[2], []).append(r)
    return out


def _launches(servers, job_id: str) -> int:
    """How many times the replicas' logs say they launched the job."""
    return sum(1 for s in servers for line in s.log.read_text().splitlines()
               if f" {job_id} (" in line and "): launched on " in line)


def test_jobs_logs_uploads_and_cron_slots_are_shared_by_replicas_and_survive_a_kill(
        store, cluster, tmp_path):
    from orchestrator.server import auth
    from orchestrator.service.upload import pack
    from orchestrator.store import Store

    db = Store(store)
    token, digest = auth.new_token()
    db.add_token("alice", digest)
    homes = [short_tmp(f"orr{i}") for i in range(3)]
    clock = tmp_path / "clock"
    clock.write_text("0")
    now = time.time()
    boundary = (math.floor(now / 60) + 2) * 60
    offset = boundary - 20 - now  # the replicas' clock starts 20 s before a minute
    env = {"ORCH_DATABASE_URL": store, "ORCH_MODE": "hybrid", "ORCH_RAY_ADDRESS": cluster.address,
           "ORCH_RAY_TOKEN_FILE": str(cluster.token_file),
           "ORCH_SECRET_KEY_FILE": str(tmp_path / "secret_key")}  # one key, as each would have a copy
    args = ("--clock-file", str(clock))
    servers: list[Server] = []
    try:
        for h in homes[:2]:
            servers.append(Server(h, offset, env=env, args=args))
        wait_until("one replica to lead", lambda: sorted(map(role, servers)) == ["leading", "standby"],
                   timeout=30)
        leader = next(s for s in servers if role(s) == "leading")
        standby = next(s for s in servers if s is not leader)

        # A cron job due every minute, registered through the standby.
        sched = _call(standby, token, "POST", "/v1/jobs", {"spec": _job("tick", "echo tick").replace(
            "schedule: {kind: steady}", "schedule: {kind: steady, cron: '* * * * *'}")})["schedule"]
        first_slot = math.ceil((time.time() + offset) / 60) * 60
        assert sched["next_at"] == iso(first_slot)

        # Two jobs through each replica; the same idempotency key twice is one job.
        ids = []
        for i, server in enumerate([leader, standby, leader, standby]):
            got = _call(server, token, "POST", "/v1/jobs", {
                "spec": _job(f"hello-{i}", f"echo hello-{i}"), "idempotency_key": f"k{i}"})
            ids.append(got["id"])
        again = _call(leader, token, "POST", "/v1/jobs", {"spec": _job("hello-1", "echo hello-1"),
                                                        "idempotency_key": "k1"})
        assert again["id"] == ids[1] and again["existing"] is True

        # An upload sent to the standby, the job that runs from it submitted there too: the
        # leader launches it from its own folder, unpacked from the store.
        work = tmp_path / "work"
        work.mkdir()
        (work / "message.txt").write_text("from the upload\n")
        packed = pack(work, 1 << 20)
        sent = _call(standby, token, "POST", "/v1/uploads", data=packed.file.read())
        packed.close()
        assert _call(leader, token, "GET", f"/v1/uploads/{sent['upload']}")["existing"] is True
        up = _call(standby, token, "POST", "/v1/jobs", {
            "spec": _job("from-upload", "cat message.txt", "workdir: ."), "upload": sent["upload"]})
        ids.append(up["id"])
        # A secret value given with a job is held by the replica it was sent to (never
        # stored): the leader hands that job's launch to it.
        held = _call(standby, token, "POST", "/v1/jobs", {
            "spec": _job("with-secret", '\'test "$API_KEY" = s3cr3t-value-9 && echo saw-it\''),
            "secrets": {"API_KEY": "s3cr3t-value-9"}})
        ids.append(held["id"])

        def ended():
            rows = [db.get(i) for i in ids]
            return all(r.status in ("SUCCEEDED", "FAILED", "CANCELLED") for r in rows) and rows
        rows = wait_until("the jobs to end", ended, timeout=240, poll_s=1)
        assert [r.status for r in rows] == ["SUCCEEDED"] * 6, [(r.id, r.status, r.message) for r in rows]
        for rec in rows:
            assert _launches(servers, rec.id) == 1, rec.id
            logs = [_call(s, token, "GET", f"/v1/jobs/{rec.id}/logs") for s in (leader, standby)]
            assert logs[0] == logs[1] == db.kept_log(rec.id), rec.id
        assert "hello-2" in db.kept_log(ids[2]) and "from the upload" in db.kept_log(ids[4])
        assert "saw-it" in db.kept_log(ids[5]) and "handed to the replica" in leader.log.read_text()
        assert f"{ids[5]} (with-secret, owner alice): launched on" in standby.log.read_text()
        assert (Path(homes[servers.index(leader)]) / "uploads" / sent["upload"] / "message.txt").is_file()

        # The first slot runs; the holder is killed; the standby runs the next two.
        wait_until("the first slot's job", lambda: _by_slot(db, sched["id"]).get(iso(first_slot)),
                   timeout=first_slot - (time.time() + offset) + 60)
        leader.proc.send_signal(signal.SIGKILL)
        leader.proc.wait(10)
        wait_until("the standby to take over", lambda: role(standby) == "leading", timeout=20)
        servers.append(Server(homes[2], offset, env=env, args=args))  # its replacement
        for slot in (first_slot + 60, first_slot + 120):
            # The replicas' clocks, moved together to 3 s before the slot.
            ahead = float(clock.read_text())
            clock.write_text(str(ahead + slot - 3 - (time.time() + offset + ahead)))
            wait_until(f"the slot {iso(slot)}", lambda s=iso(slot): _by_slot(db, sched["id"]).get(s),
                       timeout=30)
        time.sleep(3)  # a look or two more by each replica: nothing doubles
        by_slot = _by_slot(db, sched["id"])
        assert {k: len(v) for k, v in by_slot.items()} == {
            iso(first_slot): 1, iso(first_slot + 60): 1, iso(first_slot + 120): 1}, by_slot
        events = [e["message"] for e in db.schedule_events(sched["id"])]
        assert not [m for m in events if m.startswith("skipped")], events
        cron_ids = [v[0].id for v in by_slot.values()]
        done = wait_until("the slots' jobs to succeed", lambda: all(
            db.get(i).status == "SUCCEEDED" for i in cron_ids), timeout=120, poll_s=1)
        assert done
    finally:
        for s in servers:
            s.stop()
        for h in homes:
            remove_home(h)
        db.close()
