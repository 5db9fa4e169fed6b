"""Every job as fast as the first: a user's loop run directly against the same loop through
`orch submit`, back to back and after a pause; and two `run:` commands, directly and through orch.

    .venv/bin/python benchmarks/bench_back_to_back.py [--runs 3] [--pause 40] [--steps 300]
        [--baseline DIR] [--skip-run-jobs | --only-run-jobs]

(a) A user's own loop (`train.entrypoint`, 1 worker, 1 epoch of `--steps` steps of a small
    MLP): run directly with python (torch's import included), then through `orch submit` on
    a warm local Ray (its runner host ready, and 40 s more): `--runs` submits back to back
    (each as soon as the one before returned), then `--runs` more, each `--pause` seconds
    after the one before.
    Wall clock of each from the shell; medians; each median over the direct one's. The time
    each job waited for its processes (its record's `->workers` phase) beside it.
(b) `orch status`, `orch status ID`, `orch logs ID`, `orch cost` and `orch plan` with the
    store of (a), one job running: the median of 3 of each.
(c) Two `run:` jobs, each `--runs` times directly (the command in a shell) and through orch:
    a torchrun script (2 processes, gloo) and a single-process script; the medians of each
    job's phases. `--only-run-jobs` runs (c) alone, with `--baseline` on both trees.

With `--baseline DIR`, (a) and (b) run first with an earlier orch: DIR holds its code (`git archive
<rev> | tar -x -C DIR`) and DIR/.venv a venv of the same Python whose site-packages has a
.pth naming DIR and this checkout's .venv site-packages, and whose bin/ has `orch`, `ray` and
`torchrun` scripts started by that venv's python: the same packages, the earlier code, both
sides measured in one run on one machine. Byte-compile DIR first (`python -m compileall -q
orchestrator providers jobs` there) where PYTHONDONTWRITEBYTECODE is set: otherwise each
of its commands compiles orch anew. The direct runs go before and after the orch
runs; their median is the reference.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from _common import OrchHome, fmt, load_avg, log, print_table  # noqa: E402

from orchestrator.service.run_metrics import PHASES  # noqa: E402

LOOP = '''"""A user's small loop, written by bench_back_to_back.py."""

import torch


