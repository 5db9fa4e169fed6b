"""The I/O around one placement decision: gather offers and history, classify, decide.

No Ray and no SkyPilot API server: cloud prices come from catalog files on disk, the
on-prem offers from the settings (or, with no inventory there, from the cluster's nodes over
its dashboard's HTTP API), the local one from nvidia-smi and the CPU count.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Collection, Optional, Sequence

from orchestrator.base.targets import CLOUD, ONPREM, rented
from orchestrator.decision.classify import classify
from orchestrator.decision.models import Capacity, Decision, Offer, PastRun
from orchestrator.decision.placement import decide
from orchestrator.decision.pricing import HoursEstimator, onprem_offer
from orchestrator.records.placement import Placement


def gather_offers(spec, settings, local: Optional[Sequence[Offer]] = None,
                  cluster=None, enabled: Optional[Collection[str]] = None) -> list[Offer]:
    """Every offer worth pricing. Catalogs are read only when the job may go to a cloud,
    so a local-only plan never needs them. On-prem offers are the [[onprem]] inventory's;
    without one, the cluster's own nodes at power only (`cluster`: the read this plan made,
    see providers.onprem.read_cluster; None reads it here). `enabled`: the clouds with
    credentials here, when they were checked; each cloud offer then says if it has them."""
    from orchestrator.offers.local import local_offers

    offers: list[Offer] = []
    if settings.effective_mode != "local" and settings.clouds and CLOUD in spec.placement.allow:
        from orchestrator.offers.catalog import cloud_offers

        rented = cloud_offers(settings.clouds, settings.catalog_dir)
        if enabled is not None:
            rented = [dataclasses.replace(o, credentials=o.cloud in enabled) for o in rented]
        offers.extend(rented)
    offers.extend(onprem_offer(inv, settings.electricity_price) for inv in settings.onprem)
    if not settings.onprem and wants_cluster(spec, settings):
        from orchestrator.base.errors import BackendError
        from orchestrator.decision.cluster_offers import cluster_offers

        cluster = _read_cluster(settings) if cluster is None else cluster
        if not isinstance(cluster, BackendError):  # unreachable: capacity says so
            offers.extend(cluster_offers(cluster.nodes, settings.electricity_price))
    offers.extend(local_offers(settings) if local is None else local)
    return offers


def plan_job(spec, settings, *, fingerprint: str, history: Sequence[PastRun] = (),
             code_dirty: bool = False, capacity: Optional[Capacity] = None,
             offers: Optional[Sequence[Offer]] = None, now: Optional[float] = None,
             spent_this_month: Optional[float] = None,
             enabled: Optional[Collection[str]] = None, owner: Optional[str] = None) -> Decision:
    """Classify the job and decide where it runs; `offers=None` gathers them (`enabled`: the
    clouds with credentials here, see gather_offers), and `spent_this_month=None` reads the
    month's spend from the store when a monthly budget is set."""
    history = [h if isinstance(h, PastRun) else PastRun.from_record(h) for h in history]
    est = HoursEstimator(spec, fingerprint, history, settings.default_job_hours, settings.gpu_speeds,
                         owner=owner)
    now = time.time() if now is None else now
    kind = classify(spec, fingerprint, history, now, settings, code_dirty, est.reference.hours)
    # One read of the cluster per plan: its nodes (offers, the inventory check) and its load.
    cluster = (_read_cluster(settings) if wants_cluster(spec, settings)
               and (offers is None or capacity is None) else None)
    if offers is None:
        offers = gather_offers(spec, settings, cluster=cluster, enabled=enabled)
    if capacity is None and cluster is not None:
        capacity = cluster_capacity(spec, settings, now, cluster)
        capacity = dataclasses.replace(capacity, reservations=schedule_holds(settings, now,
                                                                             spec.name))
    elif capacity is None and settings.onprem:  # an inventory, no cluster read: the schedules
        holds = schedule_holds(settings, now, spec.name)  # due on those GPUs still hold them
        capacity = Capacity(source="the [[onprem]] inventory", reservations=holds) if holds else None
    if spent_this_month is None:
        spent_this_month = month_spend(settings, now)
    return decide(spec, kind, offers, capacity, settings, estimator=est,
                  spent_this_month=spent_this_month, notes=cluster_notes(settings, cluster, offers))


