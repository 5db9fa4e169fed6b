"""`orch serve`'s REST API (FastAPI): the CLI's operations over HTTP, behind bearer tokens.

The routes are in `routes/` (jobs, schedules, uploads, the status page's, Prometheus's
/metrics), each calling
the service in a session of its own (`Scheduler.session`: a SQLite connection belongs to
one thread). Here: the app, its lifespan (the scheduler's thread), the guard before any
body is read, and the errors: {"error": message, "hint": hint}, 400 for bad input (exit 2
in the CLI), 401 without a valid token, 403 for another user's job, 404 for an unknown one,
429 past a user's share of git work (server/git_gate.py), 502 when a backend fails.
"""

from __future__ import annotations

import functools
from contextlib import asynccontextmanager
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from orchestrator.base.errors import BackendError, Forbidden, InputError, NotFound, OrchError, StoreError
from orchestrator.server import guard
from orchestrator.server.auth import Unauthorized
from orchestrator.server.git_gate import Busy, GitGate
from orchestrator.server.intake import MAX_SPEC
from orchestrator.server.routes import jobs, metrics, page_data, schedules, status, uploads
from orchestrator.server.routes.deps import Server, identify
from orchestrator.server.scheduler import Scheduler
from orchestrator.service.upload import TooLarge

_STATUS = ((Unauthorized, 401), (Forbidden, 403), (NotFound, 404), (TooLarge, 413), (Busy, 429), (InputError, 400),
           (BackendError, 502), (StoreError, 503))


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
    app.state.server = Server(settings, scheduler, GitGate(settings))
    _errors(app)
    # A body is refused before it is read: no token, a wrong one, one past its size.
    guard.install(app, settings, functools.partial(identify, settings), json_max=2 * MAX_SPEC)
    for topic in (jobs, page_data, schedules, uploads, status, metrics):
        app.include_router(topic.router)
    return app


def _errors(app: FastAPI) -> None:
    """Every error in one shape, {"error", "hint"}, with its HTTP status."""

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
