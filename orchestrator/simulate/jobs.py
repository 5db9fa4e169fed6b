"""Each trace job twice: its truth (the engine's) and what a policy may see (the job file, offers).

A policy is handed an `Ask`, which has no field for the job's true work or speeds: what it
knows of its length is the job file's estimate (`estimate_h`, None when the file gives
none) and, under `--beliefs truth` only, the true figures put there on purpose.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Mapping, Optional, Sequence

from orchestrator.decision.classify import classify
from orchestrator.decision.gpus import SPEED, canonical_gpu, relative_speed
from orchestrator.decision.models import Classification, Offer, PastRun
from orchestrator.decision.pricing import job_cost
from orchestrator.simulate.trace import TraceJob

SIM_STORAGE = "s3://simulated/checkpoints"
BELIEFS = ("learned", "truth")
# Samples per second a run records on its own `gpus` x `gpu`; on other devices it scales
# with the job's true speed there, as a runner's measured throughput would.
REF_THROUGHPUT = 100.0


@dataclass(frozen=True, slots=True)
class Ask:
    """A job as a policy sees it when it arrives: the submit, the job file, the offers.
    Deliberately without the trace's gpu_hours or true speeds (see `SimJob.job`)."""

    index: int
    arrival_h: float
    fingerprint: str
    gpu: str
    gpus: int
    deadline_h: Optional[float]
    checkpoints: bool
    trace_kind: str  # the trace's kind column: `steady` is a cron schedule
    estimate_h: Optional[float]  # the job file's estimate.hours; None: it gives none
    spec: object  # orchestrator.spec.JobSpec
    candidates: tuple[tuple[Offer, float], ...]  # (offer, GPUs used): what any policy may pick
    kind: str = "exploratory"  # what orch's classifier calls it given the trace before it
    speeds: tuple[tuple[str, float], ...] = ()  # believed speeds vs `gpu`: only under --beliefs truth
    told_truth: bool = False  # --beliefs truth: estimate_h and speeds are the true figures
    # The schedule's own figures for a cron job's slot: its cheapest cloud option per job
    # (spot if it checkpoints) and how late it may start on owned GPUs, from the estimate.
    rent_usd: Optional[float] = None
    slack_h: float = math.inf
    name: str = ""


@dataclass(frozen=True)
class SimJob:
    """The engine's record of a job: the truth (`job`) and what policies see (`ask`)."""

    job: TraceJob
    ask: Ask

    @property
    def spec(self):
        return self.ask.spec

    @property
    def candidates(self) -> tuple[tuple[Offer, float], ...]:
        return self.ask.candidates

    @property
    def kind(self) -> str:
        return self.ask.kind


def scaled_hours(work: float, ref_gpu: str, job_speeds: Sequence[tuple[str, float]],
                 gpu: Optional[str], used: float, speeds: Mapping[str, float] | None) -> float:
    """Hours on `used` x `gpu` of `work` GPU-hours on `ref_gpu`: the job's own speed on that
    model where given, else the table's ratio; the work splits evenly over the GPUs.
    Both speeds are known: the trace admits known GPUs only, and `accelerators` offers
    no slower or unknown ones."""
    # The job's own GPU goes through the table too (ratio 1), bit for bit as before.
    own = dict(job_speeds)
    name = None if gpu is None else canonical_gpu(gpu)
    if name in own and name != ref_gpu:
        return work / (own[name] * max(used, 1e-9))
    ref, speed = relative_speed(ref_gpu, speeds), relative_speed(gpu, speeds)
    if ref is None or speed is None:
        raise ValueError(f"no relative speed for {ref_gpu if ref is None else gpu}")
    return work * ref / (speed * max(used, 1e-9))


def true_hours(job: TraceJob, gpu: Optional[str], used: float,
               speeds: Mapping[str, float] | None) -> float:
    """True run hours of a job on `used` x `gpu`: its work scaled by its true speed there."""
    return scaled_hours(job.gpu_hours, job.gpu, job.speeds, gpu, used, speeds)


