"""What the per-user isolation mode costs (issue 46, part 3), side by side with the shared
(trusted-team) mode in one run, on this machine's local target:

- cold: a user's first job, no Ray running (the shared instance, or that user's own,
  started as their OS user): from orch's launch to the job's SUCCEEDED;
- warm: a near-empty job (`run: true`) on the running instance, the median of --runs.

Both through orch's own launch and backend (Orch.record + Orch.launch, as `orch serve`'s
queue does), polling the job's state every 50 ms. The runner host is off in both modes
(a `run:` job never uses it; it would only add its torch import to the cold start).
Needs root (the per-user mode makes OS users); the users it made are removed at the end.

    sudo .venv/bin/python benchmarks/bench_isolation.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import load_avg, log  # noqa: E402


def _user_python(root: Path) -> Path:
    """An interpreter the job users can run (orch's own may sit under /root)."""
    python = Path(sys.executable)
    if all(os.stat(p).st_mode & 0o001 for p in python.resolve().parents):
        return python
    venv = root / ".py"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    site = sysconfig.get_paths()["purelib"]
    (next(venv.glob("lib/python3*/site-packages")) / "orch.pth").write_text(
        f"import site; site.addsitedir({site!r})\n")
    return venv / "bin" / "python"


def _one(orch, owner: str) -> float:
    from orchestrator.spec.load import load_spec_text

    spec = load_spec_text("name: empty\nrun: 'true'\n")
    t0 = time.perf_counter()
    rec = orch.launch(orch.record(spec, owner=owner).rec, spec)
    provider = orch.provider("local")
    while True:
        status = provider.state(rec.backend_id).status
        if status in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        time.sleep(0.05)
    assert status == "SUCCEEDED", (status, provider.logs(rec.backend_id)[-2000:])
    return time.perf_counter() - t0


def measure(mode: str, runs: int) -> dict:
    from orchestrator.service.orch import Orch
    from orchestrator.settings import Settings

    home = Path(tempfile.mkdtemp(prefix="obi", dir="/tmp"))
    root = Path(tempfile.mkdtemp(prefix="obu", dir="/tmp"))
    os.chmod(root, 0o755)
    extra: dict = ({"serve_local_trusted": True} if mode == "shared" else {
        "serve_isolation": "per-user", "serve_isolation_root": root,
        "serve_isolation_python": _user_python(root)})
    settings = Settings(home=home, mode="local", local={"runner_host": False}, **extra)
    orch = Orch(settings)
    owner = f"b{os.urandom(3).hex()}"
    try:
        log(f"{mode}: cold start")
        cold = _one(orch, owner)
        warm = []
        for i in range(runs):
            log(f"{mode}: warm run {i + 1}/{runs}")
            warm.append(_one(orch, owner))
        ray = orch.provider("local").ray if mode == "shared" else \
            orch.provider("local")._running()[0].ray  # type: ignore[attr-defined]
        rss = sum(p.memory_info().rss for p in ray._processes(ray._state())) / 2**30
        return {"cold": cold, "warm": statistics.median(warm), "warm_all": warm, "rss": rss}
    finally:
        from providers.user_ray import os_user_name

        orch.local_ray().down()
        orch.stop_idle(everyone=True)
        orch.close()
        if mode != "shared":
            subprocess.run(["userdel", os_user_name(owner, {})], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--per-user-first", action="store_true", help="measure that mode first")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("the per-user mode makes OS users: run this as root")
    order = ("per-user", "shared") if args.per_user_first else ("shared", "per-user")
    results = {mode: measure(mode, args.runs) for mode in order}
    print(f"{'mode':<10} {'cold first job (s)':>20} {'warm near-empty job (s)':>25} "
          f"{'instance RSS (GiB)':>19}   runs")
    for mode, r in results.items():
        print(f"{mode:<10} {r['cold']:>20.2f} {r['warm']:>25.2f} {r['rss']:>19.2f}   "
              + " ".join(f"{x:.2f}" for x in r["warm_all"]))
    shared, isolated = results["shared"], results["per-user"]
    print(f"per-user costs {isolated['cold'] - shared['cold']:+.2f} s cold, "
          f"{isolated['warm'] - shared['warm']:+.2f} s warm (load {load_avg():.2f}, "
          f"{os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