def plan(spec, settings, *, fingerprint: str, code_dirty: bool = False,
         history: Optional[Sequence[PastRun]] = None,
         owner: Optional[str] = None) -> tuple[Decision, list[str]]:
    """The one planning path: `orch plan`, `orch submit`, schedules and `orch serve` all
    place a job here, so a plan shows the choice a submit makes. (The decision, and the
    notes about it that the record keeps in its reasons and warnings.)

    The history and the month's spend are read once, the offers gathered once. A cloud
    choice needs credentials for that cloud: checked here, once a cloud is chosen (a
    local-only plan never pays SkyPilot's import). Where a configured cloud has none, the
    job is planned again with its offers still priced but excluded ("no credentials here"),
    so a plan shows what each cloud would cost; a choice that changed says why and how to
    enable the cloud, and with nothing left the refusal names the clouds and `sky check`."""
    if history is None:
        history = history_for(fingerprint, settings)
    decision, notes = _plan(spec, settings, fingerprint, code_dirty, history, owner)
    carried = spec.carried()
    if carried and decision.choice is not None and not rented(decision.target):
        notes.append(f"{', '.join(carried)}: for a cloud VM; on "
                     f"{decision.target} the job runs without {'them' if len(carried) > 1 else 'it'}")
    return decision, notes


def _plan(spec, settings, fingerprint: str, code_dirty: bool, history: Sequence[PastRun],
          owner: Optional[str]) -> tuple[Decision, list[str]]:
    decision = plan_job(spec, settings, fingerprint=fingerprint, history=history,
                        code_dirty=code_dirty, owner=owner)
    if not rented(decision.target) or decision.choice is None:
        return decision, []
    from providers.cloud import enabled_clouds

    cloud = decision.choice.offer.cloud
    enabled, why = enabled_clouds(settings.clouds)
    if not why:
        return _credentials_checked(decision), []
    # Planned again with every cloud offer marked: those without credentials stay priced
    # in the plan, excluded, and the choice is made among what can launch from here.
    again = plan_job(spec, settings, fingerprint=fingerprint, history=history,
                     code_dirty=code_dirty, enabled=enabled, owner=owner)
    if cloud in enabled:
        return again, []
    off = "; ".join(f"{c}: {w.rstrip(' .:')}" for c, w in why.items())  # SkyPilot's first lines
    which = "no configured cloud has credentials here" if not enabled else f"{cloud} has no credentials here"
    if again.choice is None:
        refusal = f"the cheapest place for this job is {cloud}, but {which} ({off}); {again.refusal}"
        return dataclasses.replace(again, refusal=refusal, reasons=(refusal,)), []
    where = again.choice.offer.cloud if rented(again.target) else again.target
    return again, [f"{which} ({off}); `sky check` enables a cloud. Instead: {where}"]


def _credentials_checked(decision: Decision) -> Decision:
    """The decision with each cloud offer marked as having credentials here: all did."""
    def mark(a):
        if a is None or a.offer.owned:
            return a
        return dataclasses.replace(a, offer=dataclasses.replace(a.offer, credentials=True))

    return dataclasses.replace(decision, choice=mark(decision.choice),
                               alternatives=tuple(mark(a) for a in decision.alternatives))


def as_record(decision: Decision, notes: Sequence[str]) -> Placement:
    """The decision as `orch plan --json` shows it and a job's record keeps it."""
    record = decision.to_dict()
    record["reasons"] = [*notes, *record["reasons"]]
    record["warnings"] = list(notes)
    return Placement.model_validate(record)


def wants_cluster(spec, settings) -> bool:
    return bool(settings.ray_address and settings.effective_mode != "local"
                and ONPREM in spec.placement.allow)


def _read_cluster(settings):
    from providers.onprem import read_cluster

    return read_cluster(settings.ray_address, settings.ray_token_file)


def cluster_notes(settings, cluster, offers: Sequence[Offer]) -> list[str]:
    """What a plan should say about the cluster it read: that the offers made from its nodes
    are priced at power only (once), and that the inventory disagrees with it."""
    from orchestrator.base.errors import BackendError
    from orchestrator.decision.cluster_offers import inventory_mismatch

    notes = list(dict.fromkeys(o.unpriced for o in offers if o.unpriced))
    if settings.onprem and cluster is not None and not isinstance(cluster, BackendError):
        mismatch = inventory_mismatch(settings.onprem, cluster.nodes, cluster.address)
        notes += [mismatch] if mismatch else []
    return notes


