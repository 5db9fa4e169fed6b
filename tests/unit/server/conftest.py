"""What the server's unit tests share: settings on a fresh home, and the API in-process
(FastAPI's test client, no network) with three tokens."""

from __future__ import annotations

import os

import pytest

from orchestrator.server import auth
from orchestrator.server.scheduler import Scheduler
from orchestrator.settings import Settings
from tests.conftest import store_at


@pytest.fixture
def settings(tmp_path, monkeypatch):
    for k in list(os.environ):
        if k.startswith("ORCH_") and k != "ORCH_DATABASE_URL":  # the PostgreSQL pass's schema
            monkeypatch.delenv(k)
    return Settings(home=tmp_path / "home", mode="local", serve_local_trusted=True)


@pytest.fixture
def api(settings, job_store):
    """The app with its scheduler stopped, a store with three tokens, and a request helper."""
    from fastapi.testclient import TestClient

    from orchestrator.server.app import create_app

    store = store_at(settings.home)
    assert (store.url is None) == (job_store is None)  # the PostgreSQL pass is on PostgreSQL
    tokens = {}
    for name, admin in (("alice", False), ("bob", False), ("root", True)):
        tokens[name], digest = auth.new_token()
        store.add_token(name, digest, admin=admin)
    sched = Scheduler(settings)
    with TestClient(create_app(settings, sched, run_scheduler=False)) as client:
        def call(method, path, who=None, **kw):
            headers = kw.pop("headers", {})
            if who:
                headers["Authorization"] = f"Bearer {tokens[who]}"
            return client.request(method, path, headers=headers, **kw)
        call.store, call.sched, call.tokens = store, sched, tokens
        yield call
