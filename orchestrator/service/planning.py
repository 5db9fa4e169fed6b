"""The I/O around one placement decision: gather offers and history, classify, decide.

No Ray and no SkyPilot API server: cloud prices come from catalog files on disk, the
on-prem offers from the settings (or, with no inventory there, from the cluster's nodes over
its dashboard's HTTP API), the local one from nvidia-smi and the CPU count.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Collection, Iterator, Optional, Sequence

from orchestrator.base.targets import ONPREM, needs_cloud_credentials, rented
from orchestrator.decision.explore import in_flight
from orchestrator.decision.facts import Facts, decide_on
from orchestrator.decision.models import Capacity, Decision, Offer, PastRun
from orchestrator.records.placement import Placement


def gather_offers(spec, settings, cluster=None,
                  enabled: Optional[Collection[str]] = None) -> list[Offer]:
    """Every offer worth pricing: each backend's, asked through the registry (its folder's
    offers.py). On-prem offers are the [[onprem]] inventory's; without one, the cluster's
    own nodes at power only (`cluster`: the read this plan made, see read_cluster; None
    reads it here). `enabled`: the clouds with credentials here, when they were checked;
    each cloud offer then says if it has them."""
    from providers import registry
    from providers.offering import Seen

    wanted = not settings.onprem and wants_cluster(spec, settings)
    if wanted and cluster is None:
        cluster = _read_cluster(settings)
    seen = Seen(cluster=cluster if wanted else None, enabled=enabled,
                server_keeps_jobs_off=_server_keeps_jobs_off(settings))
    return registry.offers(spec, settings, seen)


def _server_keeps_jobs_off(settings) -> bool:
    """`orch serve` runs no job on its own machine unless its admin trusts the team with
    it (serve_local_trusted; server/client_policy.check_local_target says why)."""
    from orchestrator.service.git_workdir import serves_clients

    return (serves_clients(settings) and not settings.serve_local_trusted
            and settings.serve_isolation != "per-user")


@contextmanager
def _session(settings, store=None) -> Iterator:
    """The store to read: `store`, the caller's session, when given; else one opened for
    this read and closed after it; None before the store exists (a plan never creates it)."""
    if store is not None:
        yield store
        return
    from orchestrator.store import open_store, store_exists

    if not store_exists(settings):
        yield None
        return
    opened = open_store(settings)
    try:
        yield opened
    finally:
        opened.close()


def gather(spec, settings, now: float, *, fingerprint: str,
           history: Optional[Sequence] = None, offers: Optional[Sequence[Offer]] = None,
           capacity: Optional[Capacity] = None, spent_this_month: Optional[float] = None,
           enabled: Optional[Collection[str]] = None, store=None) -> Facts:
    """The facts a plan is made from; each one given is used as it is, the rest read: the
    cluster once (its nodes make offers, its load the capacity), the store in one session
    (`store`, or one opened here). `history=None` reads this fingerprint's runs and the
    team's; `enabled`: the clouds with credentials here, see gather_offers."""
    cluster = (_read_cluster(settings) if wants_cluster(spec, settings)
               and (offers is None or capacity is None) else None)
    with _session(settings, store) as db:
        if history is None:
            history = _history(db, fingerprint, now)
        if offers is None:
            offers = gather_offers(spec, settings, cluster=cluster, enabled=enabled)
        if capacity is None and cluster is not None:
            capacity = cluster_capacity(spec, settings, now, cluster, known=_active_ids(db))
            capacity = dataclasses.replace(capacity, reservations=_holds(db, settings, now,
                                                                         spec.name))
        elif capacity is None and settings.onprem:  # an inventory, no cluster read: the
            holds = _holds(db, settings, now, spec.name)  # schedules due on those GPUs hold them
            capacity = Capacity(source="the [[onprem]] inventory", reservations=holds) if holds else None
        if spent_this_month is None:
            spent_this_month = _month_spend(db, settings, now)
        exploring = frozenset() if db is None else in_flight(
            PastRun.from_row(r) for r in db.list(limit=10_000, statuses=("PENDING", "RUNNING")))
    history = [h if isinstance(h, PastRun) else PastRun.from_record(h) for h in history]
    return Facts(offers=list(offers), capacity=capacity, history=history,
                 spent_this_month=spent_this_month, notes=cluster_notes(settings, cluster, offers),
                 exploring=exploring)


def plan(spec, settings, *, fingerprint: str, code_dirty: bool = False,
         history: Optional[Sequence[PastRun]] = None,
         owner: Optional[str] = None, store=None) -> tuple[Decision, list[str]]:
    """The one planning path: `orch plan`, `orch submit`, schedules and `orch serve` all
    place a job here (through service/placing.py), so a plan shows the choice a submit
    makes. (The decision, and the notes about it that the record keeps in its reasons and
    warnings.)

    The facts are gathered once (`gather`: the offers, the cluster, the history, the
    month's spend, in one store session: `store` when given). A cloud choice needs
    credentials for that cloud: checked here, once a cloud is chosen (a local-only plan
    never pays SkyPilot's import). Where a configured cloud has none, the job is decided
    again on the same facts with its offers still priced but excluded ("no credentials
    here"), so a plan shows what each cloud would cost; a choice that changed says why and
    how to enable the cloud, and with nothing left the refusal names the clouds and `sky
    check`."""
    now = time.time()
    facts = gather(spec, settings, now, fingerprint=fingerprint, history=history, store=store)
    decision, notes = _plan(spec, settings, facts, fingerprint, code_dirty, owner, now)
    carried = spec.carried()
    if carried and decision.choice is not None and not rented(decision.target):
        notes.append(f"{', '.join(carried)}: for a cloud VM; on "
                     f"{decision.target} the job runs without {'them' if len(carried) > 1 else 'it'}")
    return decision, notes


