"""What the store's tests share."""

from __future__ import annotations

import pytest


@pytest.fixture
def pg(job_store):
    """This test's PostgreSQL store URL (a schema of its own); a skip on SQLite."""
    if job_store is None:
        pytest.skip("needs PostgreSQL: runs with --store both (make test) or --store postgresql")
    return job_store
