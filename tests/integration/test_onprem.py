"""On-prem mode against a real two-node Ray cluster on loopback, through the real `orch` CLI."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from jobs import events
from providers.onprem import read_cluster
from tests.conftest import ROOT, plan_in_process, run_orch, status_in_process
from tests.integration.conftest import train_processes, wait_until

pytestmark = pytest.mark.integration

INVENTORY = """\
[[onprem]]
gpu = "CPU"
count = 2
cpus = 3
purchase_price = 6000
watts = 300
"""


@pytest.fixture
def home(cluster, orch_home):
    (orch_home / "config.toml").write_text(INVENTORY)
    return orch_home


@pytest.fixture
def bare_home(cluster, orch_home):
    """Settings with no [[onprem]] inventory: the cluster is known by its address alone."""
    (orch_home / "config.toml").write_text("")
    return orch_home


def orch(cluster, home, *args, **env):
    env = dict(ORCH_MODE="hybrid", ORCH_RAY_ADDRESS=cluster.address,
               ORCH_RAY_TOKEN_FILE=str(cluster.token_file), **env)
    return run_orch(home, *args, **env)


def status(cluster, home, job_id):
    return status_in_process(home, job_id, ORCH_MODE="hybrid", ORCH_RAY_ADDRESS=cluster.address,
                             ORCH_RAY_TOKEN_FILE=str(cluster.token_file))


def job_file(tmp_path, name, *, epochs=3, workers=2, placement="spread", allow="[onprem]",
             extra=""):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\nschedule: {{kind: steady}}\nplacement: {{allow: {allow}}}\n"
                    f"train:\n  job: image-classification\n  config: {{epochs: {epochs}, "
                    f"dataset_multiplier: 3}}\n"
                    f"scaling: {{num_workers: {workers}, placement: {placement}}}\n{extra}")
    return path


def wait_reports(cluster, home, job_id, n=1, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = status(cluster, home, job_id)
        if (rec["metrics"].get("reports") or 0) >= n:
            return rec
        assert rec["status"] in ("PENDING", "RUNNING"), rec
        time.sleep(1)
    raise AssertionError(f"{job_id} reported fewer than {n} times")


def wait_end(cluster, home, job_id, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = status(cluster, home, job_id)
        if rec["status"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return rec
        time.sleep(1)
    raise AssertionError(f"{job_id} did not end")


def test_cluster_status(cluster, home):
    proc = orch(cluster, home, "cluster", "status", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert sum(n["alive"] for n in data["nodes"]) == 2 and data["mode"] == "shared"
    assert data["total"]["CPU"] == 3
    assert data["cost_per_hour"]["full"] > data["cost_per_hour"]["power"] > 0
    text = orch(cluster, home, "cluster", "status").stdout
    assert "2 nodes alive" in text and "USD/h" in text
    assert "mode: shared cluster, a trusted-team mode" in text  # issue 46
    per_user = orch(cluster, home, "cluster", "status", ORCH_ONPREM_ISOLATION="per-user")
    assert "mode: per-user clusters: each client user's jobs" in per_user.stdout, per_user.stderr
    per_user = orch(cluster, home, "cluster", "status", "--json", ORCH_ONPREM_ISOLATION="per-user")
    assert json.loads(per_user.stdout)["mode"] == "per-user"


def test_without_an_inventory_the_cluster_itself_runs_steady_work_on_both_nodes(
        cluster, bare_home, tmp_path):
    # With an inventory the same job runs in the other tests here and in test_secrets_travel.py
    # (whose workers are checked to run on both nodes too).
    # The premise: the nodes' python3 has no ray (`ray start` ran by its absolute path).
    bare = subprocess.run(["python3", "-c", "import ray"], env=cluster.env(), capture_output=True)
    assert bare.returncode != 0, "python3 on the cluster's PATH has ray: the test proves nothing"
    job = job_file(tmp_path, "bare", epochs=2)
    proc = orch(cluster, bare_home, "plan", str(job), "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["target"] == "onprem", plan["reasons"]
    assert (plan["choice"]["gpu"], plan["choice"]["amortized_per_hour_usd"]) == (None, 0)
    assert plan["choice"]["power_per_hour_usd"] > 0
    unpriced = [n for n in plan["notes"] if "full cost is unknown" in n]
    assert len(unpriced) == 1, plan["notes"]
    assert "200 W per node" in unpriced[0]
    assert "purchase_price" in unpriced[0] and "watts" in unpriced[0]
    text = " ".join(orch(cluster, bare_home, "plan", str(job)).stdout.split())  # wrapped at 100
    assert text.count("full cost is unknown") == 1 and "purchase_price" in text, text

    proc = orch(cluster, bare_home, "submit", str(job), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    assert rec["status"] == "SUCCEEDED" and rec["target"] == "onprem", rec["message"]
    assert rec["kind"] == "steady" and rec["metrics"]["epoch"] == 2 and rec["metrics"]["workers"] == 2
    log = orch(cluster, bare_home, "logs", rec["id"], "--events").stdout
    nodes = {e["node_id"] for e in events.parse(log) if e["event"] == "worker"}
    assert len(nodes) == 2, f"workers were not on different nodes: {nodes}"
    assert "Wrapping provided model in DistributedDataParallel" in log
    cost = orch(cluster, bare_home, "cost")
    assert cost.returncode == 0, cost.stderr
    assert cost.stdout.count("full cost is unknown") == 1, cost.stdout


def _full(cluster) -> bool:
    """Whether the cluster reports every CPU in use."""
    snap = read_cluster(cluster.address, cluster.token_file)
    return not isinstance(snap, Exception) and bool(snap.total.get("CPU")) and not snap.free("CPU")


def test_busy_cluster_bursts_to_cloud_or_queues_then_a_cancel_leaves_no_workers(
        cluster, home, tmp_path, monkeypatch):
    # One long job on both nodes serves both halves: the plans made while it holds the
    # cluster, then `orch cancel` on it (one Ray Train run instead of two: about 25 CPU-s).
    # Credentials for the example clouds: SkyPilot's own check is the cloud's boundary.
    monkeypatch.setattr("providers.cloud.enabled_clouds", lambda clouds: (list(clouds), {}))
    hog = job_file(tmp_path, "hog", epochs=500, workers=3, placement="pack",
                   extra="estimate: {hours: 5}\n")
    hog_id = orch(cluster, home, "submit", str(hog), "--detach").stdout.strip()
    try:
        wait_reports(cluster, home, hog_id)
        # The cluster's usage report lags a few seconds behind the run: until it shows the
        # hog's three workers on every CPU, as the plans below read it.
        wait_until("the cluster to report the hog's workers", lambda: _full(cluster), timeout=60)
        clouds = dict(ORCH_CLOUDS="lambda,runpod,aws",
                      ORCH_CATALOG_DIR=str(ROOT / "examples" / "catalog"),
                      ORCH_MAX_WAIT_MINUTES="30")
        # One worker: the example catalogs rent one-GPU machines (two workers need two GPUs).
        steady = job_file(tmp_path, "nightly", workers=1, allow="[onprem, cloud]")
        on = dict(ORCH_MODE="hybrid", ORCH_RAY_ADDRESS=cluster.address,
                  ORCH_RAY_TOKEN_FILE=str(cluster.token_file), **clouds)
        plan = plan_in_process(home, steady, **on)
        assert plan["kind"] == "steady" and plan["target"] == "cloud", plan["reasons"]
        why = " ".join(plan["reasons"])
        assert "cloud burst" in why and "busy" in why and "30 min" in why, why

        onprem_only = job_file(tmp_path, "nightly2", workers=1, allow="[onprem]")
        plan = plan_in_process(home, onprem_only, **on)
        assert plan["target"] == "onprem", plan
        assert "queued on-prem" in " ".join(plan["reasons"])

        assert len(train_processes(cluster.temp_dir)) >= 3  # its three workers, on both nodes
        proc = orch(cluster, home, "cancel", hog_id)
        assert proc.returncode == 0 and "CANCELLED" in proc.stdout, proc.stderr
        deadline = time.monotonic() + 30
        while train_processes(cluster.temp_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert train_processes(cluster.temp_dir) == []
    finally:
        orch(cluster, home, "cancel", hog_id)  # already ended when all went well: says so


def test_lost_node_with_max_failures_resumes(cluster, home, tmp_path):
    ckpt = tmp_path / "ckpt"
    job = job_file(tmp_path, "resilient", epochs=8,
                   extra=f"checkpoint: {{storage: {ckpt}, max_failures: 1}}\n")
    job_id = orch(cluster, home, "submit", str(job), "--detach").stdout.strip()
    try:
        wait_reports(cluster, home, job_id, n=2)
        cluster.kill_node()
        rec = wait_end(cluster, home, job_id)
        assert rec["status"] == "SUCCEEDED", rec
        assert rec["metrics"]["epoch"] == 8
        log = orch(cluster, home, "logs", job_id, "--events").stdout
        resumed = [e for e in events.parse(log) if e["event"] == "resume"]
        assert resumed and resumed[0]["epoch"] >= 2, "training did not resume from a checkpoint"
    finally:
        cluster.start_node()


def test_lost_node_without_failures_allowed_fails_clearly(cluster, home, tmp_path):
    job = job_file(tmp_path, "fragile", epochs=40, extra="checkpoint: {max_failures: 0}\n")
    job_id = orch(cluster, home, "submit", str(job), "--detach").stdout.strip()
    try:
        wait_reports(cluster, home, job_id, n=1)
        cluster.kill_node()
        rec = wait_end(cluster, home, job_id)
        assert rec["status"] == "FAILED", rec
        # The error its output ended with (a surviving worker's broken collective), and why.
        why = rec["message"] + " " + ((rec["metrics"].get("failure") or {}).get("hint") or "")
        assert rec["message"] and ("died" in why or "Worker" in why), rec
    finally:
        cluster.start_node()


def test_a_run_idle_on_both_nodes_is_stopped_by_its_utilization_policy(cluster, home, tmp_path):
    # The runner's own driver on the cluster (no runner host there): it starts the run's
    # controller itself to hold its handle, and stops the run once both workers, one per
    # node, have posted an idle device.
    (tmp_path / "userjob").symlink_to(ROOT / "tests" / "fixtures" / "userjob")
    job = tmp_path / "idle.yaml"
    job.write_text("name: idle\nworkdir: userjob\nschedule: {kind: steady}\nplacement: {allow: [onprem]}\n"
                   "train:\n  entrypoint: mytrain:sleeps\n  config: {seconds: 600}\n"
                   "scaling: {num_workers: 2, placement: spread}\n"
                   "utilization_policy: {min_utilization: 20, window_minutes: 0.25, action: stop}\n")
    job_id = orch(cluster, home, "submit", str(job), "--detach",
                  ORCH_TELEMETRY_INTERVAL_SECONDS="1").stdout.strip()
    rec = wait_end(cluster, home, job_id, timeout=240)
    assert rec["status"] == "FAILED", rec
    assert rec["message"].startswith("stopped by utilization_policy: all 2 devices stayed below 20% "
                                     "busy for 0.25 min"), rec["message"]
    evs = list(events.parse(orch(cluster, home, "logs", job_id, "--events").stdout))
    assert len({e["node_id"] for e in evs if e["event"] == "worker"}) == 2
    wait_until("its workers gone", lambda: not train_processes(cluster.temp_dir), timeout=30)
