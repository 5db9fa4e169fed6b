"""What `orch simulate` answers (`orchestrator.simulate.run.simulate`, `--json`), typed for
the CLI that renders and plots it. Keys the simulator adds are kept, unread."""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, field_validator

Num = Union[int, float]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class PolicyResult(_Answer):
    """One policy's run over the trace (or the oracle's lower bound). Money in USD."""
    name: str
    cash_total: float
    ownership: float = 0.0
    power: float = 0.0
    cloud_spend: float = 0.0
    chargeback_total: float = 0.0
    exploratory_p95_wait_h: Optional[float] = None
    steady_p95_wait_h: Optional[float] = None
    deadline_misses: Num = 0
    deadline_miss_rate: float = 0.0
    onprem_utilization: Optional[float] = None
    jobs_by_target: dict[str, Num] = {}
    daily_cash: list[float] = []
    bound: Optional[dict[str, Any]] = None  # the oracle's: oracle.bound_line reads it

    @property
    def unplaced(self) -> Num:
        return self.jobs_by_target.get("unplaced", 0)


class SimulationChecks(_Answer):
    """orch's figures against the goals the simulator checks."""
    orch_over_oracle: Optional[float] = None
    ratio_goal: float = 0.0
    ratio_met: bool = False
    orch_power_cloud_over_bound: Optional[float] = None
    power_cloud_goal: float = 0.0
    power_cloud_met: bool = False
    orch_power_cloud_over_online: Optional[float] = None
    online_goal: float = 0.0
    online_met: bool = False
    not_comparable: dict[str, str] = {}
    cheaper_than_every_baseline: bool = False
    baselines_not_beaten: list[str] = []
    orch_miss_rate: float = 0.0
    miss_goal: float = 0.0
    miss_met: bool = False
    orch_exploratory_p95_wait_h: Optional[float] = None
    wait_goal_h: float = 0.0
    wait_met: bool = False


class SimulationResult(_Answer):
    """A trace replayed under each policy: their rows, and the checks on orch's."""
    trace: str = ""
    jobs: int = 0
    days: Num = 0
    scenario: str = ""
    currency: str = "USD"
    currency_rate: float = 1.0
    spot_preemptions_per_hour: float = 0.0
    believed_spot_preemptions_per_hour: Optional[float] = None
    beliefs: Optional[str] = None
    learning_cost: Optional[float] = None
    policies: list[PolicyResult] = []
    checks: Optional[SimulationChecks] = None
    notes: list[str] = []
    wall_s: Optional[float] = None

    @field_validator("checks", mode="before")
    @classmethod
    def _none_when_empty(cls, v: Any) -> Any:
        return v or None  # {}: no orch row to check

    def policy(self, name: str) -> Optional[PolicyResult]:
        return next((p for p in self.policies if p.name == name), None)