def data_share(job: TraceJob, gpu: Optional[str]) -> Optional[float]:
    """The share of a step a runner measures waiting for data (its `data_fraction` metric)
    when this job runs on `gpu`, for true speeds that one compute-bound share c explains
    (generate.py's model: on a faster M, 1 / ((1 - c) + c / R), R its peak ratio): 1 - c
    on the trace's GPU (or one as fast), (1 - c) x its speed on a faster one. None where the trace's speeds
    say nothing of it (none written, a model not among them, or figures no single share
    explains within 0.02): measured, not told, as a runner's own figure would be."""
    base = SPEED.get(job.gpu)
    cs = [(1 - 1 / s) / (1 - base / SPEED[m]) for m, s in job.speeds
          if base and s > 0 and SPEED.get(m, 0) > base * 1.0005]
    if not base or not cs or max(cs) - min(cs) > 0.02:
        return None
    c = min(1.0, max(0.0, statistics.median(cs)))
    name = None if gpu is None else canonical_gpu(gpu)
    same = name == job.gpu or abs(SPEED.get(name or "", 0) / base - 1) <= 0.0005  # A100-80GB
    speed = 1.0 if same else dict(job.speeds).get(name or "")
    return None if speed is None else round(min(1.0, (1 - c) * speed), 4)


def believed_hours(ask: Ask, gpu: Optional[str], used: float, speeds: Mapping[str, float] | None,
                   default_h: float) -> float:
    """What the job file says a run takes on `used` x `gpu` (orch's default with no estimate)."""
    est = default_h if ask.estimate_h is None else ask.estimate_h
    return scaled_hours(est * ask.gpus, ask.gpu, ask.speeds, gpu, used, speeds)


def believed_speeds(ask: Ask, speeds: Mapping[str, float] | None) -> Mapping[str, float] | None:
    """The speed table orch's estimator reads for this job: the scenario's settings; told
    the truth, every model's true speed as a setting (taken as given, not shrunk), the
    job's own speeds written in relative to its GPU."""
    if not ask.told_truth:
        return speeds
    table = {m: relative_speed(m, speeds) or v for m, v in SPEED.items()}
    ref = table.get(ask.gpu) or 1.0
    return {**table, **{m: ref * f for m, f in ask.speeds}}


def owned_cost(offer: Offer, hours: float, used: float) -> tuple[float, float]:
    """(full, power) USD of a run on owned GPUs: `job_cost`, whose marginal cost is the
    power there (it is None only for the cloud)."""
    full, power = job_cost(offer, hours, used, 0.0)
    if power is None:
        raise ValueError(f"a {offer.target} offer has no owned power cost")
    return full, power


def accelerators(job: TraceJob, offers: Sequence[Offer],
                 speeds: Mapping[str, float] | None = None) -> list[str]:
    """What the job file asks for: `gpus` of the trace's GPU or of any model at least as
    fast; where no cloud instance has exactly that many of a model, also its next larger
    instance (data-parallel work splits over more GPUs, as orch's estimator assumes).
    The trace's own model comes first."""
    ref = relative_speed(job.gpu, speeds) or 0.0
    cloud: dict[str, set] = {}
    owned: dict[str, float] = {}
    for o in offers:
        if o.gpu is None:
            continue
        g = canonical_gpu(o.gpu)
        if not o.owned:
            cloud.setdefault(g, set()).add(o.count)
        else:
            owned[g] = max(owned.get(g, 0.0), o.count)
    models = sorted(set(cloud) | set(owned), key=lambda g: (g != job.gpu, g))
    n, out = float(job.gpus), []
    for g in models:
        s = relative_speed(g, speeds)
        if s is None or s < ref - 1e-9:
            continue
        counts = cloud.get(g, set())
        if n in counts or owned.get(g, 0.0) >= n:
            out.append(f"{g}:{job.gpus}")
        larger = [c for c in counts if c > n]
        if n not in counts and larger:
            out.append(f"{g}:{min(larger):g}")
    return out


