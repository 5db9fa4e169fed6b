"""Plan 1,000 jobs against 5,000 offers and print how long it takes (goal: under 0.5 s).

    .venv/bin/python benchmarks/bench_plan.py [--jobs N] [--offers N] [--seed N] [--runs N]

Times the decision core (classify + price + decide per job, one shared offer index), the
part `orch submit` repeats for every job and `orch serve` for every job of its queue on each
tick, and apart from it the parsing of the job files (once per file): the median of 3 runs
of each, beside what the same script measured before issue 34.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import statistics
import time

from _common import load_avg, log, print_table

from orchestrator.decision import OfferIndex, PastRun, classify, decide
from orchestrator.decision.pricing import HoursEstimator, onprem_offer
from orchestrator.settings import OwnedGpus, Settings
from orchestrator.spec import load_spec_text

GPUS = {"H200": 3.9, "H100": 2.4, "A100-80GB": 1.6, "A100": 1.2, "L40S": 0.9, "L4": 0.45,
        "A10G": 0.6, "A10": 0.55, "RTX4090": 0.4, "RTX3090": 0.25, "V100": 0.5, "T4": 0.2}
CLOUDS = {"lambda": 1.0, "runpod": 0.8, "vast": 0.6, "aws": 2.2, "azure": 2.0, "fluidstack": 0.9}
COUNTS = (1, 2, 4, 8)
NOW = 1_700_000_000.0
GOAL_S = 0.5  # deciding, median of the runs
# This script's figures on main before issue 34 (commit e6abbe1), on the 2-core development
# machine (benchmarks/README.md): what the decision core is measured against.
BEFORE = dict(decide=1.66, per_job=1.31, max=63, parse=1.70, alts=178_686,
              choices="cloud 658, onprem 209, refused 133")


def make_offers(n: int, rng: random.Random) -> list:
    from orchestrator.decision.models import Offer

    offers = []
    while len(offers) < n:
        gpu, cloud, count = rng.choice(list(GPUS)), rng.choice(list(CLOUDS)), rng.choice(COUNTS)
        price = round(GPUS[gpu] * CLOUDS[cloud] * count * rng.uniform(0.8, 1.3), 3)
        base = dict(target="cloud", gpu=gpu, count=count, cloud=cloud,
                    region=f"region-{rng.randrange(12)}", cpus=8 * count * rng.choice((1, 2, 4)),
                    memory_gb=32 * count * rng.choice((1, 2, 4)),
                    instance_type=f"{cloud}-{gpu}-{count}x-{len(offers)}")
        offers.append(Offer(price_per_hour=price, **base))
        if cloud != "lambda" and len(offers) < n:
            offers.append(Offer(price_per_hour=round(price * rng.uniform(0.3, 0.6), 3), spot=True, **base))
    return offers


def make_job(i: int, rng: random.Random) -> tuple[str, list]:
    names = rng.sample(list(GPUS), rng.choice((1, 1, 2, 3)))
    count = rng.choice(COUNTS)
    lines = [f"name: job-{i}", "run: python train.py",
             "resources: {accelerators: {" + ", ".join(f"{g}: {count}" for g in names) + "}"
             + (", cpus: 16+" if rng.random() < 0.3 else "") + "}",
             f"estimate: {{hours: {rng.choice((0.25, 0.5, 1, 3, 12, 48))}}}"]
    if rng.random() < 0.5:
        lines.append("checkpoint: {storage: 's3://bucket/ckpt'}")
    if rng.random() < 0.15:
        lines.append("schedule: {cron: '0 3 * * *'}")
    if rng.random() < 0.2:
        lines.append(f"budget: {{max_cost: {rng.choice((1, 5, 50))}, max_hourly: {rng.choice((2, 10))}}}")
    if rng.random() < 0.1:
        lines.append("placement: {allow: [onprem, local]}")
    history = [PastRun(f"fp-{i}", "SUCCEEDED", NOW - 3600 * (k + 1), duration_s=rng.uniform(600, 9000),
                       gpu=names[0], gpu_count=count) for k in range(rng.choice((0, 0, 1, 3, 5)))]
    return "\n".join(lines) + "\n", history


def _parse(texts: list) -> tuple[float, list]:
    t0 = time.perf_counter()
    jobs = [(load_spec_text(text), history) for text, history in texts]
    return time.perf_counter() - t0, jobs


def _decide_all(jobs: list, offers: list, settings: Settings, keep: bool) -> dict:
    """One run over every job, with an index of its own (built apart): its figures."""
    t0 = time.perf_counter()
    index = OfferIndex(offers)
    t_index = time.perf_counter() - t0
    per_job, targets, alts, decisions = [], collections.Counter(), 0, []
    t0 = time.perf_counter()
    for i, (spec, history) in enumerate(jobs):
        t = time.perf_counter()
        est = HoursEstimator(spec, f"fp-{i}", history, settings.default_job_hours)
        kind = classify(spec, f"fp-{i}", history, NOW, settings, False, est.reference.hours)
        d = decide(spec, kind, index, None, settings, estimator=est)
        per_job.append(time.perf_counter() - t)
        targets[d.target or "refused"] += 1
        alts += len(d.alternatives)
        if keep:
            decisions.append(d)
    return dict(decide=time.perf_counter() - t0, index=t_index, per_job=per_job,
                targets=targets, alts=alts, decisions=decisions)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--offers", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=3, help="runs of each part; the median counts")
    ap.add_argument("--dump", metavar="FILE", help="write every decision of the first run "
                    "(choice, ranked alternatives, reasons, notes) as JSON lines, to compare "
                    "two versions' decisions with diff (that run then keeps them all: its "
                    "time counts that)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    owned = [OwnedGpus(gpu="A100", count=8, purchase_price=120000, watts=400),
             OwnedGpus(gpu="RTX4090", count=4, purchase_price=12000, watts=450)]
    settings = Settings(clouds=list(CLOUDS), onprem=owned)
    offers = make_offers(args.offers - len(owned), rng) + [onprem_offer(o, 0.15) for o in owned]
    texts = [make_job(i, rng) for i in range(args.jobs)]
    log(f"load average {load_avg():.2f} at the start")

    parses, jobs = [], []
    for _ in range(args.runs):
        t, jobs = _parse(texts)
        parses.append(t)
    runs = [_decide_all(jobs, offers, settings, keep=bool(args.dump) and k == 0)
            for k in range(args.runs)]
    if args.dump:
        with open(args.dump, "w") as f:
            f.writelines(json.dumps(d.to_dict(), sort_keys=True) + "\n"
                         for d in runs[0]["decisions"])
    log(f"load average {load_avg():.2f} at the end")

    mid = sorted(runs, key=lambda r: r["decide"])[len(runs) // 2]  # the median run
    t_decide, t_parse = mid["decide"], statistics.median(parses)
    each = ", ".join(f"{r['decide']:.3f}" for r in runs)
    rows = [("decide all jobs (classify + price + choose)", f"{t_decide:.3f} s ({each})",
             f"{BEFORE['decide']:.2f} s"),
            ("per job, median", f"{statistics.median(mid['per_job']) * 1e3:.2f} ms",
             f"{BEFORE['per_job']:.2f} ms"),
            ("per job, max", f"{max(mid['per_job']) * 1e3:.2f} ms", f"{BEFORE['max']:.0f} ms"),
            ("parse job files", f"{t_parse:.3f} s ({', '.join(f'{t:.3f}' for t in parses)})",
             f"{BEFORE['parse']:.2f} s"),
            ("parse and decide", f"{t_parse + t_decide:.3f} s",
             f"{BEFORE['parse'] + BEFORE['decide']:.2f} s"),
            ("alternatives priced, total", f"{mid['alts']:,}", f"{BEFORE['alts']:,}"),
            ("build offer index (once a run)", f"{mid['index'] * 1e3:.1f} ms", ""),
            ("choices", ", ".join(f"{k} {v}" for k, v in sorted(mid["targets"].items())),
             BEFORE["choices"])]
    print_table(f"orch plan: {args.jobs:,} jobs x {len(offers):,} offers, median of {args.runs} "
                "runs", ["figure", "now", "before (main e6abbe1)"], rows)
    print(f"deciding: {t_decide:.3f} s against {BEFORE['decide']:.2f} s before "
          f"({BEFORE['decide'] / t_decide:.1f}x); goal under {GOAL_S} s: "
          f"{'met' if t_decide < GOAL_S else 'NOT met'} on this machine")


if __name__ == "__main__":
    main()
