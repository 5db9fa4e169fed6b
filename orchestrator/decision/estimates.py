"""How fast a job runs on each GPU model: its own measured runs first, then the team's, then the peak table."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional

from orchestrator.base.targets import OWNED
from orchestrator.decision.gpus import CPU, SPEED, canonical_gpu
from orchestrator.decision.models import PastRun

# The peak-TFLOPS table counts an H100 as 3.17 A100s; real jobs gain far less (data
# loading, memory bandwidth, small kernels and launch overheads do not scale with peak
# FLOPS: a DataLoader-fed small model gains 1.2-1.6x). With nothing measured, the table's
# ratio is taken to this power: the geometric middle between "no gain" and "the peak",
# which keeps the order of the models and halves the error in log terms either way.
SHRINK = 0.5
_RECENT = 5  # runs that count towards a measurement: recent code, recent data


def model_of(gpu: Optional[str]) -> str:
    """A run's or offer's GPU model in SkyPilot's spelling; CPU for none."""
    return CPU if gpu is None or gpu.lower() == "cpu" else canonical_gpu(gpu)


@dataclass(frozen=True, slots=True)
class OnModel:
    """What one job's recent runs measured on one GPU model: medians of per-GPU throughput
    and of GPU-hours (the work, if it splits evenly over the GPUs), and the share of a step
    spent waiting for data. `runs` counts the successful runs, `running` the runs still
    going that already measured throughput or data share (their hours are not known yet:
    they count for the speed, never for the hours)."""

    runs: int
    sps_per_gpu: Optional[float]
    gpu_hours: Optional[float]
    data_share: Optional[float]
    running: int = 0


