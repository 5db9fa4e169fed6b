"""orch's runner overhead, in two figures (goals: ratio >= 0.95; a near-empty job, your own
loop or the built-in one, under 5 s from the shell).

    .venv/bin/python benchmarks/bench_runner_overhead.py [--workers 2] [--epochs 5]
        [--multiplier 12] [--fixed-runs 3] [--skip-steady] [--skip-fixed] [--skip-floor]

(a) Steady-state throughput: the built-in `image-classification` job through `orch submit`
    (N workers, bf16, loader_workers 0) against a plain PyTorch DDP loop with the same
    number of processes (torch.multiprocessing spawn, gloo, DistributedSampler), the same
    model class (DigitsNet), data (load_split() repeated), batch size, optimizer and bf16
    autocast. Steady state = the median of the epochs after the first. The plain loop runs
    before and after the orch job; their mean is the reference. It also runs once with the
    local Ray up and idle beside it (not part of the ratio: what the idle daemons cost). Both sides measure the
    training loop alone (the job's `samples_per_sec`); a second row compares the epoch-to-
    epoch wall clock, which also holds each epoch's evaluation, checkpoint and report.
(b) Near-empty jobs on a local Ray already up, its runner host ready, `settle` seconds of
    quiet before each: a user's own loop (`train.entrypoint` naming a module in its workdir:
    1 worker, one epoch of 5 steps) submitted with its code just changed (a new fingerprint:
    its entrypoint is checked, its workdir packed and uploaded anew), then again unchanged;
    the built-in job (1 epoch of the plain digits split, N workers, fp32); and the built-in
    job's loop as plain Ray Train submitted through Ray's Jobs API to the same Ray
    (benchmarks/plain_ray_train.py), submit -> SUCCEEDED. For orch's jobs the wall clock
    of `orch submit` from the shell (its process's start and exit included) and the phases
    each record keeps (`orch status ID`). Medians of the runs. Then the floor: no-op
    `TorchTrainer.fit()` calls from one driver that is already running
    (plain_ray_train.floor), the cost of Ray Train's own actors alone. Also `orch --help`.

Each run starts its own local Ray under a fresh ORCH_HOME in /tmp and removes it at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ORCH, OrchHome, fmt, job_yaml, load_avg, log, print_table, steady  # noqa: E402

# -- the plain PyTorch DDP reference -----------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank: int, world: int, port: int, cfg: dict, out_path: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from jobs.builtin.image_classification import DigitsNet, load_split

    torch.set_num_threads(cfg["threads"])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(cfg["seed"])

    x_train, y_train, x_test, y_test = load_split()
    m = cfg["multiplier"]
    if m > 1:
        x_train, y_train = x_train.repeat(m, 1, 1, 1), y_train.repeat(m)
    dataset = TensorDataset(x_train, y_train)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True,
                                 seed=cfg["seed"])
    loader = DataLoader(dataset, batch_size=cfg["batch_size"], sampler=sampler, num_workers=0)
    model = DistributedDataParallel(DigitsNet())
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    autocast = lambda: torch.autocast(device_type="cpu", dtype=torch.bfloat16)  # noqa: E731

    epochs = []
    for epoch in range(cfg["epochs"]):
        sampler.set_epoch(epoch)
        t0, seen, loss_sum = time.perf_counter(), 0, 0.0
        for xb, yb in loader:
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                logits = model(xb)
            loss = F.cross_entropy(logits.float(), yb)
            loss.backward()
            optimizer.step()
            seen += len(yb)
            loss_sum += float(loss.detach()) * len(yb)
        elapsed = time.perf_counter() - t0
        # What the job does between epochs too: evaluate, and rank 0 saves a checkpoint.
        model.eval()
        with torch.no_grad(), autocast():
            acc = float((model(x_test).argmax(1) == y_test).float().mean())
        model.train()
        if rank == 0:
            with tempfile.TemporaryDirectory() as d:
                torch.save({"model": model.module.state_dict(),
                            "optimizer": optimizer.state_dict(), "epoch": epoch},
                           os.path.join(d, "state.pt"))
        dist.barrier()
        epochs.append({"epoch": epoch + 1, "samples_per_sec": seen * world / elapsed,
                       "epoch_s": elapsed, "samples": seen * world, "t": time.time(),
                       "loss": loss_sum / max(seen, 1), "accuracy": acc})
    if rank == 0:
        Path(out_path).write_text(json.dumps({"epochs": epochs, "threads": torch.get_num_threads()}))
    dist.destroy_process_group()


def plain_ddp(workers: int, cfg: dict) -> dict:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="obddp") as d:
        out = os.path.join(d, "out.json")
        mp.spawn(_ddp_worker, args=(workers, _free_port(), cfg, out), nprocs=workers, join=True)
        return json.loads(Path(out).read_text())


# -- (a) steady state --------------------------------------------------------------------------

def cadence(epochs: list[dict]) -> list[float]:
    """Samples/s from one epoch's end to the next (loop + evaluation + checkpoint + report)."""
    out = []
    for prev, cur in zip(epochs, epochs[1:]):
        if prev.get("t") is not None and cur.get("t") is not None and cur["t"] > prev["t"]:
            samples = cur.get("samples") or cur["samples_per_sec"] * cur["epoch_s"]
            out.append(samples / (cur["t"] - prev["t"]))
    return out


