"""The status page (its files) and the summary it used to read, and liveness."""

from __future__ import annotations

import time

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from orchestrator.base.errors import NotFound
from orchestrator.records import iso
from orchestrator.records.caller import Caller
from orchestrator.records.page import Replica
from orchestrator.server.routes.deps import Server, caller, server

router = APIRouter()


@router.get("/v1/summary")
def summary(who: Caller = Depends(caller), srv: Server = Depends(server)):
    """What the status page shows: jobs, the queue, the month's spend, the schedules."""
    with srv.service() as orch:
        return orch.summary()


@router.get("/v1/replicas", response_model=list[Replica])
def replicas(who: Caller = Depends(caller), srv: Server = Depends(server)):
    """The store's live replicas of `orch serve` (each looked within 20 s), the lease holder
    first: one, on a SQLite store. Their host names, pids and internal URLs for an admin
    only; a user sees each as `replica N`, its role and times."""
    with srv.service() as orch:
        rows = orch.replicas()
    return [Replica(id=r.id if who.admin else f"replica {i}",
                    url=r.url if who.admin else None, role=r.role,
                    started_at=str(iso(r.started_at)), seen_at=str(iso(r.seen_at)),
                    this=r.id == srv.scheduler.me) for i, r in enumerate(rows, 1)]


@router.get("/healthz")
async def healthz(request: Request):  # no thread: it answers while every worker thread is busy
    """Liveness, without a token, and this replica's part: `leading` while it holds the
    store's lease and runs the scheduler's duties, `standby` while another does (both
    answer the whole API)."""
    scheduler = getattr(request.app.state, "scheduler", None)
    return {"ok": True, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "scheduler": "leading" if scheduler is None or scheduler.leading else "standby"}


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def page():
    return _asset("index.html")


@router.get("/static/{name}", include_in_schema=False)
def static(name: str):
    """The page's stylesheet and scripts (server/static/), without a token: they hold no data."""
    return _asset(name)


def _asset(name: str) -> Response:
    from orchestrator.server.page import HEADERS, asset

    found = asset(name)
    if found is None:
        raise NotFound(f"no file {name!r} here", "the status page is at /")
    body, media = found
    return Response(body, media_type=media, headers=HEADERS)
