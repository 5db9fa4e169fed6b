"""What the cloud offers a job: every priced GPU of the enabled clouds' catalogs, read from
disk (orchestrator/offers/catalog.py), when the job may go to a cloud."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from orchestrator.base.targets import CLOUD
from orchestrator.decision.models import Offer

if TYPE_CHECKING:
    from orchestrator.settings import Settings
    from orchestrator.spec import JobSpec
    from providers.offering import Seen


def offers(spec: JobSpec, settings: Settings, seen: Seen) -> list[Offer]:
    """The catalogs are read only when the job may go to a cloud, so a local-only plan never
    needs them; each offer says whether its cloud has credentials here when that was checked."""
    if settings.effective_mode == "local" or not settings.clouds or CLOUD not in spec.placement.allow:
        return []
    from orchestrator.offers.catalog import cloud_offers

    rented = cloud_offers(settings.clouds, settings.catalog_dir)
    if seen.enabled is not None:
        rented = [dataclasses.replace(o, credentials=o.cloud in seen.enabled) for o in rented]
    return rented
