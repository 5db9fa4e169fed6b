"""The I/O around one placement decision: gather offers and history, classify, decide.

No Ray and no SkyPilot API server: cloud prices come from catalog files on disk, the
on-prem offer from the settings, the local one from nvidia-smi and the CPU count.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Optional, Sequence

from orchestrator.decision.classify import classify
from orchestrator.decision.cost import HoursEstimator, onprem_offer
from orchestrator.decision.models import Capacity, Decision, Offer, PastRun
from orchestrator.decision.placement import decide


def gather_offers(spec, settings, local: Optional[Sequence[Offer]] = None) -> list[Offer]:
    """Every offer worth pricing. Catalogs are read only when the job may go to a cloud,
    so a local-only plan never needs them."""
    from providers.local_offer import local_offers

    offers: list[Offer] = []
    if settings.effective_mode != "local" and settings.clouds and "cloud" in spec.placement.allow:
        from providers.catalog import cloud_offers

        offers.extend(cloud_offers(settings.clouds, settings.catalog_dir))
    offers.extend(onprem_offer(inv, settings.electricity_price) for inv in settings.onprem)
    offers.extend(local_offers(settings) if local is None else local)
    return offers


def plan_job(spec, settings, *, fingerprint: str, history: Sequence[PastRun] = (),
             code_dirty: bool = False, capacity: Optional[Capacity] = None,
             offers: Optional[Sequence[Offer]] = None, now: Optional[float] = None,
             spent_this_month: Optional[float] = None) -> Decision:
    """Classify the job and decide where it runs; `offers=None` gathers them, and
    `spent_this_month=None` reads the month's spend from the store when a monthly budget is set."""
    history = [h if isinstance(h, PastRun) else PastRun.from_record(h) for h in history]
    est = HoursEstimator(spec, fingerprint, history, settings.default_job_hours, settings.gpu_speeds)
    kind = classify(spec, fingerprint, history, time.time() if now is None else now, settings,
                    code_dirty, est.reference.hours)
    if offers is None:
        offers = gather_offers(spec, settings)
    if capacity is None and wants_cluster(spec, settings):
        capacity = cluster_capacity(spec, settings, time.time() if now is None else now)
    if spent_this_month is None:
        spent_this_month = month_spend(settings, time.time() if now is None else now)
    return decide(spec, kind, offers, capacity, settings, estimator=est,
                  spent_this_month=spent_this_month)


def wants_cluster(spec, settings) -> bool:
    return bool(settings.ray_address and settings.effective_mode != "local"
                and "onprem" in spec.placement.allow)


def cluster_capacity(spec, settings, now: float) -> Capacity:
    """Whether the on-prem cluster can start this job now, else about when; never raises.
    `load` lets placement ask again for each offer, with what the job would hold there
    (decision.demand); the answer here is for the job file's own accelerators."""
    from orchestrator.decision.capacity import ClusterLoad, Running
    from orchestrator.decision.demand import job_demand
    from orchestrator.errors import BackendError
    from providers.onprem import OnPremProvider

    try:
        snap = OnPremProvider(settings.ray_address, settings.ray_token_file).snapshot()
    except BackendError as e:
        return Capacity(unreachable=f"on-prem cluster unreachable: {e.message}",
                        source=settings.ray_address)
    running = []
    for j in snap.jobs:
        remaining = None
        if j.est_hours is not None and j.start_time is not None:
            remaining = max(0.0, j.est_hours * 3600 - (now - j.start_time))
        running.append(Running(cpus=j.cpus, gpus=j.gpus, remaining_s=remaining,
                               queued=j.status == "PENDING"))
    total, used = snap.demands()
    load = ClusterLoad.of(total, used, running)
    source = (f"{snap.address}: {load.free_cpus:g}/{total.cpus:g} CPUs and "
              f"{load.free_gpus:g}/{total.gpus:g} GPUs free, {len(snap.jobs)} jobs active")
    return dataclasses.replace(load.start(job_demand(spec), source), load=load)


def month_spend(settings, now: float) -> float:
    """USD spent this calendar month over every job (running ones so far); 0 without a
    monthly budget, which is the only thing that needs it, or before the store exists."""
    from orchestrator.store import open_store, store_exists

    if not settings.monthly_budget or not store_exists(settings):
        return 0.0
    from orchestrator import ledger

    store = open_store(settings)
    try:
        recs = store.list(limit=1_000_000, since=ledger.month_start(now))
    finally:
        store.close()
    return ledger.month_spend((ledger.entry(r, now) for r in recs), now)


def history_for(fingerprint: str, settings) -> list[PastRun]:
    """Past runs of this fingerprint from the job store; none before the store exists."""
    from orchestrator.store import open_store, store_exists

    if not store_exists(settings):
        return []  # planning must not create the store
    store = open_store(settings)
    try:
        return [PastRun.from_record(r) for r in store.runs_for_fingerprint(fingerprint)]
    finally:
        store.close()
