"""`python -m orchestrator` is the same as `orch`."""

from orchestrator.cli import run

run()