def job_spec(job: TraceJob, accels: list[str], estimate_h: Optional[float]):
    """The job file a user would write for this trace job, validated as orch validates one:
    `estimate_h` is its estimate.hours (None: the file gives none)."""
    from orchestrator.spec import JobSpec

    data: dict = {"name": job.name, "run": "python train.py"}
    if estimate_h is not None:
        data["estimate"] = {"hours": estimate_h, "gpu": job.gpu}
    if accels:
        data["resources"] = {"accelerators": accels}
    if job.checkpoints:
        data["checkpoint"] = {"storage": SIM_STORAGE}
    schedule: dict = {}
    if job.kind != "auto":
        schedule["kind"] = job.kind
    if job.deadline_h is not None:
        schedule["deadline_hours"] = job.deadline_h
    if schedule:
        data["schedule"] = schedule
    return JobSpec.model_validate(data)


def build_jobs(trace, offers: Sequence[Offer], settings, beliefs: str = "learned") -> list[SimJob]:
    """A SimJob per trace job. Candidates come from orch's own matcher (`decide` prices
    every fitting offer), so every policy chooses among the same offers. `beliefs`
    "truth" writes the true wall hours and speeds into what policies see."""
    from orchestrator.decision.placement import OfferIndex, decide

    if beliefs not in BELIEFS:
        raise ValueError(f"beliefs must be one of {BELIEFS}, not {beliefs!r}")
    index = OfferIndex(offers)
    out: list[SimJob] = []
    cache: dict[tuple, tuple] = {}
    seen: dict[str, list[PastRun]] = {}
    for job in trace.jobs:
        accels = accelerators(job, offers, settings.gpu_speeds)
        truth = beliefs == "truth"
        est = job.wall_hours if truth else job.file_estimate_h
        spec = job_spec(job, accels, est)
        key = tuple(accels)
        if key not in cache:
            probe = Classification(kind="exploratory", reasons=())
            d = decide(spec, probe, index, None, settings)
            cache[key] = tuple((a.offer, a.used) for a in d.alternatives) if accels else ()
        ask = Ask(index=job.index, arrival_h=job.arrival_h, fingerprint=job.fingerprint,
                  gpu=job.gpu, gpus=job.gpus, deadline_h=job.deadline_h,
                  checkpoints=job.checkpoints, trace_kind=job.kind, estimate_h=est, spec=spec,
                  candidates=cache[key], speeds=job.speeds if truth else (), name=job.name,
                  told_truth=truth)
        out.append(SimJob(job=job, ask=_believed(ask, seen, trace, settings)))
        seen.setdefault(job.fingerprint, []).append(PastRun(
            job.fingerprint, "SUCCEEDED", trace.start + job.arrival_h * 3600.0))
    return out


def _believed(ask: Ask, seen: dict, trace, settings) -> Ask:
    """The ask with the figures read from its estimate: its kind for reporting waits by
    kind (orch's classifier, as if every earlier arrival of its fingerprint had succeeded,
    the same for every policy), and a cron slot's cloud cost and slack."""
    speeds, default_h = settings.gpu_speeds, settings.default_job_hours
    hours = ask.estimate_h if ask.estimate_h is not None else default_h
    now = trace.start + ask.arrival_h * 3600.0
    kind = classify(ask.spec, ask.fingerprint, seen.get(ask.fingerprint, ()), now, settings,
                    False, hours).kind
    rent = min((job_cost(o, believed_hours(ask, o.gpu, u, speeds, default_h), u,
                         settings.cloud_startup_minutes)[0]
                for o, u in ask.candidates if not o.owned and (ask.checkpoints or not o.spot)),
               default=None)
    slack = math.inf if ask.deadline_h is None else max(0.0, ask.deadline_h - hours)
    return replace(ask, kind=kind, rent_usd=rent, slack_h=slack)
