"""Each trace job as orch sees it: a job file (JobSpec) and every offer it could run on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from orchestrator.decision.gpus import canonical_gpu, relative_speed
from orchestrator.decision.models import Classification, Offer
from orchestrator.simulate.trace import TraceJob

SIM_STORAGE = "s3://simulated/checkpoints"


@dataclass(frozen=True)
class SimJob:
    job: TraceJob
    spec: object  # orchestrator.spec.JobSpec
    candidates: tuple[tuple[Offer, float], ...]  # (offer, GPUs used): what any policy may pick


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
    if job.kind != "auto":
        data["schedule"] = {"kind": job.kind}
    return JobSpec.model_validate(data)


def build_jobs(trace, offers: Sequence[Offer], settings) -> list[SimJob]:
    """A SimJob per trace job. Candidates come from orch's own matcher (`decide` prices
    every fitting offer), so every policy chooses among the same offers."""
    from orchestrator.decision.placement import OfferIndex, decide

    index = OfferIndex(offers)
    out: list[SimJob] = []
    cache: dict[tuple, tuple] = {}
    for job in trace.jobs:
        accels = accelerators(job, offers, settings.gpu_speeds)
        spec = job_spec(job, accels)
        key = tuple(accels)
        if key not in cache:
            probe = Classification(kind="exploratory", reasons=())
            d = decide(spec, probe, index, None, settings)
            cache[key] = tuple((a.offer, a.used) for a in d.alternatives) if accels else ()
        out.append(SimJob(job=job, spec=spec, candidates=cache[key]))
    return out
