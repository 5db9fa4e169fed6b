"""The PostgreSQL connection of the job store, now orchestrator/store/pg.py: this import path stays."""

from orchestrator.store.pg import HINT, LOCK_KEY, PgConnection, PgCursor

__all__ = ["HINT", "LOCK_KEY", "PgConnection", "PgCursor"]
