"""The schedule routes: list, show, pause, resume and delete (the service's schedule rules;
changing one takes its owner's token or an admin's)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from orchestrator.records.caller import Caller
from orchestrator.server.routes.deps import Server, caller, server

router = APIRouter()


@router.get("/v1/schedules")
def schedules(who: Caller = Depends(caller), srv: Server = Depends(server)):
    """Every cron schedule with its recent log."""
    with srv.service() as orch:
        return orch.schedules()


@router.get("/v1/schedules/{sched_id}")
def schedule(sched_id: str, who: Caller = Depends(caller), srv: Server = Depends(server)):
    """One schedule (an id or a unique prefix) with its recent log."""
    with srv.service() as orch:
        return orch.schedule(sched_id)


@router.post("/v1/schedules/{sched_id}/pause")
def pause(sched_id: str, who: Caller = Depends(caller), srv: Server = Depends(server)):
    """Stop a schedule's runs (its owner's token or an admin's)."""
    return _pause(srv, sched_id, who, True)


@router.post("/v1/schedules/{sched_id}/resume")
def resume(sched_id: str, who: Caller = Depends(caller), srv: Server = Depends(server)):
    """Run a paused schedule again from its next slot; slots missed while paused never run."""
    return _pause(srv, sched_id, who, False)


def _pause(srv: Server, sched_id: str, who: Caller, paused: bool) -> dict:
    with srv.service() as orch:
        return orch.pause_schedule(sched_id, paused, who, srv.scheduler.clock())


@router.delete("/v1/schedules/{sched_id}")
def remove_schedule(sched_id: str, who: Caller = Depends(caller), srv: Server = Depends(server)):
    """Delete a schedule and its log (its owner's token or an admin's); the jobs it ran
    are kept. Answers what it was."""
    with srv.service() as orch:
        return orch.remove_schedule(sched_id, who)
