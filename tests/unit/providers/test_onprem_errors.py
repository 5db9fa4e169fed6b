"""An on-prem address that is wrong or dead: one clear message naming it, in seconds."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from orchestrator.decision.capacity import Running, estimate_start
from providers.local_ray import _free_port
from tests.conftest import run_orch

JOB = "name: nightly\nschedule: {kind: steady}\nplacement: {allow: [onprem]}\nrun: echo hi\n"
INVENTORY = '[[onprem]]\ngpu = "CPU"\ncount = 1\ncpus = 4\npurchase_price = 3000\n'


@pytest.fixture
def not_ray():
    """An HTTP server on loopback that is not a Ray dashboard."""
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("kind", ["closed port", "not ray"])
def test_bad_address_is_exit_2_naming_it(orch_home, tmp_path, not_ray, kind):
    address = f"http://127.0.0.1:{_free_port()}" if kind == "closed port" else not_ray
    (orch_home / "config.toml").write_text(INVENTORY)
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    start = time.monotonic()
    proc = run_orch(orch_home, "submit", str(job), ORCH_MODE="hybrid", ORCH_RAY_ADDRESS=address)
    took = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr
    assert f"on-prem: {'cannot reach Ray at ' if kind == 'closed port' else ''}{address}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 15, f"took {took:.1f}s"
    assert not (orch_home / "orch.db").exists()
    status = run_orch(orch_home, "cluster", "status", ORCH_RAY_ADDRESS=address)
    assert status.returncode == 1 and address in status.stderr


def test_a_dead_cluster_without_an_inventory_is_named_in_the_plan_and_the_refusal(orch_home, tmp_path):
    """The cluster is the only on-prem offer and it does not answer: the refusal says so,
    not "nothing fits" (issue 34); in seconds, from a real closed loopback port."""
    address = f"http://127.0.0.1:{_free_port()}"
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    env = dict(ORCH_MODE="hybrid", ORCH_RAY_ADDRESS=address)
    why = f"on-prem: cannot reach Ray at {address}: [Errno 111] Connection refused; check ORCH_RAY_ADDRESS"
    start = time.monotonic()
    plan = run_orch(orch_home, "plan", str(job), "--json", **env)
    took = time.monotonic() - start
    assert plan.returncode == 0, plan.stderr
    d = json.loads(plan.stdout)
    assert d["choice"] is None and d["refusal"].startswith(why)
    onprem = [a for a in d["alternatives"] if a["target"] == "onprem"]
    assert len(onprem) == 1 and onprem[0]["excluded"].startswith(why)
    assert onprem[0]["price_per_hour"] is None and onprem[0]["est_cost"] is None  # unknown
    assert why in " ".join(d["notes"])
    assert took < 10, f"plan took {took:.1f}s"
    start = time.monotonic()
    proc = run_orch(orch_home, "submit", str(job), **env)
    took = time.monotonic() - start
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"no place to run this job: {why}" in " ".join(proc.stderr.split())
    assert took < 10, f"submit took {took:.1f}s"
    table = " ".join(run_orch(orch_home, "plan", str(job), **env).stdout.split())
    assert "│ onprem │" in table and f"no placement: {why}" in table


def test_cluster_status_without_a_cluster(orch_home):
    proc = run_orch(orch_home, "cluster", "status")
    assert proc.returncode == 2 and "ORCH_RAY_ADDRESS" in proc.stderr


@pytest.mark.parametrize("free,jobs,need,now,minutes", [
    ((4, 0), [], (2, 0), True, 0.0),                                  # room now
    ((0, 0), [Running(4, 0, 600)], (2, 0), False, 10.0),              # one job ends in 10 min
    ((1, 0), [Running(1, 0, 60), Running(2, 0, 1200)], (2, 0), False, 1.0),  # the first to end frees enough
    ((0, 0), [Running(4, 0, None)], (2, 0), False, None),             # nobody knows when
    ((4, 0), [Running(4, 0, None, queued=True)], (2, 0), False, None),  # a queued job goes first
    ((0, 0), [], (2, 0), False, None),                                # too big for the cluster
    ((8, 1), [Running(0, 2, 300)], (0, 2), False, 5.0),              # GPUs, not CPUs, decide
    # A small pool with a queue longer than itself: queued plus requested GPUs exceed the
    # pool, yet each queued job starts as others end, so the wait is known.
    ((0, 0), [Running(0, 4, 3600), Running(0, 4, 7200, queued=True)], (0, 1), False, 180.0),
    ((0, 0), [Running(0, 2, 600), Running(0, 2, 1200), Running(0, 2, 1800, queued=True),
              Running(0, 2, 600, queued=True)], (0, 2), False, 30.0),
    ((0, 0), [Running(0, 4, 3600), Running(0, 5, 600, queued=True)], (0, 1), False, None),
])
def test_estimate_start(free, jobs, need, now, minutes):
    cap = estimate_start(free[0], free[1], jobs, need[0], need[1], "test")
    assert cap.can_start_now is now
    assert cap.wait_minutes == minutes


def test_status_of_an_onprem_job_when_the_cluster_is_gone(orch_home):
    from orchestrator.service.orch import Orch
    from orchestrator.settings import Settings

    address = f"http://127.0.0.1:{_free_port()}"
    orch = Orch(Settings(home=orch_home, mode="hybrid", ray_address=address))
    rec = orch.core.store.create_job(name="n", spec={}, kind="steady", target="onprem", fingerprint="f")
    orch.core.store.update(rec.id, backend_id=rec.id)
    orch.core.store.set_status(rec.id, "RUNNING", "running")
    proc = run_orch(orch_home, "status", rec.id, "--json", ORCH_MODE="hybrid",
                    ORCH_RAY_ADDRESS=address)
    assert proc.returncode == 0, proc.stderr
    import json

    data = json.loads(proc.stdout)
    assert data["status"] == "RUNNING" and address in data["warning"]
