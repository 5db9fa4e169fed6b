"""Service wiring without a backend: launch commands, and records reconciled after a crash."""

from __future__ import annotations

import time

from jobs.request import RunRequest
from orchestrator.records.placement import Placement
from orchestrator.service import following, submitting
from orchestrator.service.orch import Orch
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from tests.conftest import store_created


def _orch(tmp_path) -> Orch:
    return Orch(Settings(home=tmp_path / "home", mode="local"))


def test_launch_for_a_train_job(tmp_path):
    orch = _orch(tmp_path)
    spec = load_spec_text("train:\n  job: image-classification\n  config: {epochs: 2}\n"
                          "scaling: {num_workers: 2}\nenvs: {SEED: 3}\nsetup: echo hi\n")
    launch = orch.launch_for("orch-abc", spec, "local")
    run = RunRequest.from_json(launch.env["ORCH_RUN"])  # what the runner reads, checked
    assert run.num_workers == 2 and run.config == {"epochs": 2} and run.name == "orch-abc"
    assert run.storage_path == str(tmp_path / "home" / "checkpoints")
    assert run.cpus_per_worker is None  # no resources.cpus: the node's CPUs, shared
    assert launch.env["SEED"] == "3" and launch.env["ORCH_JOB_ID"] == "orch-abc"
    assert "-m _orch_runner.runner" in launch.entrypoint and launch.env["ORCH_SETUP"] == "echo hi"
    assert launch.entrypoint.startswith("bash -c ")
    assert run.use_gpu == "auto"  # no placement: the runner looks at the target itself
    # Placed: the workers use GPUs exactly when the offer priced has one for each.
    for choice, gpus in (({"gpu": "A100", "count": 2}, True), ({"gpu": "A100", "count": 1}, False),
                         ({"gpu": None, "count": 0}, False)):
        launch = orch.launch_for("orch-abc", spec, "onprem", Placement(choice=choice))
        assert RunRequest.from_json(launch.env["ORCH_RUN"]).use_gpu is gpus, choice
        assert launch.tags.gpus == (2 if gpus else 0), choice
    asked = load_spec_text("train:\n  job: image-classification\nscaling: {num_workers: 2}\n"
                           "resources: {cpus: 9+}\n")
    assert RunRequest.from_json(orch.launch_for("orch-c", asked, "local").env["ORCH_RUN"]).cpus_per_worker == 4


def test_a_jobs_utilization_policy_or_the_teams_default_reaches_the_runner(tmp_path):
    from jobs.telemetry import IdlePolicy

    def policy(orch, text):
        return RunRequest.from_json(orch.launch_for("orch-u", load_spec_text(text), "local")
                                    .env["ORCH_RUN"]).utilization_policy

    own = "train:\n  job: image-classification\nutilization_policy: {min_utilization: 5, window_minutes: 10}\n"
    plain = "train:\n  job: image-classification\n"
    assert policy(_orch(tmp_path), plain) is None
    assert policy(_orch(tmp_path), own) == IdlePolicy(5, 10, "warn")
    team = Orch(Settings(home=tmp_path / "home", mode="local",
                         utilization_policy={"min_utilization": 15, "window_minutes": 30, "action": "stop"}))
    assert policy(team, plain) == IdlePolicy(15, 30, "stop")
    assert policy(team, own) == IdlePolicy(5, 10, "warn")  # the job's own key wins


def test_a_job_whose_submit_died_before_launch_is_marked_failed(tmp_path):
    orch = _orch(tmp_path)
    rec = orch.core.store.create_job(name="j", spec={}, kind="exploratory", target="local",
                                fingerprint="f")
    assert orch.refresh(rec).status == "PENDING"  # within the grace period: maybe launching
    orch.core.store.update(rec.id, created_at=time.time() - 3600)
    rec = orch.refresh(orch.get(rec.id))
    assert rec.status == "FAILED" and "never launched" in rec.message


def test_a_running_job_whose_local_ray_is_gone_ends_failed(tmp_path):
    orch = _orch(tmp_path)
    rec = orch.core.store.create_job(name="j", spec={}, kind="exploratory", target="local",
                                fingerprint="f")
    orch.core.store.update(rec.id, backend_id=rec.id)
    orch.core.store.set_status(rec.id, "RUNNING", "running")
    rec = orch.refresh(orch.get(rec.id))
    assert rec.status == "FAILED" and "local Ray instance stopped" in rec.message
    assert [h["status"] for h in orch.core.store.history(rec.id)] == ["PENDING", "RUNNING", "FAILED"]


def test_cancel_before_launch(tmp_path):
    orch = _orch(tmp_path)
    rec = orch.core.store.create_job(name="j", spec={}, kind="exploratory", target="local",
                                fingerprint="f")
    assert following.cancel(orch.core, rec.id).status == "CANCELLED"