def _plan(spec, settings, facts: Facts, fingerprint: str, code_dirty: bool,
          owner: Optional[str], now: float) -> tuple[Decision, list[str]]:
    decision = decide_on(spec, settings, facts, fingerprint=fingerprint, now=now,
                         code_dirty=code_dirty, owner=owner)
    if not needs_cloud_credentials(decision.target) or decision.choice is None:
        return decision, []
    from providers.cloud import enabled_clouds

    cloud = decision.choice.offer.cloud
    enabled, why = enabled_clouds(settings.clouds)
    if not why:
        return _credentials_checked(decision), []
    # Decided again with every cloud offer marked: those without credentials stay priced
    # in the plan, excluded, and the choice is made among what can launch from here.
    again = decide_on(spec, settings, facts.with_credentials(enabled), fingerprint=fingerprint,
                      now=now, code_dirty=code_dirty, owner=owner)
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
        if a is None or not needs_cloud_credentials(a.offer.target):
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


# A cluster read that plans made in this context see instead of reading the cluster: a
# sweep places its runs one after another on what the runs before them will hold.
_CLUSTER_AS: ContextVar[Optional[object]] = ContextVar("orch_cluster_as", default=None)


@contextmanager
def cluster_read_as(snapshot) -> Iterator[None]:
    token = _CLUSTER_AS.set(snapshot)
    try:
        yield
    finally:
        _CLUSTER_AS.reset(token)


def _read_cluster(settings):
    given = _CLUSTER_AS.get()
    if given is not None:
        return given
    from providers.registry import read_capacity

    return read_capacity(ONPREM, settings)


def read_cluster(settings):
    """The on-prem cluster as a plan reads it, through its backend's capacity (a
    ClusterSnapshot, or the BackendError)."""
    return _read_cluster(settings)


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


def _active_ids(db) -> frozenset[str]:
    """The ids of this store's unfinished jobs (none before the store exists)."""
    if db is None:
        return frozenset()
    return frozenset(r.id for r in db.list(limit=1_000_000, statuses=("PENDING", "RUNNING")))


def cluster_capacity(spec, settings, now: float, cluster=None,
                     known: Collection[str] = frozenset()) -> Capacity:
    """Whether the on-prem cluster can start this job now, else about when; never raises.
    `load` lets placement ask again for each offer, with what the job would hold there
    (decision.demand); the answer here is for the job file's own accelerators. `cluster`:
    the read this plan made (read_cluster); None reads it here. Only the
    Ray jobs whose `orch_job` is one of `known` (this store's unfinished jobs) count by what
    their metadata says they hold: any job on the cluster can submit a Ray job with made-up
    metadata; the others hold what Ray reports used."""
    from orchestrator.base.errors import BackendError
    from orchestrator.decision.capacity import ClusterLoad, Running, expected_remaining_s
    from orchestrator.decision.demand import job_demand
    from orchestrator.decision.pricing import ESTIMATE_SPREAD

    snap = _read_cluster(settings) if cluster is None else cluster
    if isinstance(snap, BackendError):
        why = f"on-prem: {snap.message}" + (f"; {snap.hint}" if snap.hint else "")
        return Capacity(unreachable=why, source=settings.ray_address)
    running = []
    for j in (j for j in snap.jobs if j.orch_id in known):
        remaining = None
        if j.est_hours is not None and j.status == "PENDING":
            remaining = j.est_hours * 3600  # its whole run, once it starts
        elif j.est_hours is not None and j.start_time is not None:
            # Its record keeps no estimate basis: as uncertain as an estimate as written.
            remaining = expected_remaining_s(j.est_hours * 3600, now - j.start_time, ESTIMATE_SPREAD)
        running.append(Running(cpus=j.cpus, gpus=j.gpus, remaining_s=remaining,
                               queued=j.status == "PENDING"))
    total, used = snap.demands()
    load = ClusterLoad.of(total, used, running)
    source = (f"{snap.address}: {load.free_cpus:g}/{total.cpus:g} CPUs and "
              f"{load.free_gpus:g}/{total.gpus:g} GPUs free, {len(snap.jobs)} jobs active")
    return dataclasses.replace(load.start(job_demand(spec), source), load=load)


def _holds(store, settings, now: float, name: Optional[str] = None,
           horizon_h: Optional[float] = None) -> tuple:
    from orchestrator.decision.reservations import schedule_reservations

    if store is None:
        return ()
    schedules = [s for s in store.schedules() if s.name != name]
    ahead = settings.cron_lookahead_hours if horizon_h is None else horizon_h
    return schedule_reservations(schedules, now, ahead, settings.max_wait_minutes / 60.0)


def _month_spend(store, settings, now: float) -> float:
    if not settings.monthly_budget or store is None:
        return 0.0
    from orchestrator.service.spending import spent_this_month

    return spent_this_month(store, now, settings.budget_basis)


# The team's runs that teach a job's speed on other GPU models (decision.estimates): the
# recent successful ones, enough to learn from without slowing a plan down.
TEAM_DAYS, TEAM_RUNS = 90, 2000


def _history(store, fingerprint: str, now: float) -> list[PastRun]:
    if store is None:
        return []  # planning must not create the store
    own, others = store.learning_runs(fingerprint, TEAM_RUNS, now - TEAM_DAYS * 86400)
    mine = [PastRun.from_row(r) for r in own]
    team = [PastRun.from_row(r) for r in others if r.fingerprint and r.fingerprint != fingerprint]
    return mine + team
