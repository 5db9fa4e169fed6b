"""The job routes: submit (or register a schedule), plan, list, show, follow the log,
cancel, and what jobs cost."""

from __future__ import annotations

import asyncio
from typing import Optional, Union

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse, StreamingResponse

from orchestrator.base.errors import Forbidden, InputError, StoreError
from orchestrator.records import CancelledJob, JobDetail, JobRecord, SubmittedJob
from orchestrator.records.caller import Caller, may_change
from orchestrator.server import intake
from orchestrator.server.intake import JobIn, PlanIn, Registered
from orchestrator.server.routes.deps import Server, caller, server, still_valid
from orchestrator.store import SORTS, STATUSES, TERMINAL, JobQuery

router = APIRouter()

# A followed log waits this long for a store that stopped answering (a database restart)
# before it ends, saying so.
STORE_AWAY_S = 60.0


@router.post("/v1/jobs", status_code=201, response_model=Union[SubmittedJob, Registered])
async def submit(body: JobIn, who: Caller = Depends(caller), srv: Server = Depends(server)):
    """Record a job and queue it (the scheduler launches it in priority order); a job
    file with `schedule.cron` registers a schedule instead: {"schedule": {...}}."""
    text, spec = await run_in_threadpool(intake.job_file, srv.settings, body, who)
    # Pinned here, on the gate's threads, so that the plan entry runs no git; a schedule's
    # runs read the commit its ref names at each slot again (they read the file's text).
    await srv.git_gate.pin(spec, who.name)
    return await run_in_threadpool(intake.queue_job, srv.scheduler, body, who, text, spec)


@router.post("/v1/plan")
async def plan(body: PlanIn, who: Caller = Depends(caller), srv: Server = Depends(server)):
    """Where the job would run and why: the `orch plan --json` shape."""
    _, spec = await run_in_threadpool(intake.job_file, srv.settings, body, who)
    await srv.git_gate.pin(spec, who.name)

    def place():
        with srv.service() as orch:
            return orch.plan(spec, owner=who.name).shown()

    return await run_in_threadpool(place)


@router.get("/v1/jobs", response_model=list[JobRecord])
def jobs(response: Response, limit: int = Query(50, ge=1, le=1000),
         status: Optional[str] = Query(None, max_length=16), owner: Optional[str] = Query(None, max_length=64),
         kind: Optional[str] = Query(None, max_length=32), target: Optional[str] = Query(None, max_length=32),
         q: Optional[str] = Query(None, max_length=200, description="a part of the name"),
         sort: str = Query("created", description=f"one of {', '.join(SORTS)}"),
         cursor: Optional[str] = Query(None, max_length=2000,
                                       description="the X-Next-Cursor of the page before"),
         who: Caller = Depends(caller), srv: Server = Depends(server)):
    """A page of jobs, newest first unless `sort` says otherwise, each checked with its
    backend unless the scheduler did within its period: the `orch status --json` shape. Filters are exact (`q`: a part of the name);
    the next page's cursor is the X-Next-Cursor header, absent on the last page."""
    if status is not None and status not in STATUSES:
        raise InputError(f"status {status!r}: not a job state", f"use one of: {', '.join(STATUSES)}")
    query = JobQuery(limit=limit, status=status, owner=owner, kind=kind, target=target,
                     search=q or None, sort=sort, cursor=cursor or None)
    with srv.service() as orch:
        page, nxt = orch.job_page(query, fresh_s=srv.scheduler.period_s)
    if nxt:
        response.headers["X-Next-Cursor"] = nxt
    return page


@router.get("/v1/jobs/{job_id}", response_model=JobDetail)
def job(job_id: str, who: Caller = Depends(caller), srv: Server = Depends(server)):
    """One job (an id or a unique prefix) with its history."""
    with srv.service() as orch:
        return orch.job_detail(job_id)


@router.get("/v1/jobs/{job_id}/logs", response_class=PlainTextResponse)
async def logs(request: Request, job_id: str, follow: bool = False,
               who: Caller = Depends(caller), srv: Server = Depends(server)):
    """The job's log (secrets redacted); with follow=true, streamed until the job ends
    or the token is revoked."""

    def poll(full_id: Optional[str] = None):
        if full_id is None:
            with srv.service() as orch:
                return orch.get(job_id).id  # NotFound: a 404 before streaming
        return srv.log_share.read(full_id, lambda: _poll(srv, full_id))

    if not follow:
        def read():
            with srv.service() as orch:
                return orch.logs(orch.refresh(orch.get(job_id)))
        return PlainTextResponse(await run_in_threadpool(read))
    full_id = await run_in_threadpool(poll)

    async def lines():
        printed, away = 0, 0.0
        while True:
            try:
                if not await run_in_threadpool(still_valid, request):
                    yield "orch: this stream ended: its token was revoked\n"
                    return
                status, text = await run_in_threadpool(poll, full_id)
            except StoreError as e:  # the database restarting: the stream waits it out
                away += 1.0
                if away > STORE_AWAY_S:
                    yield f"orch: this stream ended: {e.message}; `orch logs -f` again\n"
                    return
                await asyncio.sleep(1.0)
                continue
            away = 0.0
            new = text.splitlines()
            if new[printed:]:
                yield "".join(line + "\n" for line in new[printed:])
            printed = max(printed, len(new))
            if status in TERMINAL:
                return
            await asyncio.sleep(1.0)

    return StreamingResponse(lines(), media_type="text/plain; charset=utf-8")


def _poll(srv: Server, job_id: str):
    """A followed job's status and log, read once for all its followers (`LogShare`)."""
    with srv.service() as orch:
        rec, text = orch.poll(job_id)
        return rec.status, text


@router.post("/v1/jobs/{job_id}/cancel", response_model=CancelledJob)
def cancel(job_id: str, who: Caller = Depends(caller), srv: Server = Depends(server)):
    """Stop a job: its submitter's token or an admin's."""
    with srv.service() as orch:
        rec = orch.get(job_id)
        if not may_change(who, rec.owner):
            raise Forbidden(f"{rec.id} belongs to {rec.owner or 'the server (submitted without it)'}: "
                            f"{who.name} may not cancel it",
                            "only its submitter or an admin token (`orch token create NAME "
                            "--admin`) can")
        out = orch.cancel_job(rec.id)
    srv.scheduler.forget(rec.id)
    return out


@router.get("/v1/cost")
def cost(by: str = "target", since: Optional[str] = Query(None, max_length=64),
         who: Caller = Depends(caller), srv: Server = Depends(server)):
    """What jobs really cost: the `orch cost --json` shape."""
    with srv.service() as orch:
        return orch.cost_report(by, since)
