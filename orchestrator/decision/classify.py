"""Exploratory or steady: weigh a job's signals and say which way each one points."""

from __future__ import annotations

from typing import Iterable, Optional

from orchestrator.decision.models import Classification, PastRun

_DAY = 86400.0


def recent_successes(history: Iterable[PastRun], fingerprint: str, now: float,
                     window_days: float) -> int:
    return len(_success_times(history, fingerprint, now, window_days))


def _success_times(history: Iterable[PastRun], fingerprint: str, now: float,
                   window_days: float) -> list[float]:
    since = now - window_days * _DAY
    return sorted(r.created_at for r in history
                  if r.fingerprint == fingerprint and r.succeeded and since <= r.created_at <= now)


def occasions(times: Iterable[float], min_gap_hours: float) -> int:
    """Runs counted once per occasion: a run counts when it started at least
    `min_gap_hours` after the last run that counted, so a sweep's ten repeats in an hour
    are one occasion and the same job on three days is three."""
    n, last = 0, None
    for t in sorted(times):
        if last is None or t - last >= min_gap_hours * 3600.0:
            n, last = n + 1, t
    return n


def classify(spec, fingerprint: str, history: Iterable[PastRun], now: float, settings,
             code_dirty: bool, expected_hours: Optional[float]) -> Classification:
    """Classify one job. An explicit `schedule.kind` wins, then a cron schedule, then K
    successful runs of the same fingerprint in W days on K separate occasions (runs at
    least `steady_min_gap_hours` apart): steady means recurring over time, and repeats
    inside one burst, a sweep's, do not count. Anything else is exploratory. Every
    signal that was looked at is reported, including those that lost."""
    k, w = settings.steady_min_runs, settings.steady_window_days
    gap = settings.steady_min_gap_hours
    times = _success_times(history, fingerprint, now, w)
    n, occ = len(times), occasions(times, gap)
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
    elif occ >= k:
        kind = "steady"
    else:
        kind = "exploratory"

    if explicit and cron:
        reasons.append(f"cron schedule '{cron}' (overridden by schedule.kind)")
    runs = f"{n} successful run{'s' if n != 1 else ''} of this job in the last {w:g} days"
    on = f"on {occ} occasion{'s' if occ != 1 else ''} at least {gap:g} h apart"
    if occ >= k:
        reasons.append(f"{runs}, {on} (>= {k} makes it steady)")
    elif n == 0:
        reasons.append(f"new job: {runs} ({k} on separate occasions would make it steady)")
    elif n >= k:
        reasons.append(f"{runs}, but {on} (< {k}): repeats within one burst, as a sweep's, "
                       "do not make it steady")
    else:
        reasons.append(f"{runs}, {on} (< {k}: not yet steady)")
    if code_dirty:
        reasons.append("uncommitted changes in the workdir point to exploratory work")
    if expected_hours is None:
        reasons.append("expected duration unknown")
    elif short:
        reasons.append(f"short: expected {expected_hours:.2g} h < {settings.short_job_hours:g} h "
                       "points to exploratory work")
    else:
        reasons.append(f"long: expected {expected_hours:.3g} h >= {settings.short_job_hours:g} h")
    if kind == "exploratory" and not explicit and occ < k and not (code_dirty or short):
        reasons.append("one-off so far: exploratory until it repeats")
    return Classification(kind=kind, reasons=tuple(reasons), recent_successes=n,
                          expected_hours=expected_hours, occasions=occ)
