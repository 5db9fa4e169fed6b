"""What the status page shows beyond the CLI's records, each read from the store and the
backends as `orch status` reads them: a job's per-epoch series and its cost so far, the owned
fleet with what runs and waits on it, and what runs rented. Money in settings.currency; the
month's spend is service/spending.py."""

from __future__ import annotations

import time
from typing import Callable, Optional

from jobs import events
from orchestrator.base.errors import BackendError, OrchError
from orchestrator.base.targets import ONPREM, OWNED, rented
from orchestrator.decision import job_ledger as ledger
from orchestrator.records import JobRow
from orchestrator.records.page import (
    CostSoFar,
    Fleet,
    FleetJob,
    FleetNode,
    JobProgress,
    OwnedTarget,
    Point,
    QueuedJob,
)
from orchestrator.service import following, views
from orchestrator.service.core import Core
from orchestrator.store import iso

# A report's metrics that are numbers but no curve (the run's settings, counts).
_NOT_SERIES = frozenset({"epochs", "workers", "loader_workers", "index"})


def series(text: str, clean: Optional[Callable[[str], str]] = None) -> list[Point]:
    """Each `report` event of a log, in order: its index, its time and its numeric metrics
    (loss, accuracy, samples_per_sec, ...: what the job's code reported). `clean`: the job's
    redaction, for the metrics' names (decoded from the line: a JSON escape is no longer
    what the log's redaction saw)."""
    points: list[Point] = []
    for ev in events.parse(text or ""):
        if ev["event"] != "report" or not isinstance(ev.get("metrics"), dict):
            continue
        numbers = {(clean(k) if clean else k): v for k, v in ev["metrics"].items()
                   if k not in _NOT_SERIES and isinstance(v, (int, float))
                   and not isinstance(v, bool)}
        t = ev.get("t")
        points.append(Point(index=ev.get("index") or len(points) + 1, metrics=numbers,
                            t=t if isinstance(t, (int, float)) else None))
    return points


def job_progress(core: Core, job_id: str) -> JobProgress:
    """A job's per-epoch series from its log, its state and its cost so far against the
    estimate it was placed with."""
    rec, text = views.poll(core, core.store.get(job_id).id)
    rate, now = core.settings.currency_rate, time.time()
    entry = ledger.current(rec, now)
    estimate = rec.decision.estimate if rec.decision else None
    return JobProgress(
        id=rec.id, status=rec.status, currency=core.settings.currency,
        points=series(text, following.redactor(core, rec)),
        cost=CostSoFar(so_far=entry.cost_usd * rate, cash_so_far=(entry.cash_usd or 0.0) * rate,
                       hours=entry.hours, power_basis=entry.power_basis,
                       estimate=None if estimate is None or estimate.cost_usd is None else estimate.cost_usd * rate,
                       estimate_hours=None if estimate is None else estimate.hours))


def worker_nodes(text: str) -> list[str]:
    """The Ray node ids a train job's workers run on (its `worker` events), in rank order."""
    found: dict[int, str] = {}
    for ev in events.parse(text or ""):
        if ev["event"] == "worker" and isinstance(ev.get("node_id"), str):
            found.setdefault(int(ev.get("rank") or 0), ev["node_id"])
    return list(dict.fromkeys(found[r] for r in sorted(found)))


def _on_nodes(core: Core, rec: JobRow) -> list[str]:
    """The nodes of a running job's workers; [] where its log cannot be read now."""
    try:
        return worker_nodes(following.logs(core, rec))
    except OrchError:
        return []


def _job(rec: JobRow, rate: float, now: float, nodes: Optional[list[str]] = None) -> FleetJob:
    entry = ledger.current(rec, now)
    choice = rec.choice
    return FleetJob(id=rec.id, name=rec.name, status=rec.status, owner=rec.owner, target=rec.target,
                    started_at=iso(rec.started_at), created_at=iso(rec.created_at), hours=entry.hours,
                    cost=entry.cost_usd * rate, cash=(entry.cash_usd or 0.0) * rate,
                    gpu=choice.gpu if choice else None, gpus=choice.count if choice else 0,
                    where=choice.where() if choice else rec.info.infra, infra=rec.info.infra,
                    spot=bool(choice and choice.spot), nodes=nodes or [],
                    price_per_hour=None if not choice or choice.price_per_hour_usd is None
                    else choice.price_per_hour_usd * rate)


def _target(core: Core, target: str, running: list[JobRow], rate: float, now: float) -> OwnedTarget:
    problem: Optional[str] = None
    total: dict = {}
    used: dict = {}
    try:
        if target == ONPREM and not core.settings.ray_address:
            raise OrchError("no on-prem cluster is set up here (ray_address, ORCH_RAY_ADDRESS)")
        snap = core.capacity(target)
    except BackendError as e:
        snap, problem = None, f"cannot read its capacity: {e.message}"
    except OrchError as e:
        snap, problem = None, e.message
    here = [r for r in running if r.target == target]
    placed = {r.id: _on_nodes(core, r) if snap and snap.nodes and r.status == "RUNNING" else [] for r in here}
    nodes: list[FleetNode] = []
    if snap is not None:
        total, used = snap.total, snap.used
        nodes = [FleetNode(node_id=n.node_id, ip=n.ip, alive=n.alive, head=n.is_head, cpus=n.cpus, gpus=n.gpus,
                           gpu_model=n.gpu_model, jobs=[job_id for job_id, on in placed.items() if n.node_id in on])
                 for n in snap.nodes]
    ips = {n.node_id: n.ip for n in nodes}
    queued = [QueuedJob(id=r.id, name=r.name, owner=r.owner, priority=r.priority, created_at=iso(r.created_at),
                     waiting_for=r.message) for r in core.store.queued() if r.target == target]
    return OwnedTarget(target=target, problem=problem, nodes=nodes, cpus=total.get("CPU"), gpus=total.get("GPU"),
                       cpus_used=used.get("CPU"), gpus_used=used.get("GPU"), queued=queued,
                       running=[_job(r, rate, now, [ips[x] if x in ips else x for x in placed[r.id]]) for r in here])


def fleet(core: Core) -> Fleet:
    """Each owned target (this workstation's Ray, the on-prem cluster): its nodes and
    GPUs with the train jobs whose workers run on each (from their `worker` events), the
    jobs on it, the queue for it; and each rented job running, with its cloud, price and
    time and cost so far."""
    rate, now = core.settings.currency_rate, time.time()
    live = [r for r in core.store.list(limit=100_000, statuses=("PENDING", "RUNNING"))
            if r.backend_id or r.status == "RUNNING"]
    return Fleet(now=iso(now), currency=core.settings.currency,
                 owned=[_target(core, t, live, rate, now) for t in sorted(OWNED)],
                 rented=[_job(r, rate, now) for r in live if rented(r.target)])
