"""A small team's synthetic trace: exploratory bursts, a daily retrain and a weekly fine-tune.

Same (days, seed, shape), same jobs: one `random.Random(seed)` drives every draw of the
workload, in a fixed order; the beliefs (estimate noise, per-job speeds) come from a
second generator, so adding them leaves the workload itself unchanged.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Optional

from orchestrator.decision.gpus import CPU, SPEED
from orchestrator.simulate.trace import TraceJob

DAILY_AT_H = 2.0  # the nightly retrain's cron hour (UTC)
WEEKLY_DAY, WEEKLY_AT_H = 5, 8.0  # Saturday morning, after the nightly retrain is done
_BURSTS_WEEKDAY = ((0, 0.25), (1, 0.40), (2, 0.25), (3, 0.10))  # bursts per working day


@dataclass(frozen=True)
class Shape:
    """What makes one family of traces unlike another; the defaults give the usual team.

    gpu, owned: the team's GPU model and how many it owns; the steady work (nightly
    retrains and weekly fine-tunes) is sized for them: round(owned / 4 x steady) streams
    of each, at least one. burst: the runs in a sweep (lo, hi). noise: the lognormal
    sigma of each job file's estimate.hours (None: no estimate_h column). compute:
    per fingerprint, a compute-bound share c drawn uniformly in (lo, hi); the job's speed
    on a model M is 1 / ((1 - c) + c / peak(M) / peak(gpu)), written to `speeds` (None:
    no speeds, every job runs at the table's ratios). bias: every estimate runs this many
    times the truth on top of its noise (3: estimates 3x too long; 1/3: 3x too short)."""

    gpu: str = "A100"
    owned: int = 4
    steady: float = 1.0
    burst: tuple[int, int] = (4, 12)
    noise: Optional[float] = None
    compute: Optional[tuple[float, float]] = None
    bias: float = 1.0

    @property
    def streams(self) -> int:
        return max(1, round(self.owned / 4 * self.steady))


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


def generate(days: int = 90, seed: int = 1, shape: Shape = Shape()) -> list[TraceJob]:
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

    `shape` changes these (see Shape); the default shape gives the trace above.
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
        for k in range(shape.streams):  # the first stream keeps the usual names
            tag = f"-{k + 1}" if k else ""
            work = 3.5 + 1.5 * day / max(days, 1) + rng.gauss(0, 0.4)
            jobs.append((day * 24 + DAILY_AT_H + rng.uniform(0, 0.1), dict(
                name=f"nightly-retrain{tag}", fingerprint=f"nightly-retrain{tag}-v{daily_v}",
                gpu_hours=round(min(6.0, max(3.0, work)), 2), gpus=1, deadline_h=24.0,
                checkpoints=True, kind="auto")))
        if weekday == WEEKLY_DAY:
            if day >= 28 and rng.random() < 0.25:
                weekly_v += 1
            for k in range(shape.streams):
                tag = f"-{k + 1}" if k else ""
                jobs.append((day * 24 + WEEKLY_AT_H, dict(
                    name=f"weekly-finetune{tag}", fingerprint=f"weekly-finetune{tag}-v{weekly_v}",
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
                for _ in range(rng.randint(*shape.burst)):
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
    out = [TraceJob(index=i, arrival_h=round(at * 60) / 60, gpu=shape.gpu, **kw)
           for i, (at, kw) in enumerate(jobs)]
    return _beliefs(out, seed, shape)


def _beliefs(jobs: list[TraceJob], seed: int, shape: Shape) -> list[TraceJob]:
    """Each job file's estimate (true wall hours x exp(N(0, noise))) and each
    fingerprint's true speeds, drawn in job order from their own generator."""
    if shape.noise is None and shape.compute is None:
        return jobs
    rng = random.Random(f"beliefs-{seed}")
    faster = sorted(m for m, v in SPEED.items() if m not in (CPU, shape.gpu)
                    and v > SPEED[shape.gpu] * 1.0005)
    speeds: dict[str, tuple] = {}
    out = []
    for j in jobs:
        extra: dict = {}
        if shape.noise is not None:
            extra.update(estimate_h=round(j.wall_hours * shape.bias
                                          * math.exp(rng.gauss(0, shape.noise)), 3),
                         estimated=True)
        if shape.compute is not None:
            if j.fingerprint not in speeds:
                c = rng.uniform(*shape.compute)
                speeds[j.fingerprint] = tuple(
                    (m, round(1.0 / ((1 - c) + c * SPEED[shape.gpu] / SPEED[m]), 3)) for m in faster)
            extra["speeds"] = speeds[j.fingerprint]
        out.append(replace(j, **extra))
    return out


def _pair(flag: str, text: str, kind, lo: float, hi: float) -> tuple:
    from orchestrator.base.errors import InputError

    a, sep, b = text.partition(":")
    try:
        pair = (kind(a), kind(b if sep else a))
    except ValueError:
        raise InputError(f"{flag} {text}: expected LO:HI numbers", f"e.g. {flag} {lo:g}:{hi:g}") from None
    if not lo <= pair[0] <= pair[1] <= hi:
        raise InputError(f"{flag} {text}: need {lo:g} <= LO <= HI <= {hi:g}", f"e.g. {flag} {lo:g}:{hi:g}")
    return pair


def parse_shape(owned: Optional[str] = None, steady: float = 1.0, burst: Optional[str] = None,
                noise: Optional[float] = None, compute: Optional[str] = None,
                bias: float = 1.0) -> Shape:
    """A Shape from `orch simulate --generate`'s flags; a bad one is an InputError."""
    from orchestrator.base.errors import InputError
    from orchestrator.decision.gpus import canonical_gpu

    shape = Shape()
    if owned is not None:
        model, _, count = owned.partition(":")
        gpu = canonical_gpu(model.strip()) if model.strip() else ""
        if gpu not in SPEED or gpu == CPU or not count.isdigit() or int(count) < 1:
            raise InputError(f"--owned {owned}: expected GPU:COUNT with a known GPU model",
                             "e.g. --owned A100:4 (SkyPilot's spelling)")
        shape = replace(shape, gpu=gpu, owned=int(count))
    if not (math.isfinite(steady) and steady > 0):
        raise InputError(f"--steady {steady:g}: must be above zero", "e.g. --steady 2 (twice the steady work)")
    if noise is not None and not (math.isfinite(noise) and noise >= 0):
        raise InputError(f"--estimate-noise {noise:g}: must be 0 or more", "e.g. --estimate-noise 0.5")
    if not (math.isfinite(bias) and bias > 0):
        raise InputError(f"--estimate-bias {bias:g}: must be above zero",
                         "e.g. --estimate-bias 3 (estimates 3x too long)")
    if bias != 1.0 and noise is None:
        noise = 0.0  # a bias needs the estimate_h column
    return replace(shape, steady=steady, noise=noise, bias=bias,
                   burst=_pair("--burst", burst, int, 1, 1000) if burst else shape.burst,
                   compute=_pair("--compute-share", compute, float, 0, 1) if compute else None)
