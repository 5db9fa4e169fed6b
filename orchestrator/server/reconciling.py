"""The scheduler's step 2: every unfinished job kept in step with its backend, each on its own
(a failure, whatever its cause, costs that job's check alone), and which replica does it for a
job whose secret values one replica holds."""

from __future__ import annotations

import logging
from typing import Optional

from orchestrator.base.errors import OrchError
from orchestrator.records import JobRow
from orchestrator.server.replicas import launcher_alive
from orchestrator.service.orch import Orch

log = logging.getLogger("orch.serve")


def reconcile(orch: Orch, only: Optional[set] = None) -> None:
    """Refresh each PENDING or RUNNING job (those in `only`, where given)."""
    for rec in orch.unfinished():
        if only is None or rec.id in only:
            refresh_one(orch, rec)


def refresh_one(orch: Orch, rec: JobRow) -> None:
    try:
        orch.refresh(rec)
    except OrchError as e:  # its history says so; tried again next period
        log.warning("%s: cannot check it with its backend: %s", rec.id, e.message)
    except Exception:  # a bug this job's record or output meets: it alone waits
        log.exception("%s: checking it failed; the other jobs go on", rec.id)


def values_elsewhere(me: str, held: dict, orch: Orch, rec: JobRow) -> bool:
    """Whether another live replica holds this job's given secret values (it was sent there,
    and launched it): that replica follows and finishes it (`Scheduler.reconcile_held`), so
    its log is kept redacted by the values, never by their digests alone while the values
    exist. Once that replica is gone, so are the values, and any replica finishes it."""
    holder = rec.info.held_by
    return bool(holder and holder != me and rec.id not in held
                and launcher_alive(holder, orch))
