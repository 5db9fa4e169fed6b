"""orch: a hybrid cloud/local GPU job orchestrator."""

__version__ = "0.1.0"
