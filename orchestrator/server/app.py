"""`orch serve`'s REST API (FastAPI): the CLI's operations over HTTP, behind bearer tokens.

Each request opens its own embedded client (`orchestrator.client.Local`) in the thread
that serves it, since a SQLite connection belongs to one thread. Errors are
{"error": message, "hint": hint}: 400 for bad input (exit 2 in the CLI), 401 without a
valid token, 403 for another user's job, 404 for an unknown one, 429 past a user's share
of git work (server/git_gate.py), 502 when a backend fails.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import Any, Optional, Union

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.exceptions import HTTPException

from orchestrator.base.errors import BackendError, InputError, NotFound, OrchError, StoreError
from orchestrator.records import CancelledJob, JobDetail, JobRecord, SubmittedJob
from orchestrator.server import auth, guard, intake
from orchestrator.server.auth import Forbidden, Unauthorized
from orchestrator.server.git_gate import Busy, GitGate
from orchestrator.server.intake import MAX_SPEC, JobIn, PlanIn, Registered
from orchestrator.server.scheduler import Scheduler
from orchestrator.service.upload import DIGEST_PATTERN, MiB, TooLarge
from orchestrator.store import TERMINAL, public_schedule

_STATUS = ((Unauthorized, 401), (Forbidden, 403), (NotFound, 404), (TooLarge, 413), (Busy, 429), (InputError, 400),
           (BackendError, 502), (StoreError, 503))


_UPLOAD_BODY = {"requestBody": {"required": True, "description": "a tar.gz of the workdir",
                                "content": {"application/octet-stream": {"schema": {
                                    "type": "string", "format": "binary"}}}}}


def create_app(settings, scheduler: Optional[Scheduler] = None, run_scheduler: bool = True) -> FastAPI:
    scheduler = scheduler or Scheduler(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if run_scheduler:
            scheduler.start()
        try:
            yield
        finally:
            if run_scheduler:
                await run_in_threadpool(scheduler.stop)

    # No /docs or /redoc: FastAPI's pages load their scripts from a CDN; the schema is enough.
    app = FastAPI(title="orch", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="orch's scheduler and job API. Every /v1 endpoint needs "
                              "`Authorization: Bearer <token>` (`orch token create NAME`).")
    app.state.scheduler = scheduler

    @app.exception_handler(OrchError)
    async def _orch_error(request: Request, e: OrchError):
        status = next((code for cls, code in _STATUS if isinstance(e, cls)), 500)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return JSONResponse({"error": e.message, "hint": e.hint}, status_code=status,
                            headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, e: RequestValidationError):
        err: dict[str, Any] = e.errors()[0] if e.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "request"
        msg = err.get("msg")
        if err.get("type") == "json_invalid":  # its loc is a character offset, not a field
            where, msg = "body", f"not valid JSON ({(err.get('ctx') or {}).get('error', msg)})"
        return JSONResponse({"error": f"{where}: {msg}",
                             "hint": "GET /openapi.json describes every request"},
                            status_code=400)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, e: HTTPException):
        # Starlette's own refusals (a body that is not JSON, an unknown path, a wrong
        # method) in the same {"error", "hint"} shape as every other error.
        return JSONResponse({"error": f"{request.method} {request.url.path}: {e.detail}",
                             "hint": "GET /openapi.json describes every request"},
                            status_code=e.status_code, headers=getattr(e, "headers", None))

    def identify(token: Optional[str]) -> auth.Caller:
        """Who holds `token` (blocking: the store); Unauthorized for none or an unknown one."""
        if token is None:
            raise Unauthorized("this request needs a token: Authorization: Bearer <token>",
                               "`orch token create NAME` on the server makes one")
        from orchestrator.store import open_store

        store = open_store(settings)
        try:
            found = store.token_by_hash(auth.hash_token(token))
        finally:
            store.close()
        if found is None:
            raise Unauthorized("unknown or revoked token", "`orch token list` on the server "
                               "shows the tokens; `orch token create NAME` makes a new one")
        return auth.Caller(found["name"], found["admin"])

    def caller(request: Request) -> auth.Caller:
        found = getattr(request.state, guard.STATE_KEY, None)  # looked up before the body
        if isinstance(found, auth.Caller):
            return found
        return identify(auth.bearer(request.headers.get("authorization")))

    guard.install(app, settings, identify, json_max=2 * MAX_SPEC)  # a body: before it is read

    git_gate = GitGate(settings)  # a client's git work, off the request threads

    # -- jobs --------------------------------------------------------------------------

    @app.post("/v1/jobs", status_code=201, response_model=Union[SubmittedJob, Registered])
    async def submit(body: JobIn, who: auth.Caller = Depends(caller)):
        """Record a job and queue it (the scheduler launches it in priority order); a job
        file with `schedule.cron` registers a schedule instead: {"schedule": {...}}."""
        text, spec = await run_in_threadpool(intake.job_file, settings, body, who)
        if spec.schedule.cron:  # each of its runs reads the commit its ref names then
            git_gate.check(spec)
        else:
            await git_gate.pin(spec, who.name)
        return await run_in_threadpool(intake.queue_job, scheduler, body, who, text, spec)

    @app.post("/v1/plan")
    async def plan(body: PlanIn, who: auth.Caller = Depends(caller)):
        """Where the job would run and why: the `orch plan --json` shape."""
        _, spec = await run_in_threadpool(intake.job_file, settings, body, who)
        await git_gate.pin(spec, who.name)

        def place():
            with scheduler.session() as local:
                return local.plan_spec(spec, owner=who.name)

        return await run_in_threadpool(place)

    @app.get("/v1/jobs", response_model=list[JobRecord])
    def jobs(limit: int = Query(50, ge=1, le=1000), who: auth.Caller = Depends(caller)):
        """The newest jobs, each checked with its backend: the `orch status --json` shape."""
        with scheduler.session() as local:
            return local.jobs(limit)

    @app.get("/v1/jobs/{job_id}", response_model=JobDetail)
    def job(job_id: str, who: auth.Caller = Depends(caller)):
        """One job (an id or a unique prefix) with its history."""
        with scheduler.session() as local:
            return local.job(job_id)

    def still_valid(request: Request) -> bool:
        """Whether the request's token is still known (not revoked since the request began):
        looked up afresh, never from what the request found at its start."""
        try:
            identify(auth.bearer(request.headers.get("authorization")))
        except Unauthorized:
            return False
        return True

    @app.get("/v1/jobs/{job_id}/logs", response_class=PlainTextResponse)
    async def logs(request: Request, job_id: str, follow: bool = False,
                   who: auth.Caller = Depends(caller)):
        """The job's log (secrets redacted); with follow=true, streamed until the job ends
        or the token is revoked."""

        def poll(full_id: Optional[str] = None):
            with scheduler.session() as local:
                if full_id is None:
                    return local.orch.get(job_id).id  # NotFound: a 404 before streaming
                rec, text = local.poll(full_id)
                return rec.status, text

        if not follow:
            def read():
                with scheduler.session() as local:
                    return local.logs(job_id)
            return PlainTextResponse(await run_in_threadpool(read))
        full_id = await run_in_threadpool(poll)

        async def lines():
            printed = 0
            while True:
                if not await run_in_threadpool(still_valid, request):
                    yield "orch: this stream ended: its token was revoked\n"
                    return
                status, text = await run_in_threadpool(poll, full_id)
                new = text.splitlines()
                if new[printed:]:
                    yield "".join(line + "\n" for line in new[printed:])
                printed = max(printed, len(new))
                if status in TERMINAL:
                    return
                await asyncio.sleep(1.0)

        return StreamingResponse(lines(), media_type="text/plain; charset=utf-8")

    @app.post("/v1/jobs/{job_id}/cancel", response_model=CancelledJob)
    def cancel(job_id: str, who: auth.Caller = Depends(caller)):
        """Stop a job: its submitter's token or an admin's."""
        with scheduler.session() as local:
            rec = local.orch.get(job_id)
            if not auth.may_cancel(who, rec.owner):
                raise Forbidden(f"{rec.id} belongs to {rec.owner or 'the server (submitted without it)'}: "
                                f"{who.name} may not cancel it",
                                "only its submitter or an admin token (`orch token create NAME "
                                "--admin`) can")
            out = local.cancel(rec.id)
        scheduler.forget(rec.id)
        return out

    # -- money, schedules, the status page's data -------------------------------------

    @app.get("/v1/cost")
    def cost(by: str = "target", since: Optional[str] = Query(None, max_length=64),
             who: auth.Caller = Depends(caller)):
        """What jobs really cost: the `orch cost --json` shape."""
        with scheduler.session() as local:
            return local.cost(by, since)

    @app.get("/v1/schedules")
    def schedules(who: auth.Caller = Depends(caller)):
        """Every cron schedule with its recent log."""
        with scheduler.session() as local:
            store = local.orch.store
            return [public_schedule(s, store.schedule_events(s["id"])) for s in store.schedules()]

    @app.get("/v1/schedules/{sched_id}")
    def schedule(sched_id: str, who: auth.Caller = Depends(caller)):
        """One schedule (an id or a unique prefix) with its recent log."""
        with scheduler.session() as local:
            store = local.orch.store
            s = store.schedule(sched_id)
            return public_schedule(s, store.schedule_events(s["id"]))

    @app.post("/v1/schedules/{sched_id}/pause")
    def pause(sched_id: str, who: auth.Caller = Depends(caller)):
        """Stop a schedule's runs (its owner's token or an admin's)."""
        return _pause(sched_id, who, True)

    @app.post("/v1/schedules/{sched_id}/resume")
    def resume(sched_id: str, who: auth.Caller = Depends(caller)):
        """Run a paused schedule again from its next slot; slots missed while paused never run."""
        return _pause(sched_id, who, False)

    def _pause(sched_id: str, who: auth.Caller, paused: bool) -> dict:
        from orchestrator.server.schedules import set_paused

        with scheduler.session() as local:
            return set_paused(local.orch.store, sched_id, paused, who, scheduler.clock())

    @app.delete("/v1/schedules/{sched_id}")
    def remove_schedule(sched_id: str, who: auth.Caller = Depends(caller)):
        """Delete a schedule and its log (its owner's token or an admin's); the jobs it ran
        are kept. Answers what it was."""
        from orchestrator.server.schedules import remove

        with scheduler.session() as local:
            return remove(local.orch.store, sched_id, who)

    # -- workdirs sent by clients ------------------------------------------------------

    @app.post("/v1/uploads", status_code=201, openapi_extra=_UPLOAD_BODY)
    async def upload(request: Request, who: auth.Caller = Depends(caller)):
        """A job's workdir as a tar.gz (at most upload_max_mb): unpacked, safely, into this
        server's HOME/uploads/<sha256 of the body>, the id a job then names as `upload`.
        The same bytes again are not unpacked again ("existing": true)."""
        from starlette.requests import ClientDisconnect

        from orchestrator.service.upload import Receiver

        limit = settings.upload_max_mb * MiB
        if limit == 0:
            raise InputError("this server takes no uploads (upload_max_mb is 0)",
                             "give the job a workdir the server sees (a shared filesystem)")
        receiver = await run_in_threadpool(Receiver, settings.home, limit, who.name,
                                           settings.upload_quota_mb * MiB, settings.upload_keep_hours)
        try:
            length = request.headers.get("content-length", "")
            if length.isdigit() and int(length) > limit:
                raise receiver.refuse(int(length))
            try:
                async for chunk in request.stream():
                    receiver.write(chunk)
            except ClientDisconnect:
                raise InputError("the upload was cut off before its end", "send it again") from None
            return await run_in_threadpool(receiver.finish)
        finally:
            receiver.close()

    @app.get("/v1/uploads/{digest}")
    def uploaded(digest: str = Path(..., pattern=DIGEST_PATTERN), who: auth.Caller = Depends(caller)):
        """Whether the caller sent this server the upload `digest` (need not send it again)."""
        from orchestrator.service.upload import has

        if not has(settings.home, digest, who.name, who.admin):
            raise NotFound(f"upload {digest[:16]}... is not on this server", "send it: POST /v1/uploads")
        return {"upload": digest, "existing": True}

    @app.get("/v1/summary")
    def summary(who: auth.Caller = Depends(caller)):
        """What the status page shows: jobs, the queue, the month's spend, the schedules."""
        from orchestrator.server.schedules import summary as build

        with scheduler.session() as local:
            return build(local, settings)

    @app.get("/healthz")
    async def healthz():  # no thread: it answers while every worker thread is busy
        """Liveness, without a token."""
        return {"ok": True, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page():
        from orchestrator.server.page import headers, html

        return HTMLResponse(html(), headers=headers())

    return app
