"""A placement decision as orch keeps it: the `orch plan --json` shape, a job row's `decision`.

`decision.models.Decision` is what placement computes; `Placement` is what is shown and
stored of it (money in the plan's currency as well as USD). Rows written by earlier orch
versions load too: every field has a default (a key they lack reads as None) and keys this
version does not know are kept as they were (`extra="allow"`), so `Placement.read(row)` is
the one lenient reader of a stored decision.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.base.targets import owned, rented

# A figure as placement wrote it: 2 GPUs stays `2` in JSON, 0.5 stays `0.5`.
Num = Union[int, float]


class _Kept(BaseModel):
    # Lenient: a row from an older or newer orch loads, and what it held is kept.
    model_config = ConfigDict(extra="allow")


class PlacedOffer(_Kept):
    """One offer priced for the job (an alternative, or the choice); money in the plan's
    currency unless the name says `_usd`."""
    target: Optional[str] = None
    cloud: Optional[str] = None
    region: Optional[str] = None
    gpu: Optional[str] = None
    count: Num = 0  # GPUs the job gets (per VM)
    offer_count: Optional[Num] = None  # GPUs the offer has
    nodes: int = 1
    spot: bool = False
    instance_type: Optional[str] = None
    price_per_hour: Optional[Num] = None
    price_per_hour_usd: Optional[Num] = None
    amortized_per_hour_usd: Optional[Num] = None  # owned: its share of the purchase
    power_per_hour_usd: Optional[Num] = None  # owned: its share of the power
    kwh_price_usd: Optional[Num] = None  # owned: the electricity price that power assumes
    est_hours: Optional[Num] = None
    est_cost: Optional[Num] = None
    marginal_cost: Optional[Num] = None
    power_cost: Optional[Num] = None
    congestion_cost: Optional[Num] = None
    displaces: Optional[str] = None
    cash_cost: Optional[Num] = None
    score: Optional[Num] = None
    full_cost_known: bool = True
    credentials: Optional[bool] = None
    wait_minutes: Num = 0.0
    hours_basis: str = ""
    excluded: Optional[str] = None

    def where(self) -> str:
        """cloud/region for a rented offer, else its target."""
        return f"{self.cloud}/{self.region}" if rented(self.target) else str(self.target)

    @property
    def owned(self) -> bool:
        """Owned hardware rather than rented (base.targets)."""
        return owned(self.target)

    def device(self) -> str:
        return "CPU" if not self.gpu else f"{self.gpu}x{self.count}"

    def same_offer(self, other: PlacedOffer) -> bool:
        return (self.target, self.cloud, self.region, self.gpu, self.count, self.spot,
                self.instance_type) == (other.target, other.cloud, other.region, other.gpu,
                                        other.count, other.spot, other.instance_type)


class PlacedEstimate(_Kept):
    """The chosen offer's figures (None when nothing was chosen)."""
    hours: Optional[Num] = None
    cost: Optional[Num] = None
    currency: str = "USD"
    cost_usd: Optional[Num] = None
    marginal: Optional[Num] = None
    cash: Optional[Num] = None
    cash_usd: Optional[Num] = None

    @property
    def rate(self) -> float:
        """Units of the plan's currency per USD, as it was when the job was planned."""
        return self.cost / self.cost_usd if self.cost and self.cost_usd else 1.0


class KindReasons(_Kept):
    kind: Optional[str] = None
    reasons: list[str] = Field(default_factory=list)


class Placement(_Kept):
    """Where a job runs and why: the `orch plan --json` shape, kept in its store row."""
    kind: Optional[str] = None
    target: Optional[str] = None
    reasons: list[str] = Field(default_factory=list)
    classification: KindReasons = Field(default_factory=KindReasons)
    estimate: PlacedEstimate = Field(default_factory=PlacedEstimate)
    decided_by: str = "full"
    choice: Optional[PlacedOffer] = None
    refusal: Optional[str] = None
    notes: list[str] = Field(default_factory=list)
    alternatives: list[PlacedOffer] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)  # the plan's own notes, first in reasons

    @classmethod
    def read(cls, row: Any) -> Optional[Placement]:
        """A stored decision (a dict as any orch version wrote it, or None) as a Placement."""
        if row is None or isinstance(row, Placement):
            return row
        return cls.model_validate(row)

    def to_json(self) -> dict:
        return self.model_dump(mode="json")


class Plan(Placement):
    """`orch plan --json` of one job: its placement and the fingerprint its runs share."""
    fingerprint: str = ""


class PipelinePlan(BaseModel):
    """`orch plan --json` of a pipeline: each stage placed on its own."""
    pipeline: str
    stages: list[Plan]


class GroupPlan(BaseModel):
    """`orch plan --json` of a job group: each task placed on its own, in the file's order."""
    group: str
    task_names: list[str]
    tasks: list[Plan]


class SweepPlan(BaseModel):
    """`orch plan --json` of a sweep: each run placed as it would be launched (longest first,
    each after the ones before it took their places: only `orch submit` does that), its
    values, and what the whole is planned at."""
    sweep: str
    values: list[str]
    runs: list[Plan]
    total_cost_usd: float
