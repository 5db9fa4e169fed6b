"""What the service shows of its jobs: the records `orch status`, `orch cancel` and the API
answer with (each job checked with its backend first, its text redacted on the way out),
and the status page's summary of a server. The client and the server both call these."""

from __future__ import annotations

import time
from typing import Optional

from orchestrator.base.errors import BackendError
from orchestrator.records import CancelledJob, JobDetail, JobRecord, JobRow, Schedule
from orchestrator.records.metrics import RunMetrics
from orchestrator.service import following, spending
from orchestrator.service.core import Core
from orchestrator.store import TERMINAL, JobQuery, iso


def shown(core: Core, rec: JobRow) -> JobRow:
    """The record with its message and metrics (keys and values read from the job's own
    lines) redacted again on the way out: a row written before redaction caught every form
    of a value still shows none."""
    if not rec.message and not rec.metrics:
        return rec
    clean = following.redactor(core, rec)
    return rec.model_copy(update={"message": clean(rec.message) if rec.message else rec.message,
                                  "metrics": RunMetrics.read(clean.tree(rec.metrics.to_dict()))})


def job_records(core: Core, limit: int = 50) -> list[JobRecord]:
    """The newest jobs, each checked with its backend (`orch status`)."""
    return [JobRecord.from_row(shown(core, r)) for r in following.list_jobs(core, limit)]


def job_page(core: Core, query: JobQuery,
             fresh_s: float = 0.0) -> tuple[list[JobRecord], Optional[str]]:
    """One page of jobs (the store's `JobQuery`), each checked with its backend unless its
    record changed within `fresh_s` seconds (`orch serve` reconciles every job each
    period: a list need not ask every backend again), and the next page's cursor (None: the
    last page)."""
    rows, nxt = core.store.page(query)
    now = time.time()
    stale = following.refreshed(core, [r for r in rows if now - r.updated_at >= fresh_s])
    by_id = {r.id: r for r in stale}
    return [JobRecord.from_row(shown(core, by_id.get(r.id, r))) for r in rows], nxt


def job_detail(core: Core, job_id: str) -> JobDetail:
    """One job (an id or a unique prefix) with its history; what is known, and why it may
    be stale, when its backend does not answer."""
    rec, warning = core.store.get(job_id), None
    try:
        rec = following.refresh(core, rec)
    except BackendError as e:  # show what is known, and why it may be stale
        warning = f"last known state: {e.message}" + (f"\n  -> {e.hint}" if e.hint else "")
    redact = following.redactor(core, rec)
    history = [{**h, "message": redact(h["message"]) if h["message"] else h["message"]}
               for h in core.store.history(rec.id)]
    return JobDetail.from_history(shown(core, rec), history, warning)


def poll(core: Core, job_id: str) -> tuple[JobRow, str]:
    """The job's record, checked with its backend, and its whole log so far."""
    rec, text = following.refresh_with_log(core, core.store.get(job_id))
    if text is not None:  # read by the refresh itself, the same moment
        return rec, text
    try:
        text = following.logs(core, rec)
    except Exception:  # a log read that fails mid-run is retried on the next poll
        text = ""
    return rec, text


def cancel_job(core: Core, job_id: str) -> CancelledJob:
    """Stop a job (an id or a unique prefix); one that had ended already says so."""
    rec = core.store.get(job_id)
    if rec.status in TERMINAL:
        return CancelledJob.from_row(rec, already_ended=True)
    return CancelledJob.from_row(following.cancel(core, rec.id))


def summary(core: Core, limit: int = 50) -> dict:
    """Jobs with state, target, cost and verdict; the queue (each job's place overall and
    in its target's line, and what the scheduler last said it waits for); the month's
    spend against monthly_budget; the schedules. Money in settings.currency."""
    from orchestrator.decision import job_ledger as ledger

    settings, store = core.settings, core.store
    rate, now = settings.currency_rate, time.time()
    jobs = []
    for rec in following.list_jobs(core, limit):  # each checked with its backend, as `orch status` does
        pub = JobRecord.from_row(shown(core, rec))
        entry = ledger.current(rec, now)
        verdict = pub.metrics.verdict
        jobs.append({"id": pub.id, "name": pub.name, "status": pub.status,
                     "target": pub.target, "kind": pub.kind, "owner": pub.owner,
                     "created_at": pub.created_at, "message": pub.message,
                     "cost": entry.cost_usd * rate, "verdict": verdict.kind if verdict else None,
                     "advice": verdict.advice if verdict else []})
    queue: list[dict] = []
    line: dict[Optional[str], int] = {}
    for i, r in enumerate(store.queued()):  # each target starts its own line in order
        line[r.target] = line.get(r.target, 0) + 1
        queue.append({"position": i + 1, "id": r.id, "name": r.name, "owner": r.owner,
                      "priority": r.priority or 0, "created_at": iso(r.created_at),
                      "target": r.target, "in_line": line[r.target],
                      "waiting_for": r.message})
    basis = settings.budget_basis  # the month counted as the monthly budget counts it
    spent = spending.spent_this_month(store, now, basis) * rate
    return {"now": iso(now), "currency": settings.currency, "jobs": jobs, "queue": queue,
            "month": {"month": time.strftime("%Y-%m", time.gmtime(now)), "spent": spent,
                      "budget": settings.monthly_budget, "basis": basis},
            "schedules": [Schedule.from_row(s).to_json() for s in store.schedules()]}
