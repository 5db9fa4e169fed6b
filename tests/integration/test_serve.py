"""`orch serve` as a real process on a loopback port, with a temporary store; the CLI as its
client. One real local job end to end (it starts a local Ray, stopped at the end); the rest
needs no Ray. The cron test moves the server's clock (a hidden --now-offset-s) instead of
waiting for real minutes."""

from __future__ import annotations

import json
import math
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

import pytest

from orchestrator.records import JobRow
from orchestrator.server import auth
from orchestrator.store import iso
from tests.conftest import ORCH, ROOT, home_store, orch_env, run_orch, short_tmp, store_at
from tests.integration.conftest import on_session_ray, remove_home
from tests.integration.conftest import wait_until as _wait

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `orch serve` process; stop() ends exactly it."""

    def __init__(self, home: Path, offset_s: float = 0.0, env: Optional[dict] = None, args: tuple = ()):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = home / f"serve-{self.port}.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [ORCH, "serve", "--port", str(self.port), "--period", "1",
                 "--now-offset-s", str(offset_s), *args], env=orch_env(home, **{
                     # a local-only server, trusted with its machine (serve_local_trusted)
                     "ORCH_SERVE_LOCAL_TRUSTED": "true", **(env or {})}), cwd=str(ROOT),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise AssertionError(f"orch serve did not answer: {self.log.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture(scope="module")
def home(postgres_base, ray_home):
    home = on_session_ray(short_tmp("ohs"), ray_home)
    with home_store(home, postgres_base):
        yield from _serve_home(home)


def _serve_home(home: Path):
    proc = run_orch(home, "token", "create", "alice")  # prints the token alone on stdout
    assert proc.returncode == 0 and "shown once" in proc.stderr, proc.stderr
    tokens = {"alice": proc.stdout.strip()}
    store = store_at(home)  # the others straight into the store: quicker
    for name in ("bob", "root"):
        tokens[name], digest = auth.new_token()
        store.add_token(name, digest, admin=name == "root")
    store.close()
    (home / "tokens.json").write_text(json.dumps(tokens))
    try:
        yield home
    finally:
        remove_home(home)


def _token(home: Path, name: str) -> str:
    return json.loads((home / "tokens.json").read_text())[name]


def as_client(server: Server, client_home: Path, who, *args, timeout=300):
    extra = {"ORCH_SERVER": server.url, **({"ORCH_TOKEN": _token(server.log.parent, who)} if who else {})}
    return run_orch(client_home, *args, timeout=timeout, **extra)


@pytest.mark.store_incidental  # tokens on PostgreSQL: test_serve_unit, test_store
def test_tokens_errors_plan_cost_and_cancel_rights_through_the_client(home, client_home, tmp_path):
    server = Server(home)
    try:
        # No token: 401, shown by the CLI as one message, exit 2.
        try:
            urllib.request.urlopen(server.url + "/v1/jobs", timeout=5)
            raise AssertionError("no 401")
        except urllib.error.HTTPError as e:
            assert e.code == 401 and json.loads(e.read())["error"].startswith("this request needs")
        proc = as_client(server, client_home, None, "status")
        assert proc.returncode == 2 and "needs a token, and ORCH_TOKEN is not set" in proc.stderr
        proc = run_orch(client_home, "status", ORCH_SERVER=server.url, ORCH_TOKEN="orch_wrong")
        assert proc.returncode == 2 and "refused the token: unknown or revoked token" in proc.stderr
        # plan and a bad job file: the same output as without a server.
        for args in (("plan", "examples/quickstart.yaml"), ("plan", "examples/quickstart.yaml", "--json")):
            remote, alone = as_client(server, client_home, "bob", *args), run_orch(home, *args)
            assert remote.returncode == alone.returncode == 0, remote.stderr
            assert remote.stdout == alone.stdout
        bad = tmp_path / "bad.yaml"
        bad.write_text("run: echo\nscaling: {num_workers: 0}\n")
        remote, alone = as_client(server, client_home, "bob", "submit", str(bad)), run_orch(home, "submit", str(bad))
        assert remote.returncode == alone.returncode == 2
        assert remote.stderr == alone.stderr and "scaling.num_workers" in remote.stderr
        # Another user's job: 403, exit 2; its owner cancels it. (Recorded here as queued
        # and being launched by a server on another host, so this server leaves it be.)
        store = store_at(home)
        job = store.create_job(name="hers", spec={}, kind="exploratory", target="local",
                               fingerprint=None, owner="alice",
                               info={"queued": True, "launcher": "elsewhere/1/1.0"})
        store.close()
        proc = as_client(server, client_home, "bob", "cancel", job.id)
        assert proc.returncode == 2 and f"{job.id} belongs to alice: bob may not cancel it" in proc.stderr
        proc = as_client(server, client_home, "alice", "cancel", job.id)
        assert proc.returncode == 0 and proc.stdout.strip() == f"{job.id} CANCELLED"
        proc = as_client(server, client_home, "alice", "status", "orch-nothere")
        assert proc.returncode == 2 and "no job 'orch-nothere'" in proc.stderr
        remote, alone = (as_client(server, client_home, "bob", "cost", "--json"),
                         run_orch(home, "cost", "--json"))
        assert json.loads(remote.stdout) == json.loads(alone.stdout)
    finally:
        server.stop()
    proc = run_orch(client_home, "status", ORCH_SERVER=server.url,  # the server is gone
                    ORCH_TOKEN=_token(home, "bob"), ORCH_SERVER_RETRY_S="1")
    assert proc.returncode == 1 and f"cannot reach the orch server at {server.url} (ORCH_SERVER)" in proc.stderr


@pytest.mark.store_incidental  # the client and the server's API, over one store
def test_a_job_submitted_through_the_client_runs_and_a_second_client_sees_it(home, client_home, tmp_path):
    job = tmp_path / "hello.yaml"
    job.write_text("name: hello\nrun: echo hello from $ORCH_JOB_ID\n")
    server = Server(home)
    try:
        proc = as_client(server, client_home, "alice", "submit", str(job), "--json")
        assert proc.returncode == 0, proc.stderr[-3000:]
        rec = json.loads(proc.stdout)
        assert rec["status"] == "SUCCEEDED" and rec["owner"] == "alice" and rec["target"] == "local"
        assert f"hello from {rec['id']}" in proc.stderr  # the log, streamed while it ran
        # Recorded, then launched from the queue; a poll may or may not catch it RUNNING.
        statuses = [h["status"] for h in rec["history"]]
        assert statuses[:2] == ["PENDING", "PENDING"] and statuses[-1] == "SUCCEEDED", statuses
        assert set(statuses[2:-1]) <= {"RUNNING"}, statuses
        seen = json.loads(as_client(server, client_home, "bob", "status", "--json").stdout)
        assert [(j["id"], j["owner"], j["status"]) for j in seen if j["name"] == "hello"] == [
            (rec["id"], "alice", "SUCCEEDED")]
        logs = as_client(server, client_home, "bob", "logs", rec["id"])
        assert logs.returncode == 0 and f"hello from {rec['id']}" in logs.stdout
        remote = as_client(server, client_home, "bob", "status", rec["id"])
        assert remote.stdout == run_orch(home, "status", rec["id"]).stdout
    finally:
        server.stop()


def _cron_jobs(home: Path, sched_id: str) -> dict[str, list[JobRow]]:
    """The jobs of a schedule, by slot (from their idempotency keys)."""
    store = store_at(home)
    try:
        by_slot: dict[str, list[JobRow]] = {}
        for r in store.list(limit=1000):
            key = r.idempotency_key or ""
            if key.startswith(f"cron:{sched_id}:"):
                by_slot.setdefault(key.split(":", 2)[2], []).append(r)
        return by_slot
    finally:
        store.close()


def _passes(server: Server, client_home: Path, tmp_path: Path) -> None:
    """Return once the server's scheduler has made a whole pass (its cron step first) that
    began after this call: a job queued now through the API is launched by a pass, and seen
    to have ended by a later one."""
    probe = tmp_path / "probe.yaml"
    probe.write_text("name: probe\nrun: 'true'\n")
    proc = as_client(server, client_home, "alice", "submit", str(probe), "--detach")
    assert proc.returncode == 0, proc.stderr[-3000:]
    job_id = proc.stdout.strip()

    def ended() -> bool:
        store = store_at(server.log.parent)
        try:
            return store.get(job_id).status not in ("PENDING", "RUNNING")
        finally:
            store.close()

    _wait("a scheduler pass", ended, timeout=60)


def test_a_cron_job_due_every_minute_runs_once_per_slot_across_restarts(home, client_home, tmp_path):
    job = tmp_path / "tick.yaml"
    job.write_text("name: tick\nrun: echo tick\nschedule: {cron: '* * * * *'}\n")
    now = time.time()
    boundary = (math.floor(now / 60) + 2) * 60  # the server's clock starts 12 s before it
    offset = boundary - 12 - now
    server = Server(home, offset)
    try:
        # The slot is the next minute of the server's clock with 6 s left to submit in: a
        # server that took over 6 s to start (0.8 s here alone) waits for the minute after.
        boundary = math.ceil((time.time() + offset + 6) / 60) * 60
        proc = as_client(server, client_home, "alice", "submit", str(job), "--json")
        assert proc.returncode == 0, proc.stderr
        sched = json.loads(proc.stdout)
        assert sched["next_at"] == iso(boundary)
        slot = iso(boundary)
        _wait("the first slot's job", lambda: _cron_jobs(home, sched["id"]).get(slot),
              timeout=boundary - (time.time() + offset) + 60)
        server.stop()
        server = Server(home, offset)  # a restart within the same minute of its clock
        _passes(server, client_home, tmp_path)
        assert len(_cron_jobs(home, sched["id"])[slot]) == 1
        first = _wait("the first run to succeed", lambda: [
            r for r in _cron_jobs(home, sched["id"])[slot] if r.status == "SUCCEEDED"])
        assert first[0].owner == "alice"
        server.stop()
        # Down for five minutes of its clock: only the latest missed slot runs, once.
        server = Server(home, offset + 300)
        late = _wait("the catch-up run", lambda: [s for s in _cron_jobs(home, sched["id"])
                                                  if s >= iso(boundary + 300)], timeout=60)
        _passes(server, client_home, tmp_path)
        by_slot = _cron_jobs(home, sched["id"])
        assert all(len(jobs) == 1 for jobs in by_slot.values()), by_slot
        assert not [s for s in by_slot if iso(boundary + 60) < s < late[0]]  # none in between
        listed = json.loads(as_client(server, client_home, "bob", "status", "--json").stdout)
        assert sorted(j["id"] for j in listed if j["name"] == "tick") == sorted(
            jobs[0].id for jobs in by_slot.values())
    finally:
        server.stop()
    log = [e["message"] for e in store_at(home).schedule_events(sched["id"])]
    assert any(m.startswith("skipped ") and "only the latest missed slot runs" in m for m in log), log