def cluster_capacity(spec, settings, now: float, cluster=None) -> Capacity:
    """Whether the on-prem cluster can start this job now, else about when; never raises.
    `load` lets placement ask again for each offer, with what the job would hold there
    (decision.demand); the answer here is for the job file's own accelerators. `cluster`:
    the read this plan made (providers.onprem.read_cluster); None reads it here."""
    from orchestrator.base.errors import BackendError
    from orchestrator.decision.capacity import ClusterLoad, Running
    from orchestrator.decision.demand import job_demand

    snap = _read_cluster(settings) if cluster is None else cluster
    if isinstance(snap, BackendError):
        why = f"on-prem: {snap.message}" + (f"; {snap.hint}" if snap.hint else "")
        return Capacity(unreachable=why, source=settings.ray_address)
    running = []
    for j in snap.jobs:
        remaining = None
        if j.est_hours is not None and j.status == "PENDING":
            remaining = j.est_hours * 3600  # its whole run, once it starts
        elif j.est_hours is not None and j.start_time is not None:
            remaining = max(0.0, j.est_hours * 3600 - (now - j.start_time))
        running.append(Running(cpus=j.cpus, gpus=j.gpus, remaining_s=remaining,
                               queued=j.status == "PENDING"))
    total, used = snap.demands()
    load = ClusterLoad.of(total, used, running)
    source = (f"{snap.address}: {load.free_cpus:g}/{total.cpus:g} CPUs and "
              f"{load.free_gpus:g}/{total.gpus:g} GPUs free, {len(snap.jobs)} jobs active")
    return dataclasses.replace(load.start(job_demand(spec), source), load=load)


def schedule_holds(settings, now: float, name: Optional[str] = None,
                   horizon_h: float = 24.0) -> tuple:
    """The cron schedules (`orch serve`'s, in the store) due in the next `horizon_h`, as the
    owned GPUs they will claim; none before the store exists. A job's own schedule (same
    name) is left out: its next slot follows this run."""
    from orchestrator.decision.reservations import schedule_reservations
    from orchestrator.store import open_store, store_exists

    if not store_exists(settings):
        return ()
    store = open_store(settings)
    try:
        schedules = [s for s in store.schedules() if s.get("name") != name]
    finally:
        store.close()
    return schedule_reservations(schedules, now, horizon_h, settings.max_wait_minutes / 60.0)


def month_spend(settings, now: float) -> float:
    """USD spent this calendar month over every job (running ones so far), counted as the
    monthly budget counts it (settings.budget_basis: cash by default); 0 without a monthly
    budget, which is the only thing that needs it, or before the store exists."""
    from orchestrator.store import open_store, store_exists

    if not settings.monthly_budget or not store_exists(settings):
        return 0.0
    from orchestrator.decision import job_ledger as ledger

    store = open_store(settings)
    try:
        recs = store.list(limit=1_000_000, since=ledger.month_start(now))
    finally:
        store.close()
    return ledger.month_spend((ledger.entry(r, now) for r in recs), now, settings.budget_basis)


# The team's runs that teach a job's speed on other GPU models (decision.estimates): the
# recent successful ones, enough to learn from without slowing a plan down.
TEAM_DAYS, TEAM_RUNS = 90, 2000


def history_for(fingerprint: str, settings, now: Optional[float] = None) -> list[PastRun]:
    """Past runs of this fingerprint from the job store, then the team's recent successful
    runs of other jobs; none before the store exists."""
    from orchestrator.store import open_store, store_exists

    if not store_exists(settings):
        return []  # planning must not create the store
    now = time.time() if now is None else now
    store = open_store(settings)
    try:
        mine = [PastRun.from_row(r) for r in store.runs_for_fingerprint(fingerprint)]
        team = [PastRun.from_row(r) for r in store.list(TEAM_RUNS, ("SUCCEEDED",), now - TEAM_DAYS * 86400)
                if r.fingerprint and r.fingerprint != fingerprint]
        return mine + team
    finally:
        store.close()
