"""A stored job file (`JobRow.spec`, `ScheduleRow.spec`) as the decision core reads it: typed.

The store keeps a job file as the dict `JobSpec` dumped (redacted) when it was submitted, by
whichever orch version that was; the service rebuilds a `JobSpec` from it to run it again.
What placement, the ledger and the budget read of it is `StoredSpec.read(spec)`: the few
sections they need, read leniently (a value that does not fit is read as unset, never a
crash), every other key ignored.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field, StrictStr

from orchestrator.records.metrics import Kept, Num


class EstimateHint(Kept):
    """`estimate:` what the job file says it will take."""
    hours: Optional[Num] = None
    gpu: Optional[StrictStr] = None


class ScheduleHint(Kept):
    """`schedule:` its cron and how long a run may take to finish."""
    cron: Optional[StrictStr] = None
    deadline_hours: Optional[Num] = None


class PlacementHint(Kept):
    """`placement:` the targets it allows (None: any)."""
    allow: Optional[list[StrictStr]] = None


class BudgetHint(Kept):
    """`budget:` its own cost cap."""
    max_cost: Optional[Num] = None


class ResourcesHint(Kept):
    """`resources:` its accelerators as written ('H100:8', {H100: 8}, ['H100:8', ...])."""
    accelerators: Any = None


class StoredSpec(Kept):
    """What orch's decisions read of a stored job file."""
    name: Optional[StrictStr] = None
    train: Any = None  # a `train:` section: orch's runner runs it
    run: Any = None
    # Made for each read, not copied from one instance (pydantic deep-copies a model given
    # as a default: five copies a row were 38% of reading a plan's 2,000 past runs).
    estimate: EstimateHint = Field(default_factory=EstimateHint)
    schedule: ScheduleHint = Field(default_factory=ScheduleHint)
    placement: PlacementHint = Field(default_factory=PlacementHint)
    budget: BudgetHint = Field(default_factory=BudgetHint)
    resources: ResourcesHint = Field(default_factory=ResourcesHint)

    @classmethod
    def read(cls, spec: Any) -> StoredSpec:
        """A stored job file (a dict, or None) as its typed view; a section that is null or
        no mapping reads as empty."""
        if not isinstance(spec, dict):
            return cls()
        return cls.model_validate({k: v for k, v in spec.items() if v is not None})
