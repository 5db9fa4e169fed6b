"""Multi-node cloud training: how it is priced and planned, the SkyPilot task `orch plan
--emit sky` writes for it, and jobs.multinode's reading of SkyPilot's node variables.
(tests/integration/test_multinode.py runs that task's `run` as two nodes.)"""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from jobs import events
from jobs.multinode import Problem, Topology
from tests.unit.cli.test_plan_cli import env, invoke  # noqa: F401  (env: the offline plan fixture)

TRAIN = """\
name: ddp
num_nodes: {nodes}
resources: {{accelerators: A100:1}}
train: {{job: image-classification}}
scaling: {{num_workers: {workers}}}
estimate: {{hours: 2, gpu: A100}}
"""
STARTUP_H = 6 / 60  # cloud_startup_minutes' default


def _plan(job_file, nodes: int, workers: int) -> dict:
    job_file.write_text(TRAIN.format(nodes=nodes, workers=workers))
    r = invoke("plan", str(job_file), "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_a_two_node_train_job_is_planned_on_the_cloud_and_costs_two_vms(env):  # noqa: F811
    one, two = _plan(env, 1, 1), _plan(env, 2, 2)
    assert two["target"] == "cloud" and two["refusal"] is None
    a, b = one["choice"], two["choice"]
    assert (a["cloud"], a["region"], a["gpu"], a["count"]) == (b["cloud"], b["region"], b["gpu"], 1)
    assert (a["nodes"], b["nodes"]) == (1, 2)
    assert b["price_per_hour"] == pytest.approx(2 * a["price_per_hour"])
    # The work splits over both VMs' GPUs; both VMs are billed, start-up included.
    assert b["est_hours"] == pytest.approx(a["est_hours"] / 2)
    assert b["est_cost"] == pytest.approx(b["price_per_hour"] * (b["est_hours"] + STARTUP_H))
    assert b["est_cost"] > a["est_cost"]  # one more start-up
    text = " ".join(invoke("plan", str(env)).stdout.split())
    assert "A100 x1 on 2 nodes" in text, text


def test_a_train_job_with_fewer_workers_than_nodes_is_not_placed_on_the_cloud(env):  # noqa: F811
    d = _plan(env, 2, 1)
    cloud = [a for a in d["alternatives"] if a["target"] == "cloud"]
    assert cloud and all("a rented node would have no worker (set scaling.num_workers to 2 "
                         "or more)" in a["excluded"] for a in cloud), cloud


def test_the_emitted_sky_task_runs_on_two_nodes_through_jobs_multinode(env):  # noqa: F811
    import sky
    import yaml

    env.write_text(TRAIN.format(nodes=2, workers=2))
    r = invoke("plan", str(env), "--emit", "sky")
    assert r.exit_code == 0, r.output
    task = yaml.safe_load(r.stdout)
    again = sky.Task.from_yaml_config(copy.deepcopy(task))  # SkyPilot takes it
    assert task["num_nodes"] == 2 and again.num_nodes == 2
    assert "python3 -m _orch_runner.multinode -- python3 -m _orch_runner.runner" in task["run"]
    assert task["secrets"] == {"RAY_AUTH_TOKEN": None}  # the cluster's token: its name only
    assert json.loads(task["envs"]["ORCH_RUN"])["num_workers"] == 2


SKY = {"SKYPILOT_NODE_RANK": "1", "SKYPILOT_NUM_NODES": "2",
       "SKYPILOT_NODE_IPS": "10.0.0.4\n10.0.0.7\n"}


def test_each_rank_starts_its_ray_as_skypilot_documents():
    head = Topology.from_env({**SKY, "SKYPILOT_NODE_RANK": "0"})
    assert head.ray_start_args() == ["--head", "--port=6379", "--node-ip-address=10.0.0.4",
                                     "--disable-usage-stats"]
    node = Topology.from_env({**SKY, "ORCH_RAY_PORT": "7000",
                              "ORCH_RAY_START_ARGS": "--num-cpus=2 --resources='{\"b\": 1}'"})
    assert node.head == "10.0.0.4:7000" and node.num_nodes == 2
    assert node.ray_start_args() == ["--address=10.0.0.4:7000", "--node-ip-address=10.0.0.7",
                                     "--disable-usage-stats", "--num-cpus=2", '--resources={"b": 1}']


@pytest.mark.parametrize("change, words", [
    ({"SKYPILOT_NODE_RANK": None}, "SKYPILOT_NODE_RANK is not set"),
    ({"SKYPILOT_NUM_NODES": "two"}, "SKYPILOT_NUM_NODES is 'two'; want a number"),
    ({"SKYPILOT_NUM_NODES": "3"}, "SKYPILOT_NODE_IPS lists 2 addresses; SKYPILOT_NUM_NODES is 3"),
    ({"SKYPILOT_NODE_RANK": "2"}, "SKYPILOT_NODE_RANK is 2; want 0 to 1"),
])
def test_node_variables_that_do_not_fit_are_named(change, words):
    bad = {k: v for k, v in {**SKY, **change}.items() if v is not None}
    with pytest.raises(Problem, match=words):
        Topology.from_env(bad)


def test_outside_a_skypilot_task_it_exits_2_with_one_message_and_a_result_event(tmp_path):
    from tests.conftest import ROOT

    proc = subprocess.run([sys.executable, "-m", "jobs.multinode", "--", "true"],
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("orch multinode: SKYPILOT_NODE_RANK is not set; this module "
                                   "runs as a SkyPilot task's `run`")
    (result,) = events.parse(proc.stdout)
    assert result["event"] == "result" and result["ok"] is False


def test_a_node_whose_head_never_answers_gives_up_saying_so(tmp_path):
    from providers.local_ray import _free_port
    from tests.conftest import ROOT

    node = {**SKY, "SKYPILOT_NODE_IPS": "127.0.0.1\n127.0.0.1", "ORCH_RAY_PORT": str(_free_port()),
           "ORCH_RAY_JOIN_TIMEOUT_S": "1", "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "jobs.multinode", "--", "true"], env=node,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"rank 1: the head at 127.0.0.1:{node['ORCH_RAY_PORT']} did not answer within 1 s" in proc.stderr
    (result,) = events.parse(proc.stdout)
    assert result["ok"] is False and "did not answer" in result["error"]


def test_a_nodes_ray_never_gets_the_runners_event_key(monkeypatch):
    """Issue 32, finding 8: on a cloud node every Ray worker (the job's code) inherits the
    environment of `ray start`; the key that signs the runner's result must not be in it."""
    from jobs import events, multinode

    seen = {}
    monkeypatch.setattr(multinode.subprocess, "Popen", lambda cmd, **kw: seen.update(env=kw["env"]))
    given = multinode.ray_env({"PATH": "/bin", events.KEY_VAR: "k" * 64, "HF_TOKEN": "x"})
    multinode.start_ray(Topology.from_env({**SKY, "SKYPILOT_NODE_RANK": "0"}), given)
    assert events.KEY_VAR not in seen["env"] and seen["env"]["PATH"] == "/bin"
    assert given[events.KEY_VAR] == "k" * 64  # COMMAND (the runner) still gets it
