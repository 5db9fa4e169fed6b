"""`orch serve` holds queued jobs until their target has room: a real server on a loopback
port, a temporary store, and a local Ray with two CPUs (`local.cpus`). The two jobs are
`run:` jobs that ask for both CPUs (`resources.cpus: 2`): quick, and held only by orch's
own count, since Ray shows a `run:` command as using nothing; a Ray Train job of two
workers holds the same, with a minute more to wait on a busy 2-core machine."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from orchestrator.server import auth
from tests.conftest import short_tmp, store_at
from tests.integration.conftest import on_session_ray, remove_home, wait_until
from tests.integration.test_serve import Server

pytestmark = pytest.mark.integration

# Both CPUs of the local Ray (local.cpus = 2) each.
JOB = "name: {name}\nresources: {{cpus: 2}}\nrun: {run}\n"
# Four Ray Train workers of one CPU each: placement takes it (the local offer has no
# `resources.cpus` to compare), so only the queue can tell it never fits.
HUGE = """name: huge
train: {job: image-classification}
scaling: {num_workers: 4, use_gpu: false}
"""


@pytest.fixture
def home(ray_home):
    home = on_session_ray(short_tmp("ohq"), ray_home)
    (home / "config.toml").write_text("[local]\ncpus = 2\n")
    store = store_at(home)
    token, digest = auth.new_token()
    store.add_token("alice", digest)
    store.close()
    (home / "token").write_text(token)
    try:
        yield home
    finally:
        remove_home(home)


def _api(server: Server, method: str, path: str, body: dict | None = None) -> dict:
    token = (server.log.parent / "token").read_text()
    req = urllib.request.Request(server.url + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:  # the server's own traceback says why
        raise AssertionError(f"{method} {path}: HTTP {e.code} {e.read()[:500]!r}\n"
                             f"server log:\n{server.log.read_text()[-6000:]}") from None


def _history(home: Path, job_id: str) -> list[tuple]:
    store = store_at(home)
    try:
        return [(h["status"], h["message"]) for h in store.history(job_id)]
    finally:
        store.close()


def _submit(server: Server, home: Path, name: str, text: str) -> str:
    path = home / f"{name}.yaml"
    path.write_text(text)
    return _api(server, "POST", "/v1/jobs", {"spec": path.read_text(), "file": str(path)})["id"]


def test_a_second_job_waits_for_room_while_the_first_runs_then_runs(home):
    started = time.monotonic()
    server = Server(home)
    try:
        first = _submit(server, home, "first", JOB.format(name="first", run="sleep 12"))
        second = _submit(server, home, "second", JOB.format(name="second", run="echo second ran"))
        third = _submit(server, home, "third", JOB.format(name="third", run="echo third ran"))
        huge = _submit(server, home, "huge", HUGE)

        def job(job_id: str) -> dict:
            return _api(server, "GET", f"/v1/jobs/{job_id}")

        gone = wait_until("the 4-worker job to fail", lambda: (
            (r := job(huge))["status"] == "FAILED" and r), timeout=60)
        assert gone["message"] == (
            "never launched: it needs 4 CPU, and local has 2 CPU in all, so it would wait "
            "forever; ask for fewer workers or GPUs, or place it elsewhere (placement.allow)")
        assert gone["backend_id"] is None

        wait_until("the first job to run", lambda: job(first)["status"] == "RUNNING", timeout=90)
        waiting = "waiting for 2 CPU on local: 0 CPU free of 2 CPU; 1st in line for local"
        held = wait_until("the second job to say what it waits for", lambda: (
            (r := job(second))["message"] == waiting and r), timeout=30)
        assert held["status"] == "PENDING" and held["backend_id"] is None
        assert held["run"]["queued"] is True
        # The third waits behind the second (strict order), shows in the queue, and cancels.
        behind = (f"waiting for 2 CPU on local: 2nd in line for local, after {second} (each "
                  "target starts its line in order)")
        wait_until("the third job to wait", lambda: job(third)["message"] == behind, timeout=30)
        queue = _api(server, "GET", "/v1/summary")["queue"]
        assert [(q["id"], q["position"], q["target"], q["in_line"], q["waiting_for"])
                for q in queue] == [(second, 1, "local", 1, waiting), (third, 2, "local", 2, behind)]
        cancelled = _api(server, "POST", f"/v1/jobs/{third}/cancel")
        assert (cancelled["status"], cancelled["message"]) == ("CANCELLED", "cancelled before launch")
        assert [q["id"] for q in _api(server, "GET", "/v1/summary")["queue"]] == [second]

        def first_ended() -> bool:
            # Read in this order, a launched second job with the first still running is the
            # second started too early; launched with the first ended is the queue's work
            # between two looks (the same scheduler pass records the end and launches).
            launched = job(second)["backend_id"] is not None
            ended = job(first)["status"] in ("SUCCEEDED", "FAILED")
            assert ended or not launched, "the second job launched while the first still ran"
            return ended

        wait_until("the first job to end", first_ended, timeout=150)
        done = [wait_until(f"{i} to end", lambda i=i: (
            (r := job(i))["status"] in ("SUCCEEDED", "FAILED", "CANCELLED") and r), timeout=150)
            for i in (first, second)]
    finally:
        server.stop()
    assert [r["status"] for r in done] == ["SUCCEEDED", "SUCCEEDED"], [r["message"] for r in done]
    one, two = (r["run"] for r in done)
    # Ray's own clock: the second job reached Ray only after the first one had ended.
    assert two["backend_start"] >= one["backend_end"], (one, two)
    assert _history(home, third)[-1] == ("CANCELLED", "cancelled before launch")
    # A server pass every second, yet the wait is noted once per change, not per pass.
    notes = [h["message"] for h in done[1]["history"] if h["message"].startswith("waiting for")]
    assert notes[0] == waiting and len(notes) <= 3, notes
    assert all(a != b for a, b in zip(notes, notes[1:])), notes
    print(f"\nwait noted {len(notes)}x: {notes}; took {time.monotonic() - started:.1f} s")
