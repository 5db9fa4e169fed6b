"""What this machine offers a job: one offer per GPU model nvidia-smi reports and one for
its CPU (orchestrator/offers/local.py), unless `orch serve` keeps jobs off it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.decision.models import Offer

if TYPE_CHECKING:
    from orchestrator.settings import Settings
    from orchestrator.spec import JobSpec
    from providers.offering import Seen


def offers(spec: JobSpec, settings: Settings, seen: Seen) -> list[Offer]:
    if seen.server_keeps_jobs_off:
        return []
    from orchestrator.offers.local import local_offers

    return local_offers(settings)
