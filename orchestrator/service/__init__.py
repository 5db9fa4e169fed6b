"""Service wiring: turns a spec into a recorded, launched job and keeps records in step
with the backends. The CLI calls `Orch`; it does not print.

`Orch` is one class built from one module per job, each a layer over the one before:
core (settings, store, providers, bounded backend calls), budgets, launch_spec (what a
provider runs), submitting (check, place, record, launch), following (refresh, logs,
cancel) and pipelines (stages launched in order)."""

from __future__ import annotations

from orchestrator.service.following import write_private
from orchestrator.service.pipelines import Pipelines
from orchestrator.service.processes import alive, submitter

__all__ = ["Orch", "alive", "submitter", "write_private"]


class Orch(Pipelines):
    """orch on this machine's store and backends: submit, follow, cancel and price jobs."""