def steady_state(args) -> dict:
    cfg = dict(epochs=args.epochs, batch_size=args.batch_size, lr=2e-3, seed=0,
               multiplier=args.multiplier, threads=args.threads)
    log(f"plain DDP, {args.workers} processes x {args.threads} threads, multiplier {cfg['multiplier']}")
    before = plain_ddp(args.workers, cfg)
    epoch_s = steady([e["epoch_s"] for e in before["epochs"]])
    if epoch_s < args.min_epoch_s:  # grow the data until an epoch lasts long enough
        cfg["multiplier"] = int(cfg["multiplier"] * args.min_epoch_s * 1.25 / epoch_s) + 1
        log(f"epoch took {epoch_s:.2f} s; again with multiplier {cfg['multiplier']}")
        before = plain_ddp(args.workers, cfg)

    job_config = {"epochs": args.epochs, "batch_size": args.batch_size, "lr": 2e-3,
                  "dataset_multiplier": cfg["multiplier"], "seed": 0}
    with OrchHome(prefix="obo") as home:
        home.wait_for_runner_host()  # its start-up imports are no part of either loop
        # Not the reference: shows what the idle Ray daemons alone cost the plain loop.
        log("plain DDP with the local Ray up (idle) alongside")
        beside_ray = plain_ddp(args.workers, cfg)
        log("the same through orch submit")
        run = home.submit("overhead", job_yaml("bench-overhead", job_config,
                                               num_workers=args.workers, precision="bf16",
                                               loader_workers=0, pin_memory=False))
    if not run.ok:
        raise SystemExit(run.fail_text())
    log("plain DDP again")
    after = plain_ddp(args.workers, cfg)

    orch_epochs = run.reports()
    ref = [steady([e["samples_per_sec"] for e in r["epochs"]]) for r in (before, after)]
    ref_cad = [steady(cadence(r["epochs"])) for r in (before, after)]
    return dict(cfg=cfg, before=before, after=after, beside_ray=beside_ray, run=run,
                orch_epochs=orch_epochs,
                orch=steady([e["samples_per_sec"] for e in orch_epochs]),
                ref=statistics.mean(ref), refs=ref,
                orch_cadence=steady(cadence(orch_epochs)),
                ref_cadence=statistics.mean([c for c in ref_cad if c]) if any(ref_cad) else None)


