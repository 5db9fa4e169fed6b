"""A two-node cloud training job on loopback: orch plans and launches a `num_nodes: 2`
train job (SkyPilot's SDK faked, tests/fake_sky.py), and the `run` of the very task it
hands SkyPilot is run here twice, as rank 0 and rank 1, with the variables SkyPilot sets
on each node. Both "nodes" are this machine, so each gets its own Ray ports (and the head
its own temp dir) through ORCH_RAY_START_ARGS. They must form one two-node Ray cluster,
train the built-in job with one worker on each node, and end: the head with the runner's
result, the other rank once the head is gone; SkyPilot's record of that ends the job."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from jobs import events
from orchestrator.service.orch import Orch
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from providers.cloud import CloudProvider
from providers.local_ray import _free_port, processes_matching
from tests.conftest import ROOT, short_tmp
from tests.fake_sky import FakeSky

pytestmark = pytest.mark.integration

JOB = """\
name: ddp
num_nodes: 2
resources: {accelerators: A100:1}
train:
  job: image-classification
  config: {epochs: 2}
scaling: {num_workers: 2, use_gpu: false, placement: spread}
placement: {allow: [cloud]}
estimate: {hours: 1, gpu: A100}
"""


def _agent_ports() -> str:
    return (f"--dashboard-agent-listen-port={_free_port()} --dashboard-agent-grpc-port={_free_port()} "
            f"--runtime-env-agent-port={_free_port()} --metrics-export-port={_free_port()} "
            "--num-cpus=2 --object-store-memory=150000000")


def _node_env(task, root: Path, rank: int, port: int) -> dict:
    """What SkyPilot gives a node's `run`: the task's envs and secrets and its node
    variables (the runner package it ships to ~/.orch-runner is linked there: _link_mounts)."""
    venv_bin = str(Path(sys.executable).parent)  # `python3` there: the VM's has Ray
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "ORCH_"))}
    extra = _agent_ports()
    if rank == 0:
        extra += (f" --temp-dir={root / 'ray'} --include-dashboard=false "
                  f"--ray-client-server-port={_free_port()}")
    secrets = {k: getattr(v, "get_secret_value", lambda v=v: v)() for k, v in task.secrets.items()}
    return {**base, **task.envs, **secrets, "HOME": str(root / "home"),
            "PATH": f"{venv_bin}:{base.get('PATH', '')}",
            "SKYPILOT_NODE_RANK": str(rank), "SKYPILOT_NUM_NODES": "2",
            "SKYPILOT_NODE_IPS": "127.0.0.1\n127.0.0.1\n", "SKYPILOT_NUM_GPUS_PER_NODE": "0",
            "ORCH_RAY_PORT": str(port), "ORCH_RAY_START_ARGS": extra,
            "ORCH_RAY_JOIN_TIMEOUT_S": "120"}


def _link_mounts(task, home: Path) -> None:
    """The task's file mounts under ~/.orch-runner (orch's runner, under its shipped name) in
    `home`, as SkyPilot copies them onto each VM: linked, the nodes sharing one machine."""
    for dest, src in task.file_mounts.items():
        if dest.startswith("~/.orch-runner/"):
            path = home / dest[2:]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(src, target_is_directory=True)


def _ours(root: Path, port: int) -> list:
    """The Ray processes of this test's cluster: the head's under its temp dir, and any
    that name its GCS address (the second node's)."""
    return [p for p in processes_matching(str(root), suffix=f":{port}")
            if p.pid != os.getpid()]


def _all_gone(root: Path, port: int, wait_s: float = 20) -> None:
    """Every Ray process of the cluster went with its node's `ray start --block`."""
    deadline = time.monotonic() + wait_s
    while _ours(root, port) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _ours(root, port), [p.info for p in _ours(root, port)]


def _stop_left(root: Path, port: int) -> None:
    """Teardown: kill what a failed test left of the cluster, and its folder."""
    left = _ours(root, port)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(left, timeout=10)
    shutil.rmtree(root, ignore_errors=True)


def test_the_sky_task_of_a_two_node_job_trains_on_two_ray_nodes(tmp_path, monkeypatch):
    monkeypatch.setattr("providers.cloud.enabled_clouds", lambda clouds: (list(clouds), {}))
    orch = Orch(Settings(home=tmp_path / "orch", mode="hybrid", clouds=["lambda", "runpod"],
                         catalog_dir=ROOT / "examples" / "catalog"))
    fake = FakeSky([])
    orch.core.providers["cloud"] = CloudProvider(sdk=fake)
    rec = orch.submit(load_spec_text(JOB, "ddp.yaml")).rec
    (task, _), = fake.launched
    assert task.num_nodes == 2 and "_orch_runner.multinode" in task.run

    root, port = short_tmp("omn"), _free_port()
    (root / "home").mkdir()
    _link_mounts(task, root / "home")
    outs = [root / f"rank{r}.log" for r in (0, 1)]
    procs: list[subprocess.Popen] = []
    started = time.monotonic()
    try:
        for rank in (1, 0):  # the other node first: it waits for the head
            with open(outs[rank], "w") as out:
                procs.append(subprocess.Popen(["bash", "-c", task.run], cwd=root,
                                              env=_node_env(task, root, rank, port),
                                              stdout=out, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL))
        rank1, rank0 = procs
        head_rc = rank0.wait(timeout=300)
        other_rc = rank1.wait(timeout=60)
        wall = time.monotonic() - started
        log = outs[0].read_text()
        assert (head_rc, other_rc) == (0, 0), log[-4000:] + outs[1].read_text()[-3000:]
        assert f"the head at 127.0.0.1:{port} is gone" in outs[1].read_text()
        found = list(events.parse(log))
        (start,) = [e for e in found if e["event"] == "start"]
        assert (start["num_workers"], start["use_gpu"]) == (2, False)
        workers = {e["rank"]: e["node_id"] for e in found if e["event"] == "worker"}
        assert sorted(workers) == [0, 1] and len(set(workers.values())) == 2, workers  # one per node
        assert "orch multinode: 2 nodes in the Ray cluster" in log
        result = [e for e in found if e["event"] == "result"][-1]
        assert result["ok"] is True, result
        _all_gone(root, port)
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
        _stop_left(root, port)

    # What SkyPilot reports for a run whose nodes all exited 0; orch reads the log.
    fake.script = [{"status": "SUCCEEDED", "start_at": time.time() - wall, "end_at": time.time(),
                    "cloud": "lambda", "region": "us-east-1"}]
    fake._logs = log
    rec = orch.refresh(orch.get(rec.id))
    assert rec.status == "SUCCEEDED", rec
    assert rec.metrics.number("accuracy") is not None, rec.metrics
    print(f"two-node run: {wall:.1f} s")


def test_a_head_left_alone_stops_at_its_timeout_saying_how_many_nodes_joined(tmp_path):
    """No other node ever joins: the head gives up after ORCH_RAY_JOIN_TIMEOUT_S, fails
    with the runner's kind of result event, and takes its Ray down with it."""
    from types import SimpleNamespace

    root, port = short_tmp("omh"), _free_port()
    (root / "home").mkdir()
    task = SimpleNamespace(envs={}, secrets={})
    env = {**_node_env(task, root, 0, port), "ORCH_RAY_JOIN_TIMEOUT_S": "5"}
    try:
        proc = subprocess.run([sys.executable, "-m", "jobs.multinode", "--", "true"], env=env,
                              cwd=root, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert (f"orch multinode: rank 0: only 1 of 2 nodes joined the Ray cluster at "
                f"127.0.0.1:{port} within 5 s") in proc.stderr
        result = [e for e in events.parse(proc.stdout) if e["event"] == "result"]
        assert [r["ok"] for r in result] == [False]
        _all_gone(root, port)
    finally:
        _stop_left(root, port)
