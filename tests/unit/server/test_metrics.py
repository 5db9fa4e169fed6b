"""`orch serve`'s GET /metrics in-process (FastAPI's test client, no network) over a real
store: what it says of a few jobs, exactly, and who may read it."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import serve_settings, store_at
from tests.unit.decision.test_job_ledger import owned_record

METRICS_TOKEN = "m" * 40
GiB = 2.0**30


@pytest.fixture
def api(tmp_path, monkeypatch):
    """The app with its scheduler stopped, alice's API token and the metrics token, and a
    store with: a finished local job, a failed cloud job billed 3 USD, a local job running
    on two GPUs for an hour with its workers' device points, and one job in the queue."""
    from fastapi.testclient import TestClient

    from orchestrator.server.app import create_app
    from orchestrator.server.scheduler import Scheduler

    settings, token = serve_settings(tmp_path, monkeypatch, metrics_token=METRICS_TOKEN,
                                     monthly_budget=20.0)
    now = time.time()
    store = store_at(settings.home)
    decision = owned_record()["decision"]
    done = store.create_job(name="done", spec={"run": "true"}, kind="exploratory", target="local",
                            fingerprint=None, decision=decision)
    store.update(done.id, info={"backend_start": now - 7260, "backend_end": now - 60})
    store.set_status(done.id, "SUCCEEDED", "done")
    cloud = owned_record()["decision"]
    cloud["choice"] = {"target": "cloud", "cloud": "runpod", "gpu": "H100", "count": 1,
                       "price_per_hour_usd": 2.0}
    burst = store.create_job(name="burst", spec={"run": "true"}, kind="steady", target="cloud",
                             fingerprint=None, decision=cloud)
    store.update(burst.id, info={"ledger": {"cost_usd": 3.0, "billed_hours": 1.5}})
    store.set_status(burst.id, "FAILED", "preempted")
    decision = owned_record()["decision"]
    decision["choice"]["count"] = 2
    run = store.create_job(name="bert", kind="steady", target="local", fingerprint=None,
                           decision=decision, spec={"train": {"job": "image-classification"},
                                                    "scaling": {"num_workers": 2, "use_gpu": True}})
    store.update(run.id, backend_id=run.id, info={"backend_start": now - 3600})
    store.set_status(run.id, "RUNNING", "running", metrics={
        "samples_per_sec": 812.5, "device_now": {
            "0": {"since_s": 60.0, "util": 80.0, "mem_gb": 20.0, "power_w": 250.0, "source": "nvml"},
            "1": {"since_s": 60.0, "util": 60.0, "mem_gb": 18.5, "power_w": 210.0, "source": "nvml"}}})
    store.create_job(name="waits", spec={"run": "true"}, kind="exploratory", target="local",
                     fingerprint=None, owner="alice", info={"queued": True})
    store.close()
    with TestClient(create_app(settings, Scheduler(settings), run_scheduler=False)) as client:
        client.token, client.ids = token, {"done": done.id, "run": run.id}
        yield client


def _get(api, path: str = "/metrics", token: str | None = METRICS_TOKEN, **kw):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return api.get(path, headers=headers, **kw)


def _samples(text: str) -> dict:
    """(name, sorted labels) -> value, for every sample the text holds."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _key(metric: str, /, **labels: str) -> tuple:
    return metric, tuple(sorted(labels.items()))


def test_metrics_say_what_the_store_holds(api):
    r = _get(api)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    text, got = r.text, _samples(r.text)
    run = api.ids["run"]
    job = {"job_id": run, "kind": "steady", "name": "bert", "target": "local"}
    assert 'orch_jobs{kind="exploratory",state="SUCCEEDED",target="local"} 1.0' in text.splitlines()
    assert {k[1]: v for k, v in got.items() if k[0] == "orch_jobs"} == {
        (("kind", "exploratory"), ("state", "SUCCEEDED"), ("target", "local")): 1.0,
        (("kind", "steady"), ("state", "FAILED"), ("target", "cloud")): 1.0,
        (("kind", "steady"), ("state", "RUNNING"), ("target", "local")): 1.0,
        (("kind", "exploratory"), ("state", "PENDING"), ("target", "local")): 1.0}
    assert got["orch_queue_length", (("target", "local"),)] == 1.0
    assert got["orch_queue_length", (("target", "cloud"),)] == 0.0
    assert 0 <= got["orch_queue_oldest_wait_seconds", (("target", "local"),)] < 60
    # The month: the cloud bill; owned power 0.2 (2 h done) + 0.1 (1 h running so far), and
    # the owned hardware's purchase 0.8 + 0.4: never free, but not cash.
    assert got["orch_month_spend_usd", (("part", "cloud"),)] == pytest.approx(3.0)
    assert got["orch_month_spend_usd", (("part", "owned_power"),)] == pytest.approx(0.3, abs=1e-3)
    assert got["orch_month_spend_usd", (("part", "owned_amortized"),)] == pytest.approx(1.2, abs=1e-3)
    assert got["orch_month_budget_spend_usd", (("basis", "cash"),)] == pytest.approx(3.3, abs=1e-3)
    assert got["orch_monthly_budget_usd", (("basis", "cash"),)] == 20.0
    # The running job, per worker and in all.
    assert got[_key("orch_job_device_utilization_ratio", **job, rank="0", source="nvml")] == 0.8
    assert got[_key("orch_job_device_utilization_ratio", **job, rank="1", source="nvml")] == 0.6
    assert got[_key("orch_job_device_memory_bytes", **job, rank="1", source="nvml")] == 18.5 * GiB
    assert got[_key("orch_job_device_power_watts", **job, rank="0")] == 250.0
    assert got[_key("orch_job_samples_per_second", **job)] == 812.5
    assert got[_key("orch_job_cost_so_far_usd", **job)] == pytest.approx(0.5, abs=1e-3)
    assert got[_key("orch_job_cash_so_far_usd", **job)] == pytest.approx(0.1, abs=1e-3)
    assert got[_key("orch_job_gpus", **job)] == 2.0
    assert got["orch_owned_gpus_in_use", (("target", "local"),)] == 2.0
    assert got["orch_owned_gpus_in_use", (("target", "onprem"),)] == 0.0
    assert got["orch_owned_gpu_utilization_ratio", (("target", "local"),)] == pytest.approx(0.7)
    # Per-job series are the running job's alone.
    assert api.ids["done"] not in text
    assert {dict(k[1])["job_id"] for k in got if k[0].startswith("orch_job_")} == {run}


def test_metrics_take_the_metrics_token_or_an_api_token_in_the_header_only(api):
    for token in (None, "orch_nope", METRICS_TOKEN[:-1]):
        r = _get(api, token=token)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", token
        assert set(r.json()) == {"error", "hint"}
    assert "metrics_token" in _get(api, token=None).json()["hint"]
    # Never a token in the URL, in any spelling a client may try.
    for query in ({"token": METRICS_TOKEN}, {"access_token": api.token}):
        assert _get(api, token=None, params=query).status_code == 401
    assert _get(api, token=api.token).status_code == 200  # alice's API token
    # The metrics token reads /metrics and nothing else.
    assert _get(api, "/v1/jobs").status_code == 401
    assert _get(api, "/v1/summary").status_code == 401
