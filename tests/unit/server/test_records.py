"""A job's public record: one model for `orch status --json`, the REST API and its schema;
what orch keeps for itself in a job's `info` never reaches any of them."""

from __future__ import annotations

import json
import os
import sys

import pytest

from orchestrator.records import (
    INTERNAL_INFO,
    CancelledJob,
    JobDetail,
    JobInfo,
    JobRecord,
    RunInfo,
    SubmittedJob,
)
from orchestrator.server import auth
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from tests.conftest import store_at
from tests.unit.providers.test_cloud import JOB, T0, orch, statuses, use_fake  # noqa: F401 (fixture)

SALT_AND_DIGESTS = {"secret_salt": "5a17", "secret_hmacs": ["ab" * 32],
                    "secret_digests": ["cd" * 32], "secret_lengths": [4242], "secret_heads": ["a1b2c3"],
                    "event_key": "ef" * 32}
LEDGER = {"launches": [{"cloud": "runpod", "started_at": T0, "ended_at": T0 + 60}],
          "billed_hours": 0.1, "cost_usd": 0.2, "recoveries": 0}


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A store with one ended cloud job whose info holds every public and internal key."""
    for k in list(os.environ):
        if k.startswith(("ORCH_", "RAY_")) and k != "ORCH_DATABASE_URL":  # the PostgreSQL pass's
            monkeypatch.delenv(k)
    home = tmp_path / "home"
    store = store_at(home)
    token, digest = auth.new_token()
    store.add_token("alice", digest)
    info = {"submitter": {"pid": 4242, "host": "h", "started": 1.0}, "launcher": "srv/1/1.0",
            "held_by": "srv/2/2.0",
            "env_secrets": ["WANDB_API_KEY"], "offers": [{"cloud": "runpod"}],
            "budget_stop": None, **SALT_AND_DIGESTS, "upload": "e" * 64, "schedule": "sched-1",
            "slot": "2027-01-15T08:00:00Z", "entrypoint": "python -m jobs.runner",
            "storage_path": "/ckpt", "run_name": "r1", "backend_start": T0,
            "backend_end": T0 + 60, "sky_request_id": "req-1", "sky_status": "SUCCEEDED",
            "sky_job_id": 3, "infra": "runpod/US", "ledger": LEDGER, "cost": {"cost_usd": 0.2},
            "launched_at": T0 - 2, "placed_at": T0 - 3, "pipeline": "prep-train", "stage": 2, "stages": 2,
            "after": "orch-prev", "preemptions": 1, "earlier_runs": ["orch-sky-0"],
            "sweep": "sweep-1", "sweep_name": "lr", "sweep_run": 2, "sweep_runs": 3,
            "sweep_values": "lr=0.1", "sweep_metric": "loss", "sweep_mode": "min",
            "group": "pair", "task": "server", "primary": False, "termination_delay_s": 5.0,
            "group_jobs": {"server": "orch-a", "client": "orch-b"}}
    assert set(info) == set(RunInfo.model_fields) - {"queued"} | set(INTERNAL_INFO)
    rec = store.create_job(name="j", spec={"run": "echo"}, kind="exploratory", target="cloud",
                           fingerprint="fp", owner="alice", idempotency_key="api:alice:k-77",
                           info=info)
    store.update(rec.id, backend_id="orch-sky-1")
    store.set_status(rec.id, "SUCCEEDED", "done", metrics={"loss": 0.1})
    store.close()
    return home, token, rec.id


def _cli(monkeypatch, capsys, home, *args) -> object:
    from orchestrator.cli import main

    monkeypatch.setenv("ORCH_HOME", str(home))
    monkeypatch.setenv("ORCH_CONFIG", str(home / "config.toml"))
    monkeypatch.setenv("ORCH_MODE", "local")
    monkeypatch.setattr(sys, "argv", ["orch", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    got = capsys.readouterr()
    assert exit_.value.code == 0, got.err
    return json.loads(got.out)


def _api(home):
    from fastapi.testclient import TestClient

    from orchestrator.server.app import create_app
    from orchestrator.server.scheduler import Scheduler

    settings = Settings(home=home, mode="local")
    return TestClient(create_app(settings, Scheduler(settings), run_scheduler=False))


def _no_internal(text: str) -> None:
    for word in (*INTERNAL_INFO, "4242", "k-77", "ab" * 32, "cd" * 32, "ef" * 32, "idempotency"):
        assert word not in text, word


def test_status_json_the_api_and_the_model_have_the_same_fields(home, monkeypatch, capsys):
    home, token, job = home
    listed = _cli(monkeypatch, capsys, home, "status", "--json")
    one = _cli(monkeypatch, capsys, home, "status", job, "--json")
    with _api(home) as client:
        auth_ = {"Authorization": f"Bearer {token}"}
        api_listed = client.get("/v1/jobs", headers=auth_).json()
        api_one = client.get(f"/v1/jobs/{job}", headers=auth_).json()
        cancelled = client.post(f"/v1/jobs/{job}/cancel", headers=auth_).json()
    assert set(listed[0]) == set(JobRecord.model_fields) == set(api_listed[0])
    assert set(one) == set(JobDetail.model_fields) == set(api_one)
    assert set(cancelled) == set(CancelledJob.model_fields) and cancelled["already_ended"]
    assert set(JobDetail.model_fields) - set(JobRecord.model_fields) == {"history", "warning"}
    assert set(SubmittedJob.model_fields) - set(JobRecord.model_fields) == {"existing"}
    for shown in (listed[0], one, api_listed[0], api_one, cancelled):
        assert set(shown["run"]) == set(RunInfo.model_fields)
        _no_internal(json.dumps(shown))
    assert listed == api_listed and one == api_one
    run = one["run"]
    assert (run["run_name"], run["upload"], run["sky_job_id"], run["queued"]) == (
        "r1", "e" * 64, 3, False)
    assert one["cost"] == {"usd": 0.2, "billed_hours": 0.1, "recoveries": 0,
                           "launches": LEDGER["launches"]}
    assert [h["status"] for h in one["history"]] == ["PENDING", "SUCCEEDED"]


def test_the_api_schema_is_the_model(tmp_path):
    from orchestrator.server.app import create_app

    schema = create_app(Settings(home=tmp_path, mode="local"), run_scheduler=False).openapi()
    ok = lambda path, method: schema["paths"][path][method]["responses"]  # noqa: E731
    assert ok("/v1/jobs", "get")["200"]["content"]["application/json"]["schema"] == {
        "type": "array", "items": {"$ref": "#/components/schemas/JobRecord"},
        "title": "Response Jobs V1 Jobs Get"}
    detail = ok("/v1/jobs/{job_id}", "get")["200"]["content"]["application/json"]["schema"]
    assert detail == {"$ref": "#/components/schemas/JobDetail"}
    models = schema["components"]["schemas"]
    assert set(models["JobRecord"]["properties"]) == set(JobRecord.model_fields)
    assert set(models["RunInfo"]["properties"]) == set(RunInfo.model_fields)
    assert models["JobRecord"]["additionalProperties"] is False


def test_every_info_key_a_job_gets_is_public_or_named_internal(orch, monkeypatch):  # noqa: F811
    """A cloud job from submit to its end, with secrets, and a job queued by `orch serve`:
    a key that appears in `info` and is neither in RunInfo nor INTERNAL_INFO fails here."""
    from orchestrator.server.scheduler import queue_info

    monkeypatch.setenv("DB_PASSWORD", "correct-horse-battery-staple")
    spec = load_spec_text(JOB.format(accel="H100:1") + "envs: {HF_TOKEN: hf_Zq8pLr2mXv9sKt4w}\n"
                          "secrets: {DB_PASSWORD: null}\n", "explore.yaml")
    use_fake(orch, [{"status": "RUNNING", "start_at": T0},
                    {"status": "SUCCEEDED", "start_at": T0, "end_at": T0 + 60}])
    rec = orch.submit(spec).rec
    rec, seen = statuses(orch, rec, 2)
    assert seen == ["RUNNING", "SUCCEEDED"]
    known = set(RunInfo.model_fields) | set(INTERNAL_INFO)
    assert known == set(JobInfo.model_fields)  # one definition: the typed model
    assert isinstance(rec.info, JobInfo)  # the stored info reads back as the typed model
    stored = set(rec.info.model_dump(exclude_unset=True))  # the keys the store holds
    assert {"secret_hmacs", "ledger", "cost", "sky_status", "launched_at"} <= stored
    assert stored <= known, stored - known
    queued = {**queue_info(spec, upload="e" * 64, schedule="s", slot="t"), "launcher": "me"}
    assert set(queued) <= known, set(queued) - known
    shown = json.dumps(JobRecord.from_row(rec).to_json())
    for digest in (rec.info.secret_salt, *rec.info.secret_hmacs):
        assert digest not in shown
