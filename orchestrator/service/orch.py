"""`Orch`: the job service on this machine's store and backends. The CLI calls it; it does
not print."""

from __future__ import annotations

from orchestrator.service.pipelines import Pipelines


class Orch(Pipelines):
    """orch on this machine's store and backends: submit, follow, cancel and price jobs."""
