"""`orch serve` places a queued exploratory job again once its expected start has passed.

An exploratory job queues for owned GPUs only when they are expected to free soon: its
decision's wait (from the running jobs' estimates with their measured error) keeps it
within its deadline and the wait goal (decision/placement_rules.py). When that moment
passes and it still waits (a run outlived its estimate), the promise is broken: it is
planned again as a new submit would be, and its record takes the new placement (the
cloud, or the owned GPUs with a new expected start) in one store transaction
(`Store.replace_queued`). The simulator does the same (simulate/engine.py, RECHECK_H).
"""

from __future__ import annotations

import logging
import math
from typing import Mapping, Optional

from orchestrator.base.errors import OrchError
from orchestrator.base.targets import owned
from orchestrator.records import JobRow, iso
from orchestrator.service import placing
from orchestrator.service.core import Core
from orchestrator.service.respec import spec_from_record

log = logging.getLogger("orch.serve")

RECHECK_S = 60.0  # a queued job is placed again this long after its expected start passed


def expected_start(rec: JobRow) -> Optional[float]:
    """When a queued job placed on owned GPUs was expected to start (epoch s): when it was
    placed plus its decision's wait; None when it has no finite one."""
    choice = rec.choice
    if choice is None or not math.isfinite(choice.wait_minutes):
        return None
    return (rec.info.placed_at or rec.created_at) + choice.wait_minutes * 60.0


def late(rec: JobRow, now: float) -> bool:
    """A queued exploratory job on owned GPUs, nobody launching it, past its expected start."""
    start = expected_start(rec)
    return (rec.kind == "exploratory" and owned(rec.target) and rec.info.queued
            and rec.info.launcher is None and rec.backend_id is None and start is not None
            and now > start + RECHECK_S)


def replace_late(core: Core, now: float, specs: Mapping = {}) -> list[str]:
    """Place each late queued job (`late`) again; the ids whose target changed. `specs`:
    the specs a server holds for its queued jobs (given secrets included), by id; the
    others are read back from their records."""
    moved = []
    for rec in core.store.queued():
        if not late(rec, now):
            continue
        try:
            spec = specs.get(rec.id) or spec_from_record(rec)
            planned = placing.decided(core, spec, rec.fingerprint or "", False, rec.owner)
            decision = placing.placement(spec, planned)
        except OrchError as e:  # no place now: it keeps waiting where it is
            log.info("%s: not placed again (%s); it keeps waiting", rec.id, e.message)
            continue
        was = expected_start(rec) or now
        choice = decision.choice
        if choice is None:
            continue
        if decision.target != rec.target:
            message = (f"placed again on {choice.where()} ({choice.device()}): its expected "
                       f"start on {rec.target} ({iso(was)}) passed; `orch status` shows why")
        else:
            message = (f"still waiting for {rec.target}: its expected start ({iso(was)}) passed, "
                       f"and it is still the team's best choice (now about "
                       f"{choice.wait_minutes:.0f} min)")
        if core.store.replace_queued(rec.id, decision, rec.target, message):
            log.info("%s: %s", rec.id, message)
            if decision.target != rec.target:
                moved.append(rec.id)
    return moved
