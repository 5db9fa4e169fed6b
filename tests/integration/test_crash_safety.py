"""Kill `orch submit` at every step: `orch status` shows where the job really is, and a
resubmit with the same idempotency key never launches it twice. Real local Ray."""

from __future__ import annotations

import json
import uuid

import pytest

from orchestrator.base.failpoints import SUBMIT_STEPS
from providers.local_ray import LocalRay
from tests.conftest import list_in_process, run_json, run_orch
from tests.integration.test_local_jobs import wait_for

pytestmark = pytest.mark.integration
NOT_LAUNCHED = ("planned", "recorded", "prepared")


def ray_jobs(home, job_id: str) -> list:
    """What was really launched under this submission id on the local Ray: the jobs orch
    started itself there (providers/process_jobs.py) and those of Ray's Jobs API."""
    from ray.job_submission import JobSubmissionClient

    from providers.process_jobs import in_session

    ray = LocalRay(home)
    client = JobSubmissionClient(ray.status()["dashboard_url"], headers=ray.headers())
    started = [job_id] if in_session(ray.temp_dir()).has(job_id) else []
    return started + [j.submission_id for j in client.list_jobs() if j.submission_id == job_id]


def submit(home, job, key, *extra, **env):
    return run_orch(home, "submit", str(job), "--detach", "--json", "--idempotency-key", key,
                    *extra, **env)


@pytest.mark.parametrize("step", SUBMIT_STEPS)
def test_a_submit_killed_at_each_step_is_reconciled(ray_home, tmp_path, step):
    name, key = f"crash-{step}", f"key-{uuid.uuid4().hex}"
    job = tmp_path / "job.yaml"
    job.write_text(f"name: {name}\nrun: echo ran once\n")
    killed = submit(ray_home, job, key, ORCH_FAILPOINTS=step)
    assert killed.returncode == -9, killed.stderr  # SIGKILL, as `kill -9` or a power cut
    listed = [j for j in run_json(ray_home, "status", "--limit", "1000") if j["name"] == name]
    if step == "planned":
        assert listed == []  # killed before the record: nothing written, nothing launched
    else:
        (rec,) = listed
        if step in NOT_LAUNCHED:
            assert rec["status"] == "FAILED" and "never launched" in rec["message"], rec
        else:  # the backend has it: status found it there and follows it
            rec, _ = wait_for(ray_home, rec["id"], {"SUCCEEDED", "FAILED", "CANCELLED"})
            assert rec["status"] == "SUCCEEDED", rec
            assert "ran once" in run_orch(ray_home, "logs", rec["id"]).stdout
        assert len(ray_jobs(ray_home, rec["id"])) == (0 if step in NOT_LAUNCHED else 1)
    again = submit(ray_home, job, key)
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    if step == "planned":  # the first try left nothing: this one runs the job
        wait_for(ray_home, second["id"], {"SUCCEEDED"})
        assert len(ray_jobs(ray_home, second["id"])) == 1
    else:
        assert second["id"] == rec["id"] and "submitted before" in again.stderr
        assert len(ray_jobs(ray_home, rec["id"])) == (0 if step in NOT_LAUNCHED else 1)
    same_key = [j for j in list_in_process(ray_home) if j["name"] == name]
    assert len(same_key) == 1


def test_a_resubmit_takes_over_a_launch_its_dead_orch_never_made(ray_home, tmp_path):
    key = f"key-{uuid.uuid4().hex}"
    job = tmp_path / "job.yaml"
    job.write_text("name: taken-over\nrun: echo ran once\n")
    assert submit(ray_home, job, key, ORCH_FAILPOINTS="prepared").returncode == -9
    again = submit(ray_home, job, key)  # no `orch status` in between
    assert again.returncode == 0, again.stderr
    rec, _ = wait_for(ray_home, json.loads(again.stdout)["id"], {"SUCCEEDED", "FAILED"})
    assert rec["status"] == "SUCCEEDED"
    assert len(ray_jobs(ray_home, rec["id"])) == 1
    history = [h["message"] for h in run_json(ray_home, "status", rec["id"])["history"]]
    assert any("taken over" in (m or "") for m in history), history
