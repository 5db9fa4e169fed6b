"""The I/O around one placement decision: gather offers and history, classify, decide.

No Ray and no SkyPilot API server: cloud prices come from catalog files on disk, the
on-prem offer from the settings, the local one from nvidia-smi and the CPU count.
"""

from __future__ import annotations

import time
from typing import Optional, Sequence

from orchestrator.decision.classify import classify
from orchestrator.decision.cost import HoursEstimator, onprem_offer
from orchestrator.decision.models import Capacity, Decision, Offer, PastRun
from orchestrator.decision.placement import decide


def gather_offers(spec, settings, local: Optional[Sequence[Offer]] = None) -> list[Offer]:
    """Every offer worth pricing. Catalogs are read only when the job may go to a cloud,
    so a local-only plan never needs them."""
    from providers.local_offer import local_offers

    offers: list[Offer] = []
    if settings.effective_mode != "local" and settings.clouds and "cloud" in spec.placement.allow:
        from providers.catalog import cloud_offers

        offers.extend(cloud_offers(settings.clouds, settings.catalog_dir))
    offers.extend(onprem_offer(inv, settings.electricity_price) for inv in settings.onprem)
    offers.extend(local_offers(settings) if local is None else local)
    return offers


def plan_job(spec, settings, *, fingerprint: str, history: Sequence[PastRun] = (),
             code_dirty: bool = False, capacity: Optional[Capacity] = None,
             offers: Optional[Sequence[Offer]] = None, now: Optional[float] = None) -> Decision:
    """Classify the job and decide where it runs; `offers=None` gathers them."""
    history = [h if isinstance(h, PastRun) else PastRun.from_record(h) for h in history]
    est = HoursEstimator(spec, fingerprint, history, settings.default_job_hours, settings.gpu_speeds)
    kind = classify(spec, fingerprint, history, time.time() if now is None else now, settings,
                    code_dirty, est.reference.hours)
    if offers is None:
        offers = gather_offers(spec, settings)
    return decide(spec, kind, offers, capacity, settings, estimator=est)


def history_for(fingerprint: str, settings) -> list[PastRun]:
    """Past runs of this fingerprint from the job store; none before the store exists."""
    path = settings.home / "orch.db"
    if not path.exists():
        return []  # planning must not create the store
    from orchestrator.store import Store

    store = Store(path)
    try:
        return [PastRun.from_record(r) for r in store.runs_for_fingerprint(fingerprint)]
    finally:
        store.close()
