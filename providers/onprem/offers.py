"""What the on-prem cluster offers a job: the [[onprem]] inventory's GPUs, priced in full;
without one, the cluster's own nodes as the plan read them, at power only
(decision/cluster_offers.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.base.errors import BackendError
from orchestrator.decision.models import Offer
from orchestrator.decision.pricing import onprem_offer

if TYPE_CHECKING:
    from orchestrator.settings import Settings
    from orchestrator.spec import JobSpec
    from providers.offering import Seen


def offers(spec: JobSpec, settings: Settings, seen: Seen) -> list[Offer]:
    if settings.onprem:
        return [onprem_offer(inv, settings.electricity_price) for inv in settings.onprem]
    if seen.cluster is None or isinstance(seen.cluster, BackendError):  # unread, or
        return []  # unreachable: the plan's capacity says so
    from orchestrator.decision.cluster_offers import cluster_offers

    return cluster_offers(seen.cluster.nodes, settings.electricity_price)
