"""Exploratory or steady: weigh a job's signals and say which way each one points."""

from __future__ import annotations

from typing import Iterable, Optional

from orchestrator.decision.models import Classification, PastRun

_DAY = 86400.0


def recent_successes(history: Iterable[PastRun], fingerprint: str, now: float,
                     window_days: float) -> int:
    since = now - window_days * _DAY
    return sum(1 for r in history
               if r.fingerprint == fingerprint and r.succeeded and since <= r.created_at <= now)


def classify(spec, fingerprint: str, history: Iterable[PastRun], now: float, settings,
             code_dirty: bool, expected_hours: Optional[float]) -> Classification:
    """Classify one job. An explicit `schedule.kind` wins, then a cron schedule, then K
    successful runs of the same fingerprint in W days; anything else is exploratory.
    Every signal that was looked at is reported, including those that lost."""
    k, w = settings.steady_min_runs, settings.steady_window_days
    n = recent_successes(history, fingerprint, now, w)
    short = expected_hours is not None and expected_hours < settings.short_job_hours
    explicit = spec.schedule.kind if spec.schedule.kind != "auto" else None
    cron = spec.schedule.cron

    reasons: list[str] = []
    if explicit:
        kind = explicit
        reasons.append(f"schedule.kind is {explicit} in the job file")
    elif cron:
        kind = "steady"
        reasons.append(f"cron schedule '{cron}': it repeats, so it is steady")
    elif n >= k:
        kind = "steady"
    else:
        kind = "exploratory"

    if explicit and cron:
        reasons.append(f"cron schedule '{cron}' (overridden by schedule.kind)")
    runs = f"{n} successful run{'s' if n != 1 else ''} of this job in the last {w:g} days"
    if n >= k:
        reasons.append(f"{runs} (>= {k} makes it steady)")
    elif n == 0:
        reasons.append(f"new job: {runs} ({k} would make it steady)")
    else:
        reasons.append(f"{runs} (< {k}: not yet steady)")
    if code_dirty:
        reasons.append("uncommitted changes in the workdir point to exploratory work")
    if expected_hours is None:
        reasons.append("expected duration unknown")
    elif short:
        reasons.append(f"short: expected {expected_hours:.2g} h < {settings.short_job_hours:g} h "
                       "points to exploratory work")
    else:
        reasons.append(f"long: expected {expected_hours:.3g} h >= {settings.short_job_hours:g} h")
    if kind == "exploratory" and not explicit and n < k and not (code_dirty or short):
        reasons.append("one-off so far: exploratory until it repeats")
    return Classification(kind=kind, reasons=tuple(reasons), recent_successes=n,
                          expected_hours=expected_hours)
