"""What the status page reads beyond the CLI's endpoints, all read-only: a job's per-epoch
series and cost so far, the fleet, the month's spend (service/dashboard.py,
service/spending.py) and the schedules' next slots."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query

from orchestrator.records.caller import Caller
from orchestrator.records.page import Fleet, JobCounts, JobProgress, SpendingPage
from orchestrator.server.routes.deps import Server, caller, server

router = APIRouter()


@router.get("/v1/jobs/{job_id}/progress", response_model=JobProgress)
def progress(job_id: str, who: Caller = Depends(caller), srv: Server = Depends(server)):
    """A job's report events from its log (one point each: index, time, numeric metrics),
    its state, and its cost so far against the estimate it was placed with."""
    with srv.service() as orch:
        return orch.job_progress(job_id)


@router.get("/v1/fleet", response_model=Fleet)
def fleet(who: Caller = Depends(caller), srv: Server = Depends(server)):
    """Each owned target's nodes and GPUs with the jobs on it and the queue for it; the
    rented jobs running, with cloud, price and time so far."""
    with srv.service() as orch:
        return orch.fleet()


@router.get("/v1/spend", response_model=SpendingPage)
def spend(who: Caller = Depends(caller), srv: Server = Depends(server)):
    """This month's spend per day (cash: owned power, cloud), by target and by owner, the
    biggest jobs, against monthly_budget."""
    with srv.service() as orch:
        return orch.spending_page(srv.scheduler.clock())


@router.get("/v1/schedule-slots")
def schedule_slots(count: int = Query(3, ge=1, le=20), who: Caller = Depends(caller),
                   srv: Server = Depends(server)):
    """Each schedule's next `count` runs (UTC), by schedule id; none while it is paused."""
    with srv.service() as orch:
        return orch.upcoming_schedules(count)


@router.get("/v1/job-counts", response_model=JobCounts)
def job_counts(hours: float = Query(24, gt=0, le=24 * 366), who: Caller = Depends(caller),
               srv: Server = Depends(server)):
    """How many jobs are in each state, and how many ended in each in the last `hours`."""
    with srv.service() as orch:
        now = srv.scheduler.clock()
        return JobCounts.model_validate({"hours": hours, "states": orch.state_counts(now - hours * 3600)})
