"""Owned GPUs promised to steady work soon: cron schedules due, as placement's reservations. No I/O."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Optional

from orchestrator.base.targets import CLOUD
from orchestrator.decision.demand import job_demand
from orchestrator.decision.models import Reservation
from orchestrator.records.schedule import ScheduleRow
from orchestrator.records.stored_spec import StoredSpec


def _first_accelerator(spec: StoredSpec) -> Optional[str]:
    """The model of the first accelerator a stored job file names ('H100:8', {H100: 8},
    ['H100:8', ...]); None when it names none."""
    acc: Any = spec.resources.accelerators
    if isinstance(acc, Mapping):
        acc = next(iter(acc), None)
    elif isinstance(acc, (list, tuple, set)):
        acc = next(iter(sorted(acc) if isinstance(acc, set) else acc), None)
    if not isinstance(acc, str) or not acc.strip():
        return None
    return acc.split(":")[0].strip() or None


def schedule_reservations(schedules: Iterable[ScheduleRow], now: float, horizon_h: float,
                          default_slack_h: float) -> tuple[Reservation, ...]:
    """A reservation for every schedule that is not paused and is due within `horizon_h`:
    what its job holds (decision.demand), on the GPU model its job file names first, with
    the slack its `schedule.deadline_hours` leaves after its `estimate.hours` (else
    `default_slack_h`, what steady work may wait: max_wait_minutes), and an infinite cloud
    cost where its `placement.allow` leaves out the cloud. Schedules whose jobs hold no GPU
    reserve nothing."""
    out = []
    for s in schedules:
        next_at = s.next_at
        if s.paused or next_at is None or not now <= next_at <= now + horizon_h * 3600:
            continue
        need = job_demand(s.spec)
        if need.gpus <= 0:
            continue
        spec = StoredSpec.read(s.spec)
        hours, deadline = spec.estimate.hours, spec.schedule.deadline_hours
        slack = (max(0.0, deadline - hours) if deadline is not None and hours is not None
                 else default_slack_h)
        allow = spec.placement.allow
        stays = isinstance(allow, (list, tuple)) and CLOUD not in allow  # may not rent
        out.append(Reservation(in_hours=(next_at - now) / 3600.0, gpus=need.gpus,
                               gpu=_first_accelerator(spec),
                               what=f"cron schedule '{s.name}'", slack_hours=slack,
                               cloud_cost=math.inf if stays else None))
    return tuple(sorted(out, key=lambda r: r.in_hours))
