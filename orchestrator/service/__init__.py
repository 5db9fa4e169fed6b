"""Service wiring: turns a spec into a recorded, launched job and keeps records in step
with the backends. The CLI calls `Orch`; it does not print.

`Orch` is one class built from one module per job, each a layer over the one before:
core (settings, store, providers, bounded backend calls), budgets, launch_spec (what a
provider runs), submitting (check, place, record, launch) and following (refresh, logs,
cancel)."""

from __future__ import annotations

from orchestrator.service.following import Following, write_private
from orchestrator.service.processes import alive, submitter
from orchestrator.service.submitting import Submitting

__all__ = ["Orch", "alive", "submitter", "write_private"]


class Orch(Submitting, Following):
    """orch on this machine's store and backends: submit, follow, cancel and price jobs."""