def print_steady(r: dict, args) -> Optional[float]:
    m = r["run"].metrics
    rows = []
    for label, res in (("plain DDP (before)", r["before"]), ("plain DDP (after)", r["after"]),
                       ("plain DDP, idle local Ray alongside", r["beside_ray"])):
        e = res["epochs"]
        rows.append((label, " ".join(f"{x['samples_per_sec']:,.0f}" for x in e),
                     fmt(steady([x["samples_per_sec"] for x in e]), ",.0f"),
                     fmt(steady([x["epoch_s"] for x in e]), ".2f"),
                     fmt(steady(cadence(e)), ",.0f")))
    e = r["orch_epochs"]
    rows.append(("orch submit (runner)", " ".join(f"{x['samples_per_sec']:,.0f}" for x in e),
                 fmt(r["orch"], ",.0f"), fmt(steady([x["epoch_s"] for x in e]), ".2f"),
                 fmt(r["orch_cadence"], ",.0f")))
    print_table(f"(a) steady state: {args.workers} workers, bf16, batch {args.batch_size}, "
                f"dataset_multiplier {r['cfg']['multiplier']}, {args.epochs} epochs",
                ["run", "samples/s per epoch", "steady samples/s", "steady epoch s",
                 "epoch-to-epoch samples/s"], rows)
    ratio = r["orch"] / r["ref"] if r["orch"] and r["ref"] else None
    cad = (r["orch_cadence"] / r["ref_cadence"]) if r["orch_cadence"] and r["ref_cadence"] else None
    print(f"plain DDP torch threads per process: {r['before'].get('threads')}; orch job's "
          f"step time: data {fmt(_ms(m.get('time_data_s')), '.2f')} ms, copy "
          f"{fmt(_ms(m.get('time_copy_s')), '.2f')} ms, compute {fmt(_ms(m.get('time_compute_s')), '.2f')} ms; "
          f"verdict: {(m.get('verdict') or {}).get('kind', 'n/a')}")
    print(f"RATIO (a) orch / plain DDP, training loop samples/s: {fmt(ratio, '.3f')}  "
          f"(goal >= 0.95; plain Ray Train measured about 0.83)")
    print(f"      epoch-to-epoch wall clock (loop + eval + checkpoint + report): {fmt(cad, '.3f')}")
    idle = steady([e["samples_per_sec"] for e in r["beside_ray"]["epochs"]])
    print(f"      plain DDP with an idle local Ray alongside / plain DDP: "
          f"{fmt(idle / r['ref'] if idle and r['ref'] else None, '.3f')} (the Ray daemons' share)")
    return ratio


def _ms(v):
    return None if v is None else v * 1000


# -- (b) fixed time ----------------------------------------------------------------------------

# A user's own near-empty loop, the module `train.entrypoint` names: one worker, one epoch of
# a few steps. EDIT changes before each "new code" submit: new code, a new fingerprint.
USER_LOOP = '''"""A user's near-empty Ray Train loop, written by bench_runner_overhead.py."""

import ray.train
import ray.train.torch
import torch

EDIT = {edit}


def train(config):
    model = ray.train.torch.prepare_model(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(config["steps"]):
        loss = model(torch.randn(32, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    ray.train.report({{"epoch": 1, "loss": float(loss)}})
'''

# The jobs of (b), in the order each run submits them: label -> what `fixed_time` keeps.
KINDS = {"new": "your own loop, code just changed (a new fingerprint)",
         "repeat": "your own loop again, nothing changed",
         "builtin": "the built-in job",
         "plain": "plain Ray Train, Jobs API submit -> SUCCEEDED"}


def user_job(workdir: Path, name: str) -> str:
    return (f"name: {name}\nworkdir: {workdir}\ntrain:\n  entrypoint: usertrain:train\n"
            "  config: {steps: 5}\nscaling: {num_workers: 1}\n")


def fixed_time(args) -> list[dict]:
    """Each run: a user's own near-empty loop (`train.entrypoint`) with its code just
    changed, then again unchanged, the built-in job, and the same loop as the built-in job
    as plain Ray Train through the Jobs API on the same Ray. For each orch job the `orch
    submit` wall clock (its process's start and exit included) and its record's phases."""
    from plain_ray_train import floor, submit_and_wait

    config = {"epochs": 1, "batch_size": args.batch_size, "lr": 2e-3, "seed": 0}
    out = []
    with OrchHome(prefix="obf") as home:
        ray_auth = {"RAY_AUTH_MODE": "token",
                    "RAY_AUTH_TOKEN_PATH": str(home.home / "local" / "auth_token")}
        workdir = home.home / "user"
        workdir.mkdir()
        home.wait_for_runner_host()
        for i in range(args.fixed_runs):
            log(f"near-empty jobs, run {i + 1}/{args.fixed_runs}: your own loop (new code, "
                f"then again), the built-in job, plain Ray Train ({args.settle:.0f} s of quiet "
                "before each)")
            (workdir / "usertrain.py").write_text(USER_LOOP.format(edit=i))
            row: dict = {}
            for kind, yaml in (("new", user_job(workdir, f"user-{i}")),
                               ("repeat", user_job(workdir, f"user-{i}-again")),
                               ("builtin", job_yaml(f"bench-empty-{i}", config,
                                                    num_workers=args.workers, precision="fp32",
                                                    loader_workers=0, pin_memory=False))):
                time.sleep(args.settle)  # the host starts its warm processes again after a run
                run = home.submit(f"{kind}{i}", yaml)
                if not run.ok:
                    raise SystemExit(run.fail_text())
                row[kind] = {**(run.metrics.get("phases") or {}), "wall": run.returned - run.invoked}
            time.sleep(args.settle)
            row["plain"] = {"wall": submit_and_wait(home.state["dashboard_url"], ray_auth,
                                                    args.workers, 1, str(home.home / "plain"))}
            out.append(row)
        if not args.skip_floor:
            log(f"{args.fixed_runs} no-op TorchTrainer.fit() calls from one running driver")
            for row, took in zip(out, floor(home.state["address"], ray_auth, args.workers,
                                            args.fixed_runs, str(home.home / "floor"))):
                row["floor"] = took
    return out


