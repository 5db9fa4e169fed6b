"""What a job cost, as `orch cost` shows it and a job's `info.cost` keeps it once it ended.

`decision.job_ledger.entry` makes a `CostEntry` from a job row; `CostReport` is the
`orch cost --json` report built from them (service/cost_report.py). An entry saved by an
earlier orch loads too: missing figures read as their defaults (`cash_usd` None: saved
before entries had it) and keys this version does not know are kept.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, model_serializer

from orchestrator.records.placement import Num


class _Kept(BaseModel):
    model_config = ConfigDict(extra="allow")


class BilledLaunch(_Kept):
    """One launch of a cloud job, or one recovery: where, at what price, from when to when."""
    cloud: Optional[str] = None
    region: Optional[str] = None
    gpu: Optional[str] = None
    count: Optional[Num] = None
    spot: Optional[bool] = None
    price_per_hour: Optional[float] = None  # USD
    started_at: float = 0.0
    ended_at: Optional[float] = None  # None: still running
    reason: Optional[str] = None  # why it ended: preempted, succeeded, ...


class CloudBill(_Kept):
    """What a cloud job's launches were billed (`decision.cloud_bill`), kept in its `info`:
    every launch with its start-up, at its offer's price."""
    launches: list[BilledLaunch] = []
    billed_hours: float = 0.0
    cost_usd: float = 0.0
    recoveries: int = 0


class CostAlternative(_Kept):
    """The best option a job passed over, priced for the work it did."""
    where: str = ""
    device: str = ""
    cost_usd: float = 0.0
    excluded: Optional[str] = None


class CostEntry(_Kept):
    """One job's line in the ledger; for a running job, what it has cost so far. Money in USD."""
    id: str = ""
    name: str = ""
    status: str = ""
    kind: Optional[str] = None
    target: Optional[str] = None
    where: Optional[str] = None
    gpu: Optional[str] = None
    gpu_count: Num = 0
    started_at: Optional[float] = None
    finished_at: Optional[float] = None
    created_at: Optional[float] = None
    running: bool = False
    hours: float = 0.0
    gpu_hours: float = 0.0
    cost_usd: float = 0.0  # the full cost
    cash_usd: Optional[float] = None  # what was paid out; None: saved before entries had it
    amortized_usd: Optional[float] = None
    power_usd: Optional[float] = None
    # How power_usd was had: "measured" (the energy the job's GPUs drew, NVML) or "rated"
    # (the hardware's rated watts x hours); power_rated_usd is the rated figure beside a
    # measured one.
    power_basis: Optional[str] = None
    power_rated_usd: Optional[float] = None
    estimate_usd: Optional[float] = None
    recoveries: int = 0
    alternative: Optional[CostAlternative] = None

    def to_json(self) -> dict:
        return self.model_dump(mode="json")


class PricedJob(CostEntry):
    """A job's line in the `orch cost --json` report."""
    full_cost_known: bool = True  # False: owned hardware priced at power only


class CostGroup(BaseModel):
    """The totals of one group (a name, target, kind, month or day). Its JSON names the
    group under the grouping (`{"target": "cloud", ...}`), as `orch cost --json` shows it."""
    by: str
    key: str
    jobs: int = 0
    hours: float = 0.0
    gpu_hours: float = 0.0
    cost_usd: float = 0.0
    cash_usd: float = 0.0
    alternative_usd: float = 0.0
    recoveries: int = 0
    saved_usd: float = 0.0
    # In the report's currency (CostReport); None in the ledger's own rows.
    cost: Optional[float] = None
    cash: Optional[float] = None
    alternative: Optional[float] = None
    saved: Optional[float] = None

    @model_serializer(mode="plain")
    def _json(self) -> dict[str, Any]:
        out: dict[str, Any] = {self.by: self.key, "jobs": self.jobs, "hours": self.hours,
                               "gpu_hours": self.gpu_hours, "cost_usd": self.cost_usd,
                               "cash_usd": self.cash_usd, "alternative_usd": self.alternative_usd,
                               "recoveries": self.recoveries, "saved_usd": self.saved_usd}
        if self.cost is not None:
            out.update(cost=self.cost, cash=self.cash, alternative=self.alternative,
                       saved=self.saved)
        return out

    @classmethod
    def read(cls, row: dict, by: str) -> CostGroup:
        """A group as `orch serve` sent it (its JSON)."""
        fields = {k: v for k, v in row.items() if k != by and k in cls.model_fields}
        return cls(by=by, key=str(row.get(by)), **fields)


class CostTotal(BaseModel):
    jobs: int
    cost: float
    cost_usd: float
    cash: Optional[float] = None
    cash_usd: Optional[float] = None  # None from an older `orch serve`
    alternative: float
    alternative_usd: float
    saved: float


class BudgetMonth(BaseModel):
    spent: float  # in the report's currency
    budget: float
    basis: str = "full"  # an older `orch serve` counted the full cost
    month: str


class CostReport(BaseModel):
    """`orch cost --json`: what jobs cost, grouped, against their best alternatives."""
    currency: str
    rate: float
    by: str
    since: Optional[str] = None
    groups: list[CostGroup]
    total: CostTotal
    month: Optional[BudgetMonth] = None
    jobs: list[PricedJob]

    @classmethod
    def read(cls, data: dict) -> CostReport:
        """The report as `orch serve` sent it."""
        by = data["by"]
        return cls.model_validate({**data, "groups": [CostGroup.read(g, by)
                                                      for g in data.get("groups") or []]})

    def to_json(self) -> dict:
        return self.model_dump(mode="json")
