"""Multi-node cloud training: jobs.multinode's reading of SkyPilot's node variables."""

from __future__ import annotations

import subprocess
import sys

import pytest

from jobs import events
from jobs.multinode import Problem, Topology

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
