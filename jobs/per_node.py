"""A multi-node `run:` job on an owned Ray cluster: `python -m _orch_runner.per_node --nodes N
[--gpus G] --job ID [--root R] [--resume FOLDER] -- COMMAND...`, started as the job's
driver, runs COMMAND once on each of N nodes, as SkyPilot does on the cloud, so that one job
file runs on both.

Each node's process is told its place in SkyPilot's variables (SKYPILOT_NODE_RANK,
SKYPILOT_NODE_IPS: one address a line, the head's first, SKYPILOT_NUM_NODES,
SKYPILOT_NUM_GPUS_PER_NODE) and in orch's own (ORCH_NODE_RANK, ORCH_NUM_NODES,
ORCH_HEAD_ADDRESS, ORCH_GPUS_PER_NODE). The nodes are held by a STRICT_SPREAD placement
group (one bundle a node); each runs COMMAND through jobs/workspace.py, in a fresh folder:
rank 0's is the job's kept folder (ROOT/ID), the others' temporary. The first process that
fails stops the others (a torchrun waiting for a dead peer would wait for ever).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import Optional

from . import secret_env

WAIT_FOR_NODES_S = 120.0


def node_env(rank: int, ips: list[str], gpus: int) -> dict[str, str]:
    """What the process on node `rank` is told of the job's nodes."""
    return {"SKYPILOT_NODE_RANK": str(rank), "SKYPILOT_NODE_IPS": "\n".join(ips),
            "SKYPILOT_NUM_NODES": str(len(ips)), "SKYPILOT_NUM_GPUS_PER_NODE": str(gpus),
            "ORCH_NODE_RANK": str(rank), "ORCH_NUM_NODES": str(len(ips)),
            "ORCH_HEAD_ADDRESS": ips[0], "ORCH_GPUS_PER_NODE": str(gpus)}


def workspace_argv(rank: int, job: str, root: Optional[str], resume: Optional[str],
                   command: list[str], no_workdir: bool = False) -> list[str]:
    """Node `rank`'s command, in its own folder: the kept one on rank 0."""
    argv = [sys.executable, "-m", f"{__package__}.workspace",
            "--job", job if rank == 0 else f"{job}-node{rank}"]
    if no_workdir:
        argv.append("--no-workdir")
    if rank == 0 and root:
        argv += ["--root", root]
    if rank == 0 and resume:
        argv += ["--resume", resume]
    return [*argv, "--", *command]


def _ip() -> str:
    import ray

    return str(ray.util.get_node_ip_address())


def _run(argv: list[str], env: dict[str, str], hidden=None) -> int:
    """On its node: the command, its output to this worker's (which Ray sends the driver).
    `python`, `torchrun` and `accelerate` in it are those of the Python the cluster's Ray
    runs in, as `python` on a local job is orch's own. `hidden`: the job's secret values
    (secret_env.Hidden), which the driver took out of their file: Ray gives a node's
    process the job's runtime env alone."""
    sys.stdout.flush()
    path = f"{os.path.dirname(argv[0])}:{os.environ.get('PATH', '')}"
    values = hidden.values if hidden is not None else {}
    named = {secret_env.NAMES_VAR: ",".join(sorted(values))} if values else {}
    return subprocess.call(argv, env={**os.environ, **values, **named, **env, "PATH": path})


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print(f"usage: python -m {__package__}.per_node --nodes N --job ID -- COMMAND...",
              file=sys.stderr)
        return 2
    cut = argv.index("--")
    parser = argparse.ArgumentParser(prog="per_node")
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--job", required=True)
    parser.add_argument("--root")
    parser.add_argument("--resume")
    parser.add_argument("--no-workdir", action="store_true")
    args = parser.parse_args(argv[:cut])
    command = argv[cut + 1:]
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(log_to_driver=True)
    bundle = {"CPU": 1.0, **({"GPU": float(args.gpus)} if args.gpus else {})}
    group = placement_group([bundle] * args.nodes, strategy="STRICT_SPREAD")
    ready, _ = ray.wait([group.ready()], timeout=WAIT_FOR_NODES_S)
    if not ready:
        print(f"orch: the cluster has no {args.nodes} nodes with {bundle} free each within "
              f"{WAIT_FOR_NODES_S:g} s (num_nodes: {args.nodes})", file=sys.stderr)
        return 1

    def on(rank: int, fn, **kw):
        strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank)
        return ray.remote(fn).options(scheduling_strategy=strategy, num_cpus=1,
                                      num_gpus=args.gpus, **kw)

    ips = ray.get([on(r, _ip).remote() for r in range(args.nodes)])
    print(f"orch: {args.nodes} nodes, the head at {ips[0]}: one process on each", flush=True)
    # The values travel as the task's argument (never in its runtime env, which Ray logs
    # and shows), without the event key (secret_env.for_workers).
    hidden = secret_env.Hidden(secret_env.from_environ())
    running = {on(r, _run, max_retries=0).remote(
        workspace_argv(r, args.job, args.root, args.resume, command, args.no_workdir),
        node_env(r, ips, args.gpus), hidden): r for r in range(args.nodes)}
    code = 0
    while running:
        done, _ = ray.wait(list(running), num_returns=1)
        rank = running.pop(done[0])
        rc = ray.get(done[0])
        if rc != 0 and code == 0:
            code = rc
            print(f"orch: node {rank}'s process exited with {rc}: stopping the others",
                  file=sys.stderr, flush=True)
            for ref in running:
                ray.cancel(ref, force=True)
            break
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
