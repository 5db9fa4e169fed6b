"""A job whose stored metrics an older orch (or a forged line) wrote in another shape: the
status page's summary and `orch status ID` still answer (they raised AttributeError)."""

from __future__ import annotations

import sys

import pytest

OLD = {"verdict": "old-string", "telemetry": [1], "failure": "x", "loss": 0.5}


def _old_job(store) -> str:
    rec = store.create_job(name="old", spec={"run": "true"}, kind="exploratory", target="local",
                           fingerprint="fp", owner="alice")
    store.set_status(rec.id, "SUCCEEDED", "ok", metrics=OLD)
    return rec.id


def test_the_summary_answers_for_a_job_with_old_metrics(api):
    job_id = _old_job(api.store)
    got = api("GET", "/v1/summary", "root")
    assert got.status_code == 200, got.text
    job = next(j for j in got.json()["jobs"] if j["id"] == job_id)
    assert job["verdict"] is None and job["advice"] == []
    shown = api("GET", f"/v1/jobs/{job_id}", "root").json()["metrics"]
    assert shown == OLD  # shown as stored; read as no verdict, no telemetry, no failure


def test_orch_status_of_a_job_with_old_metrics_prints_it(settings, monkeypatch, capsys):
    from orchestrator.cli import main
    from tests.conftest import store_at

    job_id = _old_job(store_at(settings.home))
    monkeypatch.setenv("ORCH_HOME", str(settings.home))
    monkeypatch.setenv("ORCH_CONFIG", str(settings.home / "config.toml"))
    monkeypatch.setenv("ORCH_MODE", "local")
    monkeypatch.setattr(sys, "argv", ["orch", "status", job_id])
    with pytest.raises(SystemExit) as exit_:
        main()
    got = capsys.readouterr()
    assert exit_.value.code == 0, got.err
    assert "loss 0.5000" in got.out and "history" in got.out