def test_submit_uses_the_planner_and_history_makes_a_job_steady(tmp_path, monkeypatch):
    import time

    from orchestrator.service.fingerprint import fingerprint

    orch = _orch(tmp_path)
    spec = load_spec_text("train:\n  job: image-classification\n", "nightly.yaml")
    fp, dirty = fingerprint(spec)
    first = submitting.place(orch.core, spec, fp, dirty)
    assert first.target == "local" and first.kind == "exploratory"
    assert any("local-only mode" in r for r in first.reasons)
    def run_once():
        rec = orch.core.store.create_job(name="nightly", spec={}, kind="exploratory", target="local",
                                    fingerprint=fp)
        orch.core.store.set_status(rec.id, "RUNNING")
        orch.core.store.set_status(rec.id, "SUCCEEDED")

    for _ in range(3):  # three successful runs just now: one occasion, not yet steady
        run_once()
    assert submitting.place(orch.core, spec, fp, dirty).kind == "exploratory"
    real = time.time()
    for days_ago in (2, 1):  # the same job on two more days
        with monkeypatch.context() as m:
            m.setattr(time, "time", lambda d=days_ago: real - d * 86400)
            run_once()
    again = submitting.place(orch.core, spec, fp, dirty)
    assert again.kind == "steady" and again.target == "local"
    assert any("on 3 occasions" in r for r in again.reasons)


def test_a_job_this_machine_cannot_hold_is_refused_before_recording(tmp_path):
    import pytest

    from orchestrator.base.errors import InputError

    orch = _orch(tmp_path)
    spec = load_spec_text("resources:\n  accelerators: H100:8\nrun: echo\n", "big.yaml")
    with pytest.raises(InputError, match="no place to run this job"):
        orch.submit(spec)
    assert not store_created(tmp_path / "home")


def test_scaling_efficiency_from_a_one_worker_run(tmp_path):
    orch = _orch(tmp_path)
    one = orch.core.store.create_job(name="j", spec={}, kind="steady", target="local", fingerprint="fp")
    orch.core.store.set_status(one.id, "RUNNING")
    orch.core.store.set_status(one.id, "SUCCEEDED", metrics={"workers": 1, "samples_per_sec": 1000.0})
    four = orch.core.store.create_job(name="j", spec={}, kind="steady", target="local", fingerprint="fp")
    metrics = {"workers": 4, "samples_per_sec": 2400.0, "data_fraction": 0.02, "precision": "bf16"}
    following.scaling(orch.core, four, metrics)
    assert metrics["scaling"]["speedup"] == 2.4
    assert metrics["scaling"]["efficiency"] == 0.6
    assert metrics["verdict"]["kind"] == "communication-bound"
    assert "4 workers give 60%" in " ".join(metrics["verdict"]["reasons"])


def test_a_finished_jobs_log_is_read_from_the_store_where_its_file_is_not(tmp_path):
    """Another replica ended the job: its log file is on that replica's disk, and the copy
    the store kept at the end is what this one shows."""
    orch = _orch(tmp_path)
    rec = orch.core.store.create_job(name="j", spec={}, kind="exploratory", target="local",
                                fingerprint="f")
    orch.core.store.update(rec.id, backend_id=rec.id, log_path=str(tmp_path / "elsewhere" / "j.log"))
    orch.core.store.set_status(rec.id, "SUCCEEDED", "done")
    orch.core.store.keep_log(rec.id, "epoch 1 loss 0.5\nthe end\n")
    assert following.logs(orch.core, orch.get(rec.id)) == "epoch 1 loss 0.5\nthe end\n"
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "j.log").write_text("this replica's own file\n")
    assert following.logs(orch.core, orch.get(rec.id)) == "this replica's own file\n"


def test_a_page_of_jobs_asks_the_backend_only_of_records_older_than_the_period(tmp_path):
    """`orch serve` reconciles every job each period: its list asks the backend again only
    of records that period did not touch."""
    from orchestrator.service import views
    from orchestrator.store import JobQuery

    orch = _orch(tmp_path)
    rec = orch.core.store.create_job(name="j", spec={}, kind="exploratory", target="local",
                                fingerprint="f")
    orch.core.store.update(rec.id, backend_id=rec.id)
    orch.core.store.set_status(rec.id, "RUNNING", "running")  # its local Ray is gone, unasked
    page, _ = views.job_page(orch.core, JobQuery(limit=10), fresh_s=60)
    assert [j.status for j in page] == ["RUNNING"]  # touched just now: shown as recorded
    orch.core.store._db.execute("UPDATE jobs SET updated_at = ? WHERE id = ?", (time.time() - 61, rec.id))
    page, _ = views.job_page(orch.core, JobQuery(limit=10), fresh_s=60)
    assert [j.status for j in page] == ["FAILED"]  # older than the period: asked, and gone
