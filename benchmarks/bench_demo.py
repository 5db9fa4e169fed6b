"""`make demo` from a fresh clone: each step's time, the total, and the load while it ran.

Clones this repository (its committed HEAD, or --rev) into a fresh folder under /tmp, runs
`make demo` there with a private ORCH_HOME (so its local Ray is its own) and prints every
line of make's output with the seconds since the start and since the line before: the
recipe lines make echoes and the demo's progress lines mark the steps. With --cold, uv's
cache is an empty folder (a first-time user's machine); without, uv's own cache (a second
clone on a machine that installed orch before). Its local Ray is stopped and the clone, the
home and the cold cache removed at the end, also after a failure.

    .venv/bin/python benchmarks/bench_demo.py                 # about 1-2 min
    .venv/bin/python benchmarks/bench_demo.py --rev b3b3d55   # the same for an older commit
    .venv/bin/python benchmarks/bench_demo.py --cold          # about 3-5 min
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._common import load_avg, log  # noqa: E402

GOAL_S = 60.0


class LoadSampler(threading.Thread):
    """The 1-minute load average every second while the demo runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.values: list[float] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(1.0):
            self.values.append(load_avg())


def run_demo(clone: Path, env: dict) -> tuple[int, list[tuple[float, str]], float]:
    """`make demo` in the clone: its exit status, each output line with its time, the total."""
    start = time.monotonic()
    lines: list[tuple[float, str]] = []
    proc = subprocess.Popen(["make", "demo"], cwd=clone, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append((time.monotonic() - start, line.rstrip("\n")))
    return proc.wait(), lines, time.monotonic() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default="HEAD", help="the commit to clone (default: HEAD)")
    ap.add_argument("--cold", action="store_true", help="uv's cache an empty folder")
    ap.add_argument("--keep", action="store_true", help="keep the clone (not its local Ray)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="odemo", dir="/tmp"))
    clone, home = work / "orch", work / "h"
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ORCH_", "RAY_", "VIRTUAL_ENV"))}
    env["ORCH_HOME"] = str(home)
    if args.cold:
        env["UV_CACHE_DIR"] = str(work / "uv-cache")
    sampler = LoadSampler()
    try:
        t0 = time.monotonic()
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        if args.rev != "HEAD":
            subprocess.run(["git", "-C", str(clone), "checkout", "-q", args.rev], check=True)
        clone_s = time.monotonic() - t0
        log(f"cloned {args.rev} in {clone_s:.1f} s; load {load_avg():.1f}; "
            f"uv cache: {'empty (cold)' if args.cold else 'this machine' + chr(39) + 's'}")
        sampler.start()
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        rc, lines, total = run_demo(clone, env)
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        sampler.done.set()
        before = 0.0
        for at, line in lines:
            print(f"{at:7.1f} {at - before:+7.1f}  {line[:84]}")
            before = at
        loads = sampler.values or [load_avg()]
        rev = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        print(f"\nmake demo at {rev} ({'cold' if args.cold else 'warm'} uv cache): exit {rc}, "
              f"{total:.1f} s (+ clone {clone_s:.1f} s); goal under {GOAL_S:.0f} s; "
              f"load {min(loads):.1f}-{max(loads):.1f}")
        # make and what it waited for (not the local Ray's daemons, which outlive it): a
        # figure that moves less with the load than the wall-clock time.
        print(f"CPU time of make and the processes it waited for: {cpu:.1f} s")
    finally:
        sampler.done.set()
        orch = clone / ".venv" / "bin" / "orch"
        if orch.exists() and home.exists():
            subprocess.run([str(orch), "local", "down"], env=env, capture_output=True, timeout=120)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {clone}")


if __name__ == "__main__":
    main()
