"""What a backend is told when a plan asks it for its offers (each backend folder's
offers.py, asked through providers/registry.py): the shape of that question, defined once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Collection, Optional, Union

from orchestrator.base.errors import BackendError

if TYPE_CHECKING:
    from orchestrator.decision.models import Offer
    from orchestrator.settings import Settings
    from orchestrator.spec import JobSpec
    from providers.ray_cluster import ClusterSnapshot


@dataclass(frozen=True)
class Seen:
    """What a plan already knows when it asks each backend for its offers."""

    # The read of a backend with a fixed size that the plan made (registry.read_capacity:
    # a ClusterSnapshot, or the BackendError), None when it made none.
    cluster: Union[ClusterSnapshot, BackendError, None] = None
    enabled: Optional[Collection[str]] = None  # the clouds with credentials here, when checked
    server_keeps_jobs_off: bool = False  # `orch serve` runs no job on its own machine


# A backend's offers for a job: what it can run it on, priced; [] where the job may not go
# there or the backend is not configured.
OffersOf = Callable[["JobSpec", "Settings", Seen], "list[Offer]"]
