"""A small team's synthetic trace: exploratory bursts, a daily retrain and a weekly fine-tune.

Same (days, seed), same jobs: one `random.Random(seed)` drives every draw, in a fixed order.
"""

from __future__ import annotations

import math
import random

from orchestrator.simulate.trace import TraceJob

DAILY_AT_H = 2.0  # the nightly retrain's cron hour (UTC)
WEEKLY_DAY, WEEKLY_AT_H = 5, 8.0  # Saturday morning, after the nightly retrain is done
_BURSTS_WEEKDAY = ((0, 0.25), (1, 0.40), (2, 0.25), (3, 0.10))  # bursts per working day


def _pick(rng: random.Random, weighted) -> int:
    x, acc = rng.random(), 0.0
    for value, p in weighted:
        acc += p
        if x < acc:
            return value
    return weighted[-1][0]


def _work(rng: random.Random, lo: float = 0.1, hi: float = 3.0) -> float:
    """Log-uniform GPU-hours: many short runs, a few of hours."""
    return round(math.exp(rng.uniform(math.log(lo), math.log(hi))), 2)


def generate(days: int = 90, seed: int = 1) -> list[TraceJob]:
    """The jobs of `days` days starting on a Monday, by arrival.

    - exploratory bursts on working days (rarely at weekends), 09:00-18:00: either a
      hyperparameter sweep (4-12 runs of one fingerprint, as orch fingerprints exclude the
      swept keys) or 1-4 separate experiments, a quarter of them re-runs of an idea from
      the last two weeks; 0.1-3 GPU-hours each on one A100, half of the ideas
      checkpoint, due within one or two days;
    - a nightly retrain at 02:00, one A100, 3-6 GPU-hours growing slowly with the data,
      due within 24 h, checkpointing; its code changes about monthly (a new fingerprint);
    - a weekly fine-tune on Saturday 08:00, 4 A100s, 20-40 GPU-hours, due within 3 days,
      checkpointing, run from cron (kind steady).
    """
    if days < 1:
        raise ValueError("days must be at least 1")
    rng = random.Random(seed)
    jobs: list[tuple[float, dict]] = []
    ideas: list[tuple[int, str, float, bool]] = []  # (day, fingerprint, base work, checkpoints)
    daily_v = weekly_v = 1
    for day in range(days):
        weekday = day % 7  # the trace starts on a Monday
        if day and rng.random() < 1 / 30:
            daily_v += 1
        work = 3.5 + 1.5 * day / max(days, 1) + rng.gauss(0, 0.4)
        jobs.append((day * 24 + DAILY_AT_H + rng.uniform(0, 0.1), dict(
            name="nightly-retrain", fingerprint=f"nightly-retrain-v{daily_v}",
            gpu_hours=round(min(6.0, max(3.0, work)), 2), gpus=1, deadline_h=24.0,
            checkpoints=True, kind="auto")))
        if weekday == WEEKLY_DAY:
            if day >= 28 and rng.random() < 0.25:
                weekly_v += 1
            jobs.append((day * 24 + WEEKLY_AT_H, dict(
                name="weekly-finetune", fingerprint=f"weekly-finetune-v{weekly_v}",
                gpu_hours=round(rng.uniform(20, 40), 1), gpus=4, deadline_h=72.0,
                checkpoints=True, kind="steady")))
        bursts = _pick(rng, _BURSTS_WEEKDAY) if weekday < 5 else int(rng.random() < 0.15)
        for _ in range(bursts):
            at = day * 24 + rng.uniform(9, 18)
            recent = [i for i in ideas if day - i[0] <= 14]
            if recent and rng.random() < 0.25:
                _, fp, base, ck = rng.choice(recent)
            else:
                fp, base, ck = f"idea-{len(ideas) + 1}", _work(rng), rng.random() < 0.5
                ideas.append((day, fp, base, ck))
            due = rng.choice((24.0, 48.0))
            if rng.random() < 0.35:  # a sweep: submitted together, similar sizes
                for _ in range(rng.randint(4, 12)):
                    jobs.append((at + rng.uniform(0, 10) / 60, dict(
                        name=f"sweep-{fp}", fingerprint=fp,
                        gpu_hours=round(max(0.05, base * math.exp(rng.gauss(0, 0.2))), 2),
                        gpus=1, deadline_h=due, checkpoints=ck, kind="auto")))
            else:  # separate experiments: an edit, a run, a look, another edit
                for k in range(rng.randint(1, 4)):
                    if k:
                        fp, base, ck = f"idea-{len(ideas) + 1}", _work(rng), rng.random() < 0.5
                        ideas.append((day, fp, base, ck))
                    jobs.append((at + k * rng.uniform(0.2, 1.0), dict(
                        name=f"explore-{fp}", fingerprint=fp, gpu_hours=base, gpus=1,
                        deadline_h=due, checkpoints=ck, kind="auto")))
    jobs.sort(key=lambda j: j[0])
    return [TraceJob(index=i, arrival_h=round(at * 60) / 60, gpu="A100", **kw)
            for i, (at, kw) in enumerate(jobs)]