def _median(values: list) -> Optional[float]:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def print_fixed(runs: list[dict], args) -> None:
    from orchestrator.service.run_metrics import PHASES

    rows = [[KINDS[k], *[fmt(r[k]["wall"], ".2f") for r in runs],
             fmt(_median([r[k]["wall"] for r in runs]), ".2f")] for k in KINDS]
    if any("floor" in r for r in runs):
        rows.append(["a no-op fit() from a running driver, cold processes",
                     *[fmt(r.get("floor"), ".2f") for r in runs],
                     fmt(_median([r.get("floor") for r in runs]), ".2f")])
    print_table(f"(b) near-empty jobs on a warm local Ray: `orch submit` wall clock from the "
                f"shell, submit -> SUCCEEDED, seconds (your loop: 1 worker, 5 steps; built-in and "
                f"plain: {args.workers} workers, 1 epoch)",
                ["job", *[f"run {i + 1}" for i in range(len(runs))], "median"], rows)
    print_table("(b) where the time went: phases from each job's record (`orch status ID`), "
                "medians, seconds", ["phase", *[KINDS[k].split(",")[0] + f" ({k})"
                                                for k in ("new", "repeat", "builtin")]],
                [[key, *[fmt(_median([r[k].get(key) for r in runs]), ".2f")
                         for k in ("new", "repeat", "builtin")]] for key in PHASES])
    med = {k: _median([r[k]["wall"] for r in runs]) for k in KINDS}
    print(f"FIXED (b) medians: your own loop {med['new']:.2f} s with new code, "
          f"{med['repeat']:.2f} s again; the built-in job {med['builtin']:.2f} s; plain Ray "
          f"Train {med['plain']:.2f} s (goal: under 5 s each)")


def help_time(tries: int = 5) -> float:
    """The median wall clock of `orch --help` (goal: under 0.3 s)."""
    took = []
    for _ in range(tries):
        start = time.monotonic()
        subprocess.run([ORCH, "--help"], capture_output=True, check=True)
        took.append(time.monotonic() - start)
    return statistics.median(took)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--multiplier", type=int, default=12, help="dataset_multiplier to start from")
    ap.add_argument("--min-epoch-s", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=0,
                    help="torch threads per plain-DDP process (0: cores / workers, as Ray gives "
                         "each 1-CPU worker)")
    ap.add_argument("--fixed-runs", type=int, default=3)
    ap.add_argument("--steady-runs", type=int, default=3, help="orch jobs in (a), each between two plain-DDP runs")
    ap.add_argument("--settle", type=float, default=10.0,
                    help="seconds of quiet before each run of (b), orch's and plain Ray Train's alike")
    ap.add_argument("--skip-floor", action="store_true",
                    help="leave out the no-op TorchTrainer.fit() runs of (b)")
    ap.add_argument("--skip-steady", action="store_true")
    ap.add_argument("--skip-fixed", action="store_true")
    args = ap.parse_args()
    if not args.threads:
        args.threads = max(1, (os.cpu_count() or 1) // args.workers)
    log(f"load average {load_avg():.2f} on {os.cpu_count()} cores")
    print(f"HELP `orch --help`: {help_time():.2f} s, median of 5 (goal: under 0.3 s)")
    if not args.skip_steady:
        ratios = []
        for i in range(args.steady_runs):
            log(f"steady state, run {i + 1}/{args.steady_runs}")
            ratios.append(print_steady(steady_state(args), args))
        known = [x for x in ratios if x is not None]
        print(f"RATIO (a) median of {len(known)} runs: "
              f"{fmt(statistics.median(known) if known else None, '.3f')} "
              f"(runs: {', '.join(fmt(x, '.3f') for x in ratios)}; goal >= 0.95)")
    if not args.skip_fixed:
        print_fixed(fixed_time(args), args)
    log(f"load average {load_avg():.2f} at the end")


if __name__ == "__main__":
    main()
