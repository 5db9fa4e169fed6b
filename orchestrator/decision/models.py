"""Plain values the decision core passes around: offers, past runs, capacity, decisions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Mapping, Optional

from orchestrator.base.targets import OWNED, Target
from orchestrator.decision.gpus import canonical_gpu
from orchestrator.records.metrics import RunMetrics
from orchestrator.records.placement import PlacedOffer, Placement

if TYPE_CHECKING:
    from orchestrator.records import JobRow

Kind = Literal["exploratory", "steady"]


@dataclass(frozen=True, slots=True)
class Offer:
    """One place a job could run. Prices are USD per hour for the whole offer.

    For owned hardware (`local`, `onprem`) `price_per_hour` is the full cost
    (`amortized_per_hour + power_per_hour`) of all `count` GPUs; a job using fewer
    GPUs pays its share. `gpu=None` means a CPU-only machine.
    """

    target: Target
    gpu: Optional[str]
    count: float
    price_per_hour: float
    cloud: Optional[str] = None
    region: Optional[str] = None
    spot: bool = False
    cpus: Optional[float] = None
    memory_gb: Optional[float] = None
    amortized_per_hour: float = 0.0
    power_per_hour: float = 0.0
    instance_type: Optional[str] = None
    # Owned hardware: the electricity price (USD per kWh) its power_per_hour assumes, so that
    # a job's measured energy can be priced the same way (decision.job_ledger); 0: unknown.
    kwh_price: float = 0.0
    # Owned hardware whose purchase price orch was not told (a Ray cluster found by its
    # address alone): what is missing and how to give it; the full cost then counts power only.
    unpriced: Optional[str] = None
    # A cloud offer: whether this machine has credentials for its cloud (None: not checked).
    credentials: Optional[bool] = None
    # A stand-in for a backend that did not answer (the cluster at ORCH_RAY_ADDRESS): why.
    # Its shape and price are unknown; it is never chosen, only shown with the reason.
    unread: Optional[str] = None
    # Owned hardware of a fixed size whose load the plan's `Capacity` describes (the on-prem
    # cluster): a job waits for it, or queues for it. What placement asks, not the target's name.
    pooled: bool = False

    @property
    def owned(self) -> bool:
        """Owned hardware (its purchase and power) rather than rented (its rent): base.targets'
        answer, inline (placement asks it of every offer many times; a call costs 10%)."""
        return self.target in OWNED


def share_price(offer: Offer, used: float) -> float:
    """What a job pays per hour: the whole cloud offer, or its share of owned GPUs."""
    if offer.target not in OWNED or offer.gpu is None or not offer.count:  # inline: hot
        return offer.price_per_hour
    return offer.price_per_hour * min(used / offer.count, 1.0)


def measured_gpu(metrics: RunMetrics, planned: Optional[str]) -> Optional[str]:
    """The GPU model a run ran on: what its runner saw (`gpu_name` in its worker_setup
    event, torch's name for the device, or "cpu"), else the model it was placed on."""
    seen = metrics.run_settings.gpu_name if metrics.run_settings else None
    if not seen or str(seen).lower() == "cuda":  # none recorded, or the driver could not say
        return planned
    return None if str(seen).lower() == "cpu" else canonical_gpu(str(seen))


@dataclass(frozen=True, slots=True)
class PastRun:
    """One earlier run of some job, as the store recorded it."""

    fingerprint: str
    status: str
    created_at: float  # epoch seconds
    duration_s: Optional[float] = None
    target: Optional[str] = None
    gpu: Optional[str] = None
    gpu_count: float = 1
    samples_per_sec: Optional[float] = None
    data_share: Optional[float] = None  # of a training step, spent waiting for data
    owner: Optional[str] = None
    estimate_hours: Optional[float] = None  # the job file's estimate.hours for this run
    estimate_gpu: Optional[str] = None  # the model it was written for (None: not said)

    @property
    def succeeded(self) -> bool:
        return self.status.lower() in ("succeeded", "success", "completed", "done")

    @property
    def measuring(self) -> bool:
        """Still running, with a throughput or data share its reports measured so far."""
        return (self.status.upper() == "RUNNING"
                and (bool(self.samples_per_sec) or self.data_share is not None))

    @classmethod
    def from_row(cls, rec: JobRow) -> PastRun:
        """From a store row: its run time (the backend's clock when it has one), its metrics,
        the device its runner saw and the decision it was placed by."""
        choice = rec.choice or PlacedOffer()  # none: none of its figures
        start = rec.info.backend_start if rec.info.backend_start is not None else rec.started_at
        end = rec.info.backend_end if rec.info.backend_end is not None else rec.finished_at
        duration = end - start if start is not None and end is not None else None
        wall = rec.metrics.wall_s
        if wall is not None and wall > 0:
            duration = float(wall)  # the runner's own clock: training, no start-up
        gpu = measured_gpu(rec.metrics, choice.gpu)
        hint = rec.stored.estimate
        return cls(fingerprint=rec.fingerprint or "", status=rec.status, created_at=rec.created_at,
                   duration_s=duration, target=rec.target or choice.target, gpu=gpu,
                   gpu_count=choice.count or (1 if gpu else 0),  # a GPU seen: at least one
                   samples_per_sec=rec.metrics.number("samples_per_sec"),
                   data_share=rec.metrics.number("data_fraction"), owner=rec.owner,
                   estimate_hours=hint.hours, estimate_gpu=hint.gpu)

    @classmethod
    def from_record(cls, rec: Mapping) -> PastRun:
        """From a history entry given as a mapping (a test's table, an imported trace);
        unknown keys ignored. Missing figures come from where a store row keeps them:
        start/finish times, the job's metrics and the placement decision."""
        get = rec.get
        created = get("created_at", 0.0)
        if isinstance(created, str):
            from datetime import datetime

            created = datetime.fromisoformat(created).timestamp()
        duration = get("duration_s", None)
        started, finished = get("started_at", None), get("finished_at", None)
        if duration is None and isinstance(started, (int, float)) and isinstance(finished, (int, float)):
            duration = finished - started
        metrics = RunMetrics.read(get("metrics", None))
        placed = Placement.read(get("decision", None))
        choice = (placed.choice if placed else None) or PlacedOffer()
        gpu = get("gpu", None) or choice.gpu
        count = get("gpu_count", None)
        if count is None:
            count = choice.count if "count" in choice.model_fields_set else (1 if gpu else 0)
        hint = get("estimate", None) or {}
        return cls(fingerprint=str(get("fingerprint", "")), status=str(get("status", "")),
                   created_at=float(created or 0.0), duration_s=duration,
                   target=get("target", None) or choice.target, gpu=gpu, gpu_count=count,
                   samples_per_sec=get("samples_per_sec", None) or metrics.number("samples_per_sec"),
                   data_share=get("data_share", None) or metrics.number("data_fraction"),
                   owner=get("owner", None), estimate_hours=hint.get("hours"),
                   estimate_gpu=hint.get("gpu"))


@dataclass(frozen=True, slots=True)
class Reservation:
    """Owned GPUs that steady work will claim soon: a cron schedule due, or a job queued.
    Exploratory work backfills owned GPUs only when it would end before these start, or
    leaves enough free for them. A job that would hold them past `in_hours +
    slack_hours` pushes that work out: `cloud_cost` (USD) is what renting for it would
    cost, when known, and is the job's congestion charge."""

    in_hours: float  # from now; 0 for a job already queued
    gpus: float
    gpu: Optional[str] = None  # the model it needs; None: any owned GPU
    what: str = ""
    cloud_cost: Optional[float] = None
    slack_hours: float = 0.0  # how long that work may start late and still meet its deadline
    # cloud_cost infinite: that work may not rent (its placement.allow has no cloud), so
    # exploratory work never pushes it out.


@dataclass(frozen=True, slots=True)
class Capacity:
    """What the on-prem cluster can take now; `None` fields mean it was not asked."""

    onprem_free: Optional[Mapping[str, float]] = None  # free GPUs by model
    wait_minutes: Optional[float] = None  # estimated queue wait when not enough is free
    source: str = "not checked"
    can_start_now: Optional[bool] = None  # decided by whoever read the cluster, for this job
    unreachable: Optional[str] = None  # why the cluster could not be read
    # What the cluster has free and runs (a capacity.ClusterLoad): when set, placement
    # estimates each on-prem offer's wait from it, with what the job would hold there.
    load: Optional[Any] = None
    # Owned GPUs that are idle now but promised to steady work soon (cron schedules due,
    # queued jobs): what exploratory backfill must leave free.
    reservations: tuple[Reservation, ...] = ()


@dataclass(frozen=True, slots=True)
class Classification:
    kind: Kind
    reasons: tuple[str, ...]
    recent_successes: int = 0
    expected_hours: Optional[float] = None
    occasions: int = 0  # of those runs, how many were separate occasions


@dataclass(slots=True)
class Alternative:
    """One offer priced for this job; `excluded` says why it cannot be chosen.

    Two prices: `est_cost`, the full cost for the record (owned hardware's amortized
    purchase and power; the cloud's rent), and `marginal_cost`, what choosing it changes
    in the team's cash and time, which decides: the rent for the cloud; for owned
    hardware its power plus `congestion`, the price of the steady work it would push out
    (zero while the owned GPUs stay free for the job's whole run).

    Not frozen, unlike the other values here: a plan builds one for every fitting offer of
    every job, and a frozen dataclass's __init__ takes eight times as long (each field set
    through object.__setattr__). Placement builds them once ranked; nothing changes one after."""

    offer: Offer
    est_hours: Optional[float]
    est_cost: Optional[float]  # USD for the whole job, full cost
    marginal_cost: Optional[float] = None  # USD: rent, or power + congestion
    hours_basis: str = ""
    used: float = 0.0  # GPUs the job gets; all of a cloud offer, a share of an owned pool
    excluded: Optional[str] = None
    wait_minutes: float = 0.0
    power_cost: Optional[float] = None  # USD, owned hardware: the job's share of power
    congestion: float = 0.0  # USD, owned hardware: what the work it displaces would rent for
    displaces: str = ""  # that work, in words
    score: Optional[float] = None  # what it was ranked by: marginal cost (+ turnaround value)
    cash_cost: Optional[float] = None  # USD the team pays: rent, or power
    budget_cost: Optional[float] = None  # what budgets count: cash, or full (budget_basis)
    nodes: int = 1  # cloud VMs of this offer the job rents (num_nodes); `used` is per VM

    @property
    def price_per_hour(self) -> float:
        return share_price(self.offer, self.used) * self.nodes


@dataclass(frozen=True, slots=True)
class Decision:
    kind: Kind
    target: Optional[Target]
    choice: Optional[Alternative]
    reasons: tuple[str, ...]
    classification: Classification
    alternatives: tuple[Alternative, ...]
    decided_by: Literal["full", "marginal"] = "full"
    refusal: Optional[str] = None
    currency: str = "USD"
    currency_rate: float = 1.0
    notes: tuple[str, ...] = field(default_factory=tuple)
    # (reference model, model measured): the job runs where it does to measure that model's
    # speed for its family (decision/explore.py); None: it runs where it costs least.
    explores: Optional[tuple[str, str]] = None

    @property
    def est_hours(self) -> Optional[float]:
        return self.choice.est_hours if self.choice else None

    @property
    def est_cost(self) -> Optional[float]:
        return self.choice.est_cost if self.choice else None

    def money(self, usd: Optional[float]) -> Optional[float]:
        """USD in the user's currency."""
        return None if usd is None else usd * self.currency_rate

    def to_dict(self) -> dict:
        """The `orch plan --json` shape; money in `currency`."""
        m = self.money
        return {
            "kind": self.kind,
            "target": self.target,
            "reasons": list(self.classification.reasons) + list(self.reasons),
            "classification": {"kind": self.classification.kind,
                               "reasons": list(self.classification.reasons)},
            "estimate": {"hours": self.est_hours, "cost": m(self.est_cost),
                         "currency": self.currency, "cost_usd": self.est_cost,
                         "marginal": m(self.choice.marginal_cost) if self.choice else None,
                         "cash": m(self.choice.cash_cost) if self.choice else None,
                         "cash_usd": self.choice.cash_cost if self.choice else None},
            "decided_by": self.decided_by,
            "explores": list(self.explores) if self.explores else None,
            "choice": _alt_dict(self.choice, m) if self.choice else None,
            "refusal": self.refusal,
            "notes": list(self.notes),
            "alternatives": [_alt_dict(a, m) for a in self.alternatives],
        }


def _alt_dict(a: Alternative, m) -> dict:
    o = a.offer
    price = None if o.unread else a.price_per_hour  # a stand-in's price is unknown
    own = o.owned and price is not None
    return {"target": o.target, "cloud": o.cloud, "region": o.region, "gpu": o.gpu,
            "count": _num(a.used), "offer_count": _num(o.count), "nodes": a.nodes,
            "spot": o.spot,
            "instance_type": o.instance_type,
            "price_per_hour": m(price), "price_per_hour_usd": price,
            "amortized_per_hour_usd": _share(a, o.amortized_per_hour) if own else None,
            "power_per_hour_usd": _share(a, o.power_per_hour) if own else None,
            "kwh_price_usd": o.kwh_price if own and o.kwh_price else None,
            "est_hours": a.est_hours,
            "est_cost": m(a.est_cost), "marginal_cost": m(a.marginal_cost),
            "power_cost": m(a.power_cost), "congestion_cost": m(a.congestion),
            "displaces": a.displaces or None, "cash_cost": m(a.cash_cost), "score": m(a.score),
            "full_cost_known": o.unpriced is None,
            "credentials": o.credentials,
            "wait_minutes": a.wait_minutes, "hours_basis": a.hours_basis,
            "excluded": a.excluded}


def _share(a: Alternative, per_hour: float) -> float:
    """An owned offer's hourly figure for the share of its GPUs the job gets."""
    return per_hour * (a.price_per_hour / a.offer.price_per_hour if a.offer.price_per_hour else 1.0)


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x
