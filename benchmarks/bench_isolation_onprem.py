"""What the per-user isolation mode costs on the on-prem target (issue 46, part 3), side by
side with the shared (trusted-team) mode in one run, on a two-node loopback Ray cluster
started for the run (tests/integration/cluster.py, as the tests start it):

- first job: a user's first near-empty job (`run: true`): on the shared cluster, its first
  job (orch's runner uploaded with it); per-user, that user's own cluster started through
  the base cluster (a head and a worker node, as their OS user), then the job;
- near-empty job: `run: true` once warm, the median of --runs.

Both through orch's own launch and backend (Orch.record + Orch.launch, as `orch serve`'s
queue does), polling the job's state every 50 ms; each from launch to SUCCEEDED. Needs
root (the per-user mode makes OS users); the users it made are removed at the end.

    sudo .venv/bin/python benchmarks/bench_isolation_onprem.py [--runs 3] [--nodes 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import load_avg, log  # noqa: E402
from benchmarks.bench_isolation import _user_python  # noqa: E402


def _one(orch, owner: str, nodes: int) -> float:
    from orchestrator.spec.load import load_spec_text

    spec = load_spec_text(f"name: empty\nnum_nodes: {nodes}\nplacement: {{allow: [onprem]}}\n"
                          "resources: {cpus: 1}\nrun: 'true'\n")
    t0 = time.perf_counter()
    rec = orch.launch(orch.record(spec, owner=owner).rec, spec)
    provider = orch.provider("onprem")
    while True:
        status = provider.state(rec.backend_id).status
        if status in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(0.05)
    assert status == "SUCCEEDED", (status, provider.logs(rec.backend_id)[-2000:])
    return time.perf_counter() - t0


def measure(cluster, mode: str, runs: int, nodes: int) -> dict:
    from orchestrator.service.orch import Orch
    from orchestrator.settings import Settings
    from providers.user_ray import os_user_name

    home = Path(tempfile.mkdtemp(prefix="obo", dir="/tmp"))
    root = Path(tempfile.mkdtemp(prefix="obp", dir="/tmp"))
    os.chmod(root, 0o755)
    extra: dict = {} if mode == "shared" else {
        "onprem_isolation": "per-user", "serve_isolation_root": root,
        "serve_isolation_python": _user_python(root)}
    settings = Settings(home=home, mode="hybrid", ray_address=cluster.address,
                        ray_token_file=cluster.token_file, local={"object_store_mb": 100},
                        **extra)
    orch = Orch(settings)
    owner = f"b{os.urandom(3).hex()}"
    try:
        log(f"{mode}: first job")
        cold = _one(orch, owner, nodes)
        warm = []
        for i in range(runs):
            log(f"{mode}: near-empty job {i + 1}/{runs}")
            warm.append(_one(orch, owner, nodes))
        return {"cold": cold, "warm": statistics.median(warm), "warm_all": warm}
    finally:
        orch.stop_idle(everyone=True)
        orch.close()
        if mode != "shared":
            subprocess.run(["userdel", os_user_name(owner, {})], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    from tests.integration.cluster import TwoNodeCluster

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=2, choices=(1, 2),
                    help="the job's num_nodes (the user's cluster has as many)")
    ap.add_argument("--per-user-first", action="store_true", help="measure that mode first")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("the per-user mode makes OS users: run this as root")
    order = ("per-user", "shared") if args.per_user_first else ("shared", "per-user")
    base = Path(tempfile.mkdtemp(prefix="obc", dir="/tmp"))
    cluster = TwoNodeCluster(base, head_cpus=2, node_cpus=2)
    try:
        log("starting the two-node base cluster")
        cluster.start_head()
        cluster.start_node()
        results = {mode: measure(cluster, mode, args.runs, args.nodes) for mode in order}
    finally:
        cluster.stop()
        shutil.rmtree(base, ignore_errors=True)
    print(f"on-prem, num_nodes {args.nodes}")
    print(f"{'mode':<10} {'first job (s)':>14} {'near-empty job (s)':>19}   runs")
    for mode, r in results.items():
        print(f"{mode:<10} {r['cold']:>14.2f} {r['warm']:>19.2f}   "
              + " ".join(f"{x:.2f}" for x in r["warm_all"]))
    shared, isolated = results["shared"], results["per-user"]
    print(f"per-user costs {isolated['cold'] - shared['cold']:+.2f} s on the first job, "
          f"{isolated['warm'] - shared['warm']:+.2f} s warm (load {load_avg():.2f}, "
          f"{os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