def loop(steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    return model, _steps(model, steps)


def _steps(model, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        x = torch.randn(128, 64)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss)


def train(config):
    import ray.train
    import ray.train.torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    model = ray.train.torch.prepare_model(model)
    ray.train.report({"epoch": 1, "loss": _steps(model, config["steps"])})


if __name__ == "__main__":
    import sys

    print(loop(int(sys.argv[1]))[1])
'''

# A torchrun script: 2 processes over gloo, a small model, DDP.
DDP = '''import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                                    torch.nn.Linear(256, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(int(os.environ.get("STEPS", "200"))):
    x = torch.randn(64, 64)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
if dist.get_rank() == 0:
    print("loss", float(loss))
dist.destroy_process_group()
'''

SINGLE = '''import os

import torch

torch.manual_seed(0)
w = torch.zeros(64, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.01)
for _ in range(int(os.environ.get("STEPS", "400"))):
    x = torch.randn(256, 64)
    loss = (x @ w - x.sum(1)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", float(loss))
'''


def timed(cmd: list, cwd: Path, env: Optional[dict] = None) -> float:
    start = time.monotonic()
    subprocess.run(cmd, cwd=str(cwd), env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, timeout=600)
    return time.monotonic() - start


def user_job(workdir: Path, name: str, steps: int) -> str:
    return (f"name: {name}\nworkdir: {workdir}\ntrain:\n  entrypoint: userloop:train\n"
            f"  config: {{steps: {steps}}}\nscaling: {{num_workers: 1}}\n")


def run_job(workdir: Path, name: str, command: str) -> str:
    return f"name: {name}\nworkdir: {workdir}\nrun: {command}\n"


def _median(values: list) -> Optional[float]:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def orch_side(args, label: str, tree: Optional[Path], work: Path) -> dict:
    """`--runs` submits back to back, then `--runs` after a pause each, on a fresh warm local
    Ray of orch's code from `tree` (this checkout when None)."""
    env = {"PYTHONPATH": str(tree)} if tree else None
    out: dict = {"b2b": [], "pause": [], "b2b_workers": [], "pause_workers": []}
    ours = _common.ORCH
    _common.ORCH = str(tree / ".venv" / "bin" / "orch") if tree else ours
    try:
        with OrchHome(prefix="obb", env=env) as home:
            _side(args, label, home, work, out)
    finally:
        _common.ORCH = ours
    return out


def _side(args, label: str, home: OrchHome, work: Path, out: dict) -> None:
    home.wait_for_runner_host(settle_s=40.0)  # its spare runs start 20 s after it is ready, ~10 s of imports
    for kind in ("b2b", "pause"):
        for i in range(args.runs):
            if kind == "pause":
                time.sleep(args.pause)
            run = home.submit(f"{kind}{i}", user_job(work, f"{label}-{kind}-{i}", args.steps))
            if not run.ok:
                raise SystemExit(run.fail_text())
            out[kind].append(run.returned - run.invoked)
            out[f"{kind}_workers"].append((run.metrics.get("phases") or {}).get("driver_to_workers"))
            out.setdefault("phases", []).append(run.metrics.get("phases") or {})
            log(f"{label} {kind} {i + 1}: {out[kind][-1]:.2f} s")
    out["commands"] = command_times(home, work, done=run.rec["id"])


def command_times(home: OrchHome, work: Path, done: str, tries: int = 3) -> dict:
    """Median wall clock of the commands a user types, with a warm store: beside a job that
    runs (its state and log read from Ray) and a finished one."""
    path = home.home / "sleeper.yaml"
    path.write_text(run_job(work, "sleeper", "sleep 120"))
    proc = home.orch("submit", str(path), "--detach", "--json")
    running = json_id(proc.stdout)
    time.sleep(5)
    commands = {"orch status": ["status"], "orch status ID (running)": ["status", running],
                "orch logs ID (running)": ["logs", running], "orch logs ID (finished)": ["logs", done],
                "orch cost": ["cost"], "orch plan (one job)": ["plan", "examples/quickstart.yaml"]}
    out = {}
    for label, argv in commands.items():
        took = []
        for _ in range(tries):
            start = time.monotonic()
            home.orch(*argv)
            took.append(time.monotonic() - start)
        out[label] = statistics.median(took)
    home.orch("cancel", running)
    return out


def json_id(text: str) -> str:
    import json

    try:
        return str(json.loads(text)["id"])
    except (ValueError, KeyError, TypeError):
        raise SystemExit(f"`orch submit --detach --json` printed no record: {text[-500:]}") from None


def run_jobs(args, work: Path, tree: Optional[Path] = None) -> dict:
    """Each `run:` command directly, then through orch, `--runs` times each, on a fresh warm
    local Ray of orch's code from `tree` (this checkout when None)."""
    # As a user writes them; `python` and `torchrun` are this venv's, in the shell (its bin
    # first on the path) and through orch (whose jobs' `python` is its own interpreter).
    commands = {"torchrun, 2 processes (DDP, gloo)": "torchrun --nproc_per_node=2 ddp.py",
                "one process (a small regression)": "python single.py"}
    out: dict = {}
    env = {**os.environ, "STEPS": "200",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    ours = _common.ORCH
    _common.ORCH = str(tree / ".venv" / "bin" / "orch") if tree else ours
    try:
        with OrchHome(prefix="obr", env={"PYTHONPATH": str(tree)} if tree else None) as home:
            home.wait_for_runner_host(settle_s=40.0)  # its spare runs start 20 s after it is ready, ~10 s of imports
            for label, command in commands.items():
                direct, orch, phases = [], [], []
                for i in range(args.runs):
                    direct.append(timed(["bash", "-c", command], work, env))
                    run = home.submit(f"run{len(out)}{i}", run_job(work, f"run-{len(out)}-{i}",
                                                                   f"STEPS=200 {command}"))
                    if not run.ok:
                        raise SystemExit(run.fail_text())
                    orch.append(run.returned - run.invoked)
                    phases.append(run_phases(run))
                    log(f"{label} {i + 1}: direct {direct[-1]:.2f} s, orch {orch[-1]:.2f} s")
                out[label] = (direct, orch, phases)
    finally:
        _common.ORCH = ours
    return out


def run_phases(run) -> dict:
    """A `run:` job's phases as its record has them, and the two ends the shell sees: from
    `orch submit` invoked to the command's start (`start` event), and from its exit (`end`)
    to `orch submit` returned."""
    out = dict(run.metrics.get("phases") or {})
    start, end = run.first_t("start"), run.first_t("end")
    if start is not None:
        out["invoked_to_start"] = start - run.invoked
    if end is not None:
        out["end_to_returned"] = run.returned - end
    return out


RUN_JOB_PHASES = ("submit_to_recorded", "recorded_to_launched", "launched_to_driver",
                  "driver_to_first_output", "training", "last_step_to_ended", "invoked_to_start",
                  "end_to_returned")


def print_run_jobs(sides: dict) -> None:
    rows = []
    for name, runs in sides.items():
        for label, (d, o, _) in runs.items():
            rows.append([f"{label} ({name})", " ".join(f"{v:.2f}" for v in d),
                         " ".join(f"{v:.2f}" for v in o), f"{statistics.median(d):.2f}",
                         f"{statistics.median(o):.2f}",
                         f"{statistics.median(o) / statistics.median(d):.2f}x"])
    print_table("(c) `run:` jobs: the command in a shell against `orch submit` of it, seconds",
                ["command", "direct runs", "orch runs", "direct median", "orch median", "ratio"],
                rows)
    columns = [(f"{label.split(',')[0].split(' (')[0]} ({name})", p)
               for name, runs in sides.items() for label, (_, _, p) in runs.items()]
    print_table("(c) where each `run:` job's time went: medians of its phases, seconds",
                ["phase", *[c for c, _ in columns]],
                [[k, *[fmt(_median([x.get(k) for x in p])) for _, p in columns]]
                 for k in RUN_JOB_PHASES])


def sample_load(every_s: float = 10.0) -> list:
    """The 1-minute load average every `every_s` seconds until the process ends (the
    machine is shared: each figure is read beside the load it ran under)."""
    loads = [load_avg()]

    def sample() -> None:
        while True:
            time.sleep(every_s)
            loads.append(load_avg())

    threading.Thread(target=sample, daemon=True).start()
    return loads


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--pause", type=float, default=40.0, help="seconds before each paused submit")
    ap.add_argument("--steps", type=int, default=300, help="the loop's steps")
    ap.add_argument("--baseline", help="an earlier orch to measure beside this one (see above)")
    ap.add_argument("--skip-run-jobs", action="store_true")
    ap.add_argument("--only-run-jobs", action="store_true", help="(c) alone: no loop, no commands")
    args = ap.parse_args()

    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"obb-work-{os.getpid()}"
    work.mkdir(parents=True)
    (work / "userloop.py").write_text(LOOP)
    (work / "ddp.py").write_text(DDP)
    (work / "single.py").write_text(SINGLE)
    load_start = load_avg()
    if args.only_run_jobs:
        only_run_jobs(args, work)
        return
    loads = sample_load()
    direct_cmd = [sys.executable, "userloop.py", str(args.steps)]
    direct = [timed(direct_cmd, work) for _ in range(args.runs)]
    log(f"the loop directly: {', '.join(f'{d:.2f}' for d in direct)} s")
    sides = {}
    if args.baseline:
        sides["baseline"] = orch_side(args, "baseline", Path(args.baseline).resolve(), work)
    sides["this"] = orch_side(args, "this", None, work)
    direct += [timed(direct_cmd, work) for _ in range(args.runs)]
    ref = statistics.median(direct)
    runs = None if args.skip_run_jobs else {"this": run_jobs(args, work)}

    rows = [["the loop run directly (python, torch import included)",
             " ".join(f"{d:.2f}" for d in direct), f"{ref:.2f}", "1.00x", ""]]
    for name, side in sides.items():
        for kind, what in (("b2b", "back to back"), ("pause", f"{args.pause:.0f} s after the last")):
            med = _median(side[kind])
            rows.append([f"orch submit ({name}), {what}", " ".join(f"{v:.2f}" for v in side[kind]),
                         fmt(med), fmt(med / ref if med else None, ".2f", "x"),
                         " ".join(fmt(w, ".1f") for w in side[f"{kind}_workers"])])
    print_table(f"(a) a user's loop (1 worker, 1 epoch of {args.steps} steps), wall clock from the "
                f"shell, seconds; load {load_start:.1f} at the start, {load_avg():.1f} at the end "
                f"(1-minute load every 10 s: {min(loads):.1f}-{max(loads):.1f})",
                ["how", "runs", "median", "/ direct", "->workers s"], rows)
    print_table("(a) where each submit's time went: medians of the six jobs' phases "
                "(`orch status ID`), seconds", ["phase", *sides],
                [[k, *[fmt(_median([p.get(k) for p in side["phases"]])) for side in sides.values()]]
                 for k in PHASES])
    print_table("(a) each job's phases, seconds, in the order they ran", ["job", *PHASES],
                [[f"{name} {kind} {i + 1}", *[fmt(p.get(k)) for k in PHASES]]
                 for name, side in sides.items() for kind in ("b2b", "pause")
                 for i, p in enumerate(side["phases"][:args.runs] if kind == "b2b"
                                       else side["phases"][args.runs:])])
    print_table("(b) commands on a warm store (the jobs of (a) in it, one running), median of 3, "
                "seconds", ["command", *sides], [[c, *[fmt(side["commands"][c]) for side in sides.values()]]
                                                   for c in sides["this"]["commands"]])
    if runs:
        print_run_jobs(runs)
    subprocess.run(["rm", "-rf", str(work)], check=False)


def only_run_jobs(args, work: Path) -> None:
    """(c) alone, on the earlier orch first when `--baseline` names one."""
    start = load_avg()
    sides = {}
    if args.baseline:
        sides["baseline"] = run_jobs(args, work, Path(args.baseline).resolve())
    sides["this"] = run_jobs(args, work)
    log(f"load {start:.1f} at the start, {load_avg():.1f} at the end")
    print_run_jobs(sides)
    subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    main()
