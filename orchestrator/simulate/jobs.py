"""Each trace job as orch sees it: a job file (JobSpec) and every offer it could run on."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from orchestrator.decision.classify import classify
from orchestrator.decision.cost import job_cost
from orchestrator.decision.gpus import canonical_gpu, relative_speed
from orchestrator.decision.models import Classification, Offer, PastRun
from orchestrator.simulate.trace import TraceJob

SIM_STORAGE = "s3://simulated/checkpoints"


@dataclass(frozen=True)
class SimJob:
    job: TraceJob
    spec: object  # orchestrator.spec.JobSpec
    candidates: tuple[tuple[Offer, float], ...]  # (offer, GPUs used): what any policy may pick
    kind: str = "exploratory"  # what orch's classifier calls it given the trace before it
    rent_usd: Optional[float] = None  # its cheapest cloud option per job (spot if it checkpoints)
    slack_h: float = math.inf  # how late it may start on its own GPUs and meet its deadline


def true_hours(job: TraceJob, gpu: Optional[str], used: float,
               speeds: Mapping[str, float] | None) -> float:
    """True run hours of a job on `used` x `gpu`: its work scaled by relative speed.
    Both speeds are known: the trace admits known GPUs only, and `accelerators` offers
    no slower or unknown ones."""
    ref, speed = relative_speed(job.gpu, speeds), relative_speed(gpu, speeds)
    if ref is None or speed is None:
        raise ValueError(f"no relative speed for {job.gpu if ref is None else gpu}")
    return job.gpu_hours * ref / (speed * max(used, 1e-9))


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
        if o.target == "cloud":
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


def job_spec(job: TraceJob, accels: list[str]):
    """The job file a user would write for this trace job, validated as orch validates one."""
    from orchestrator.spec import JobSpec

    data: dict = {"name": job.name, "run": "python train.py",
                  "estimate": {"hours": job.gpu_hours / job.gpus, "gpu": job.gpu}}
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


def build_jobs(trace, offers: Sequence[Offer], settings) -> list[SimJob]:
    """A SimJob per trace job. Candidates come from orch's own matcher (`decide` prices
    every fitting offer), so every policy chooses among the same offers."""
    from orchestrator.decision.placement import OfferIndex, decide

    index = OfferIndex(offers)
    out: list[SimJob] = []
    cache: dict[tuple, tuple] = {}
    seen: dict[str, list[PastRun]] = {}
    for job in trace.jobs:
        accels = accelerators(job, offers, settings.gpu_speeds)
        spec = job_spec(job, accels)
        key = tuple(accels)
        if key not in cache:
            probe = Classification(kind="exploratory", reasons=())
            d = decide(spec, probe, index, None, settings)
            cache[key] = tuple((a.offer, a.used) for a in d.alternatives) if accels else ()
        cands = cache[key]
        rent = min((job_cost(o, true_hours(job, o.gpu, u, settings.gpu_speeds), u,
                             settings.cloud_startup_minutes)[0]
                    for o, u in cands if o.target == "cloud" and (job.checkpoints or not o.spot)),
                   default=None)
        slack = (math.inf if job.deadline_h is None
                 else max(0.0, job.deadline_h - job.gpu_hours / job.gpus))
        out.append(SimJob(job=job, spec=spec, candidates=cands, rent_usd=rent, slack_h=slack,
                          kind=_kind(job, spec, seen, trace, settings)))
        seen.setdefault(job.fingerprint, []).append(PastRun(
            job.fingerprint, "SUCCEEDED", trace.start + job.arrival_h * 3600.0))
    return out


def _kind(job: TraceJob, spec, seen: dict, trace, settings) -> str:
    """The job's kind for reporting waits by kind, the same for every policy: orch's
    classifier, as if every earlier arrival of its fingerprint had succeeded."""
    now = trace.start + job.arrival_h * 3600.0
    hours = job.gpu_hours / job.gpus
    return classify(spec, job.fingerprint, seen.get(job.fingerprint, ()), now, settings, False,
                    hours).kind
