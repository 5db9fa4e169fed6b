"""A multi-node `run:` job on an owned cluster (the two-node loopback Ray cluster): one
process a node, told its place in SkyPilot's variables, as on the cloud (issue 48)."""

from __future__ import annotations

import hashlib
import json
import secrets
import socket

import pytest
import yaml

from tests.conftest import ROOT, run_orch

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_two_node_torchrun_example_runs_one_process_a_node(cluster, orch_home, tmp_path):
    example = yaml.safe_load((ROOT / "examples" / "own-script" / "torchrun-multinode.yaml").read_text())
    run = example["run"].replace("29500", str(_free_port()))  # another test's torchrun may hold it
    value = "v-" + secrets.token_hex(12)  # its secret: each node's process holds it
    job = tmp_path / "two.yaml"
    job.write_text(yaml.safe_dump({
        "name": "ddp-two-nodes", "num_nodes": 2, "workdir": str(ROOT / "examples" / "own-script"),
        "schedule": {"kind": "steady"}, "placement": {"allow": ["onprem"]},
        "secrets": {"NODE_SECRET": value},
        "run": "echo node $ORCH_NODE_RANK of $ORCH_NUM_NODES, head $ORCH_HEAD_ADDRESS\n"
               'echo "node $ORCH_NODE_RANK sees $(printf %s "$NODE_SECRET" | sha256sum | cut -c1-16)"\n'
               + run}))
    proc = run_orch(orch_home, "submit", str(job), "--json", ORCH_MODE="hybrid",
                    ORCH_RAY_ADDRESS=cluster.address, ORCH_RAY_TOKEN_FILE=str(cluster.token_file))
    assert proc.returncode == 0, proc.stderr[-4000:]
    rec = json.loads(proc.stdout)
    assert rec["status"] == "SUCCEEDED" and rec["target"] == "onprem", rec
    log = run_orch(orch_home, "logs", rec["id"], ORCH_MODE="hybrid", ORCH_RAY_ADDRESS=cluster.address,
                   ORCH_RAY_TOKEN_FILE=str(cluster.token_file)).stdout
    assert "2 nodes, the head at" in log, log[-3000:]
    for rank in (0, 1):
        assert f"node {rank} of 2, head " in log, log[-3000:]
        assert f"node {rank} sees {hashlib.sha256(value.encode()).hexdigest()[:16]}" in log, \
            log[-3000:]
        # One torchrun a node, one process each: a world of two across the nodes.
        assert f"rank {rank} of 2 done on cpu" in log, log[-3000:]
    assert rec["metrics"]["epoch"] == 3