def _median(xs: list[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def by_model(runs: Iterable[PastRun]) -> dict[str, OnModel]:
    """One job's succeeded runs, newest first, summed up per GPU model; with the throughput
    and data share its running runs have measured so far (the runner's first-minute
    `measure`, then each report): a sweep's later runs are placed by what its first runs
    measured, not only once they end."""
    groups: dict[str, list[PastRun]] = {}
    for r in sorted((r for r in runs if r.succeeded or r.measuring), key=lambda r: r.created_at,
                    reverse=True):
        groups.setdefault(model_of(r.gpu), []).append(r)
    out = {}
    for model, rs in groups.items():
        rs = rs[:_RECENT]
        n = [max(float(r.gpu_count or 0), 1.0) for r in rs]
        done = [(r, k) for r, k in zip(rs, n) if r.succeeded]
        out[model] = OnModel(
            runs=len(done),
            sps_per_gpu=_median([r.samples_per_sec / k for r, k in zip(rs, n) if r.samples_per_sec]),
            gpu_hours=_median([r.duration_s / 3600 * k for r, k in done if r.duration_s]),
            data_share=_median([r.data_share for r in rs if r.data_share is not None]),
            running=len(rs) - len(done))
    return out


def own_ratio(a: OnModel, b: OnModel) -> Optional[float]:
    """Per-GPU speed on b over a for one job: by throughput when both have it, else by time."""
    if a.sps_per_gpu and b.sps_per_gpu:
        return b.sps_per_gpu / a.sps_per_gpu
    if a.gpu_hours and b.gpu_hours:
        return a.gpu_hours / b.gpu_hours
    return None


def gain(compute: float, ratio: float) -> float:
    """Speed-up of a step whose `compute` share runs `ratio` times faster; the rest (waiting
    for data) takes as long on any GPU."""
    return 1.0 / ((1.0 - compute) + compute / ratio)


def compute_ratio(observed: float, data_share: Optional[float]) -> float:
    """The ratio on compute alone that a job waiting `data_share` of its step observed as
    `observed` overall (gain's inverse). A job that gained more than its compute share allows
    (the share was mismeasured, or the faster GPU's loader kept up better) is taken as seen."""
    if not data_share:
        return observed
    c = 1.0 - data_share
    rest = 1.0 / observed - data_share
    return c / rest if rest > 0 and c > 0 else observed


@dataclass(frozen=True, slots=True)
class TeamRatios:
    """Per ordered pair of models (a, b): the median over the team's jobs that ran on both
    (each job by its median runs) of b's per-GPU speed over a's, as observed and on compute
    alone (each job's data wait taken out), with how many jobs."""

    observed: Mapping[tuple[str, str], tuple[float, int]]
    compute: Mapping[tuple[str, str], tuple[float, int]]
    # Per pair, the speed that prices a job whose own ratio is unknown at its expected cost:
    # hours go as 1 / ratio, so the harmonic mean over the team's jobs, not their median
    # (a sweep of 50 data-bound runs is not priced at the compute-bound jobs' gain).
    expected: Mapping[tuple[str, str], float] = field(default_factory=dict)
    # Per reference model (what the runs' estimates refer to): the GPU-hours a day the
    # team's jobs rented, over the runs' span (explore.py: the work a measurement may save).
    rented: Mapping[str, float] = field(default_factory=dict)


def learn_ratios(runs: Iterable[PastRun], exclude: str = "") -> TeamRatios:
    """The team's ratios from every job's runs but `exclude` (the job being planned, whose
    own runs count on their own)."""
    per_job: dict[str, list[PastRun]] = {}
    for r in runs:
        if r.fingerprint and r.fingerprint != exclude:
            per_job.setdefault(r.fingerprint, []).append(r)
    seen: dict[tuple[str, str], list[float]] = {}
    pure: dict[tuple[str, str], list[float]] = {}
    for rs in per_job.values():
        # Finished runs: a running one measures its own job's later runs only.
        models = by_model(r for r in rs if r.succeeded)
        for a, on_a in models.items():
            for b, on_b in models.items():
                ratio = own_ratio(on_a, on_b) if a != b else None
                if ratio:
                    seen.setdefault((a, b), []).append(ratio)
                    pure.setdefault((a, b), []).append(compute_ratio(ratio, on_a.data_share))
    return TeamRatios(observed={k: (statistics.median(v), len(v)) for k, v in seen.items()},
                      compute={k: (statistics.median(v), len(v)) for k, v in pure.items()},
                      expected={k: statistics.harmonic_mean(v) for k, v in seen.items()},
                      rented=rented_per_day(r for rs in per_job.values() for r in rs))


def rented_per_day(runs: Iterable[PastRun]) -> dict[str, float]:
    """Per reference model (the estimate's, else the run's own): the GPU-hours a day the
    succeeded rented runs took, over the span of every run's creation (at least a day)."""
    hours: dict[str, float] = {}
    first, last = math.inf, -math.inf
    for r in runs:
        first, last = min(first, r.created_at), max(last, r.created_at)
        if r.succeeded and r.duration_s and r.target is not None and r.target not in OWNED:
            key = model_of(r.estimate_gpu or r.gpu)
            hours[key] = hours.get(key, 0.0) + r.duration_s / 3600.0 * max(float(r.gpu_count or 0), 1.0)
    days = max(1.0, (last - first) / 86400.0) if hours else 1.0
    return {k: v / days for k, v in hours.items()}


def estimate_ratios(runs: Iterable[PastRun], owner: Optional[str], exclude: str = "") -> dict[str, list[float]]:
    """Per job of the owner's (all jobs for `owner=None`) but `exclude`: measured hours over
    estimate.hours of each run on the model the estimate was written for (when it names one)."""
    per_job: dict[str, list[float]] = {}
    for r in runs:
        if (r.succeeded and (owner is None or r.owner == owner) and r.fingerprint != exclude and r.duration_s
                and r.estimate_hours and (r.estimate_gpu is None
                                          or model_of(r.estimate_gpu) == model_of(r.gpu))):
            per_job.setdefault(r.fingerprint, []).append(r.duration_s / 3600 / r.estimate_hours)
    return per_job


def _per_job(runs: Iterable[PastRun], owner: Optional[str], exclude: str,
             ratios: Optional[Mapping[str, list[float]]]) -> Mapping[str, list[float]]:
    if ratios is None:
        return estimate_ratios(runs, owner, exclude)
    return {fp: v for fp, v in ratios.items() if fp != exclude}


def user_bias(runs: Iterable[PastRun], owner: Optional[str], exclude: str = "",
              ratios: Optional[Mapping[str, list[float]]] = None) -> Optional[tuple[float, int]]:
    """How the owner's estimates compare with what their runs measured: the median over
    their other jobs (each its median run) of measured hours / estimate.hours, counting runs
    on the model the estimate was written for (when it names one); None without any.
    `owner=None` (a plan that does not know who asks): everyone's runs. `ratios`: the
    owner's `estimate_ratios`, worked out once for many plans (then `runs` is not read)."""
    per_job = _per_job(runs, owner, exclude, ratios)
    if not per_job:
        return None
    return statistics.median(statistics.median(v) for v in per_job.values()), len(per_job)


ERROR_MIN_JOBS = 3  # jobs whose runs measure the owner's estimates before their error counts


def user_error(runs: Iterable[PastRun], owner: Optional[str], exclude: str = "",
               ratios: Optional[Mapping[str, list[float]]] = None) -> Optional[float]:
    """The measured error of the owner's estimates once their bias is taken out: the 90th
    percentile over their other jobs (each its median run) of measured / estimated hours,
    over the median; None with fewer than ERROR_MIN_JOBS such jobs."""
    per_job = _per_job(runs, owner, exclude, ratios)
    if len(per_job) < ERROR_MIN_JOBS:
        return None
    each = sorted(statistics.median(v) for v in per_job.values())
    p90 = each[min(len(each) - 1, int(0.9 * len(each)))]
    return p90 / statistics.median(each)


@dataclass(frozen=True, slots=True)
class Estimate:
    """One job's per-GPU speed on `gpu` relative to `base` (the model its reference time is
    on), and where that figure came from; ratio None when nothing gives one."""

    gpu: str
    base: str
    ratio: Optional[float]
    source: str
    kind: str = "peak"  # "own", "team", "setting", "peak", "same", "none": `source` in one word


def _runs(on: OnModel, model: str) -> str:
    done = f"{on.runs} run{'s' if on.runs != 1 else ''}" if on.runs else ""
    going = f"{on.running} running" if on.running else ""
    return f"{' and '.join(x for x in (done, going) if x)} on {model}"


def speed_estimate(base: str, target: str, own: Mapping[str, OnModel], team: TeamRatios,
                   overrides: Mapping[str, float] | None = None,
                   peak: Mapping[str, float] = SPEED) -> Estimate:
    """The job's speed on `target` over `base`, in order of trust: its own runs on both; the
    team's ratio for the pair, through the job's own compute share when its runs measured
    one; a `gpu_speeds` setting (the user's own figure, taken as given); the peak table,
    shrunk (GPU to GPU; a CPU's figure is no peak of the same kind)."""
    if base == target:
        return Estimate(target, base, 1.0, "", "same")
    on_base, on_target = own.get(base), own.get(target)
    if on_base and on_target and (r := own_ratio(on_base, on_target)):
        runs = (f"{on_base.runs} runs on each" if on_base.runs == on_target.runs > 1
                and not on_base.running and not on_target.running else
                f"{_runs(on_base, base)}, {_runs(on_target, target)}")
        if on_base.sps_per_gpu and on_target.sps_per_gpu:
            runs += ", by throughput"
        return Estimate(target, base, r, f"{target}: {r:.2g}x this job's {base} speed ({runs})", "own")
    share = on_base.data_share if on_base else None
    if share is not None and (hit := team.compute.get((base, target))):
        r = gain(1.0 - share, hit[0])
        return Estimate(target, base, r, f"{target}: {r:.2g}x this job's {base} speed (the team's "
                                         f"median over {hit[1]} jobs on both, {hit[0]:.2g}x on compute; "
                                         f"this job waits for data {share:.0%} of a step)", "team")
    prior = _prior(base, target, overrides, peak, share)
    if hit := team.observed.get((base, target)):
        mean, n = team.expected.get((base, target), hit[0]), hit[1]
        how = (f"median over {n} job{'s' if n != 1 else ''} on both" if abs(mean / hit[0] - 1.0) <= 0.02
               else f"{n} jobs on both, priced at their expected hours: median {hit[0]:.2g}x")
        if prior is None or prior.ratio is None:
            return Estimate(target, base, mean, f"{target}: {mean:.2g}x {base} (the team's {how})", "team")
        w = n / (n + PRIOR_JOBS)  # the prior counts as PRIOR_JOBS jobs' worth of measurement
        point = math.exp(w * math.log(mean) + (1 - w) * math.log(prior.ratio))
        # What is left of the belief's spread (in log terms: the prior's, as much as the
        # jobs have not measured away) prices the hours at their expectation, which is
        # longer than the point's: E[1 / r] = exp(var / 2) / r for a lognormal belief.
        var = prior_log_var(base, target, peak) * (1 - w)
        r = point / math.exp(var / 2)
        what = "gpu_speeds setting" if prior.kind == "setting" else "peak table, shrunk"
        return Estimate(target, base, r, f"{target}: {r:.2g}x {base} (the team's {how}, {mean:.2g}x, "
                                         f"weighed against the {what}, {prior.ratio:.2g}x, as "
                                         f"{PRIOR_JOBS} jobs: {point:.2g}x, priced at its "
                                         f"expected hours for the belief's spread)", "team")
    if prior is not None and prior.kind == "peak" and prior.ratio and CPU not in (base, target):
        # The shrunk table is a belief with the prior's whole spread: priced, as a team
        # figure is, at its expected hours (E[1 / r] = exp(var / 2) / r for a lognormal).
        # With a measured data share only the compute part is the guess: E[hours] goes as
        # share + (1 - share) x exp(var / 2) / (its compute ratio).
        f = math.exp(prior_log_var(base, target, peak) / 2)
        shrunk = ((peak.get(target) or 1.0) / (peak.get(base) or 1.0)) ** SHRINK
        r = prior.ratio / f if share is None else 1.0 / (share + (1.0 - share) * f / shrunk)
        inner = prior.source.split(" (", 1)[1][:-1]
        return Estimate(target, base, r, f"{target}: {r:.2g}x {base} ({inner}: {prior.ratio:.2g}x, "
                                         "priced at its expected hours for the belief's spread)", "peak")
    if prior is not None:
        return prior
    unknown = base if not peak.get(base) else target
    return Estimate(target, base, None, f"no speed figure for {unknown} (add it to the gpu_speeds setting)",
                    "none")


# A prior speed figure (a gpu_speeds setting, the shrunk peak table) weighs as much as this
# many of the team's jobs measured on both models (in log terms): a setting is a prior that
# measured runs overrule as they add up (at 12 jobs, 80 % of the figure is theirs).
PRIOR_JOBS = 3


def prior_log_var(base: str, target: str, peak: Mapping[str, float] = SPEED) -> float:
    """The log variance of the prior belief in `target`'s speed over `base`'s: the shrunk
    peak table is as likely off by its square root either way (half the ratio's log)."""
    ratio = (peak.get(target) or 1.0) / (peak.get(base) or 1.0)
    return (math.log(max(ratio, 1.0 / ratio)) / 2.0) ** 2


def _prior(base: str, target: str, overrides: Mapping[str, float] | None,
           peak: Mapping[str, float], share: Optional[float]) -> Optional[Estimate]:
    """What is believed with no run measured: a gpu_speeds setting, else the peak table
    (shrunk GPU to GPU); None where neither has a figure."""
    given = {model_of(k): float(v) for k, v in (overrides or {}).items()}
    if base in given or target in given:
        sb, st = given.get(base, peak.get(base)), given.get(target, peak.get(target))
        if sb and st:
            return Estimate(target, base, st / sb, f"{target}: {st / sb:.3g}x {base} (gpu_speeds setting)",
                            "setting")
    sb, st = peak.get(base), peak.get(target)
    if not sb or not st:
        return None
    table = st / sb
    if CPU in (base, target):
        return Estimate(target, base, table, f"{target}: {table:.3g}x {base} (peak table; no runs measured)")
    r = table ** SHRINK
    how = f"peak table {table:.3g}x, shrunk"
    if share is not None:
        r, how = gain(1.0 - share, r), f"{how}, {share:.0%} of a step waits for data"
    return Estimate(target, base, r, f"{target}: {r:.2g}x {base} ({how}; no runs measured on {target})")
