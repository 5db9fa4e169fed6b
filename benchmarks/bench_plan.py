"""Plan 1,000 jobs against 5,000 offers and print how long it takes (goal: under 1 s).

    PYTHONPATH=. python benchmarks/bench_plan.py [--jobs N] [--offers N] [--seed N]

Times the decision core only (classify + price + decide per job, one shared offer
index), the part `orch submit` repeats for every job; parsing job files and reading
catalogs are timed apart, as they happen once per file or per process.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import statistics
import time

from orchestrator.decision import OfferIndex, PastRun, classify, decide
from orchestrator.decision.cost import HoursEstimator, onprem_offer
from orchestrator.settings import OwnedGpus, Settings
from orchestrator.spec import load_spec_text

GPUS = {"H200": 3.9, "H100": 2.4, "A100-80GB": 1.6, "A100": 1.2, "L40S": 0.9, "L4": 0.45,
        "A10G": 0.6, "A10": 0.55, "RTX4090": 0.4, "RTX3090": 0.25, "V100": 0.5, "T4": 0.2}
CLOUDS = {"lambda": 1.0, "runpod": 0.8, "vast": 0.6, "aws": 2.2, "azure": 2.0, "fluidstack": 0.9}
COUNTS = (1, 2, 4, 8)
NOW = 1_700_000_000.0


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--offers", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dump", metavar="FILE", help="write every decision (choice, ranked "
                    "alternatives, reasons, notes) as JSON lines, to compare two versions' "
                    "decisions with diff")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    owned = [OwnedGpus(gpu="A100", count=8, purchase_price=120000, watts=400),
             OwnedGpus(gpu="RTX4090", count=4, purchase_price=12000, watts=450)]
    settings = Settings(clouds=list(CLOUDS), onprem=owned)
    offers = make_offers(args.offers - len(owned), rng) + [onprem_offer(o, 0.15) for o in owned]
    texts = [make_job(i, rng) for i in range(args.jobs)]

    t0 = time.perf_counter()
    jobs = [(load_spec_text(text), history) for text, history in texts]
    t_parse = time.perf_counter() - t0

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
        if args.dump:
            decisions.append(d)
    t_decide = time.perf_counter() - t0
    if args.dump:
        with open(args.dump, "w") as f:
            f.writelines(json.dumps(d.to_dict(), sort_keys=True) + "\n" for d in decisions)

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"orch plan: {args.jobs:,} jobs x {len(offers):,} offers", title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [("decide all jobs (classify + price + choose)", f"{t_decide:.3f} s"),
            ("per job, median", f"{statistics.median(per_job) * 1e3:.2f} ms"),
            ("per job, max", f"{max(per_job) * 1e3:.2f} ms"),
            ("alternatives priced, total", f"{alts:,}"),
            ("alternatives per job, mean", f"{alts / len(jobs):.0f}"),
            ("build offer index (once)", f"{t_index * 1e3:.1f} ms"),
            ("parse job files (apart)", f"{t_parse:.3f} s"),
            ("choices", ", ".join(f"{k} {v}" for k, v in sorted(targets.items())))]
    for row in rows:
        table.add_row(*row)
    Console(width=100).print(table)
    print(f"goal: under 1 s for deciding; {'met' if t_decide < 1 else 'NOT met'} on this machine")


if __name__ == "__main__":
    main()
