"""What the toy backend offers a job: this machine's CPU, rented by the hour."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.decision.models import Offer

if TYPE_CHECKING:
    from orchestrator.settings import Settings
    from orchestrator.spec import JobSpec
    from providers.offering import Seen


def offers(spec: JobSpec, settings: Settings, seen: Seen) -> list[Offer]:
    return [Offer(target="toy", gpu=None, count=0, price_per_hour=0.01, cpus=2.0, memory_gb=4.0)]
