"""What a job on orch's local Ray can reach of the orch that started it (issue 46): its
environment holds none of orch's variables, only the allowlist (PATH, HOME, the locale),
what orch sets and what the admin passes on by name (`local.pass_env`). A real job on the
session's local Ray, which `orch local up` started from an environment holding a server's
values (tests/integration/conftest.py, SERVER_ONLY). And what it cannot do to the queue."""

from __future__ import annotations

import contextlib
import hashlib
import json
import secrets

import psutil
import pytest

from jobs.hosted import pid_file
from providers.local_ray import processes_matching
from tests.conftest import environment, orch_env, run_json, run_orch, short_tmp
from tests.integration.conftest import (
    SERVER_ONLY,
    local_ray_dir,
    on_session_ray,
    remove_home,
    wait_until,
)

pytestmark = pytest.mark.integration

# orch's settings that the server's environment holds (orch_env, and the PostgreSQL pass's
# store URL): none may reach a job.
ORCH_SETTINGS = {"ORCH_HOME", "ORCH_CONFIG", "ORCH_MODE", "ORCH_DATABASE_URL", *SERVER_ONLY}


def test_a_jobs_environment_holds_no_variable_of_the_orch_that_started_its_ray(ray_home, tmp_path):
    job = tmp_path / "env.yaml"
    job.write_text("name: envdump\nrun: env | sort\n")
    rec = run_json(ray_home, "submit", str(job), timeout=300)
    assert rec["status"] == "SUCCEEDED", rec
    log = run_orch(ray_home, "logs", rec["id"]).stdout
    names = {line.split("=", 1)[0] for line in log.splitlines() if "=" in line}
    assert {"PATH", "HOME", "AWS_ACCESS_KEY_ID"} <= names, sorted(names)  # allowlist, pass_env
    assert not names & ORCH_SETTINGS, sorted(names & ORCH_SETTINGS)
    assert SERVER_ONLY["SERVER_ONLY_TOKEN"] not in log
    # The processes every job starts from: the local Ray's (raylet, workers) and its runner
    # host, which runs the `train:` jobs' drivers.
    state = json.loads((ray_home / "local" / "ray.json").read_text())
    procs = processes_matching(local_ray_dir(ray_home))
    with contextlib.suppress(OSError, ValueError):
        procs.append(psutil.Process(int(open(pid_file(state["host_socket"])).read())))
    seen = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            leaked = set(p.environ()) & ORCH_SETTINGS
            assert not leaked, f"{p.pid} {p.name()}: {sorted(leaked)}"
            seen += 1
    assert seen >= 3, procs


def test_a_ghost_ray_job_with_made_up_metadata_does_not_fill_the_queue(ray_home):
    """Any job holds the cluster's Ray token, so it can submit a Ray job of its own that says
    it is orch's and holds 64 CPUs and 8 GPUs; `orch serve`'s queue counts only its own
    records, and Ray's report of what is used."""
    from ray.job_submission import JobSubmissionClient

    from orchestrator.server.scheduler import Scheduler
    from orchestrator.service.orch import Orch
    from orchestrator.settings import load_settings
    from providers.local import local_ray

    home = on_session_ray(short_tmp("ohg"), ray_home)
    with environment(orch_env(home)):
        settings = load_settings()
    ray = local_ray(settings)
    client = JobSubmissionClient(ray.status()["dashboard_url"], headers=ray.headers())
    ghost = client.submit_job(entrypoint="sleep 120", metadata={
        "orch_job": "orch-ghost", "name": "ghost", "cpus": "64", "gpus": "8"})
    orch = Orch(settings)
    try:
        wait_until("the ghost running", lambda: any(
            j.submission_id == ghost and j.status == "RUNNING"
            for j in orch.capacity("local").jobs), timeout=60)
        def room():
            return Scheduler(settings).rooms(orch, {"local"}, [])["local"]

        assert room().reserved.cpus == 0 and room().reserved.gpus == 0, room()
        # The ghost holds nothing in Ray: what Ray reports used leaves room, once another
        # test's run still ending on this shared Ray has gone (the ghost sleeps on); its
        # metadata's 64 CPUs would leave none, ever.
        free = wait_until("room beside the ghost", lambda: (
            (r := room()).used.cpus < r.total.cpus and r.free().cpus > 0 and r), timeout=60)
        assert free.reserved.cpus == 0 and free.reserved.gpus == 0, free
    finally:
        orch.close()
        client.stop_job(ghost)
        wait_until("the ghost stopped", lambda: str(client.get_job_status(ghost)) in (
            "STOPPED", "FAILED", "SUCCEEDED"), timeout=60)
        remove_home(home)


# Another job's code, with the cluster's token as every job holds it and as the same OS
# user: every package in Ray's GCS, unzipped, every job's runtime_env, metadata, entrypoint
# and log, and every file of the jobs orch started itself (their folders in Ray's session
# folders: providers/process_jobs.py), searched for a value. Prints what it searched and
# where it found the value.
ATTACK = r"""
import glob, io, json, os, sys, zipfile
from ray._raylet import GcsClient
from ray.job_submission import JobSubmissionClient

gcs_address, dashboard, token, needle, temp_dir = sys.argv[1:6]
needle = needle.encode()
folders = glob.glob(os.path.join(temp_dir, "session_*", "orch-jobs", "*"))
gcs = GcsClient(address=gcs_address)
found, packages = [], 0
for key in gcs.internal_kv_keys(b"gcs://", None):
    data = gcs.internal_kv_get(key, None) or b""
    packages += 1
    if needle in data:
        found.append(f"{key!r} raw")
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        continue
    found += [f"{key!r} {n}" for n in z.namelist() if needle in z.read(n)]
client = JobSubmissionClient(dashboard, headers={"Authorization": f"Bearer {token}"})
jobs = client.list_jobs()
for job in jobs:
    seen = json.dumps([job.entrypoint, job.runtime_env, job.metadata, job.message])
    if needle.decode() in seen:
        found.append(f"{job.submission_id} info")
    if job.submission_id and needle.decode() in (client.get_job_logs(job.submission_id) or ""):
        found.append(f"{job.submission_id} log")
for folder in folders:
    for top, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(top, name)
            try:
                with open(path, "rb") as f:
                    if needle in f.read():
                        found.append(path)
            except OSError:
                continue
print(json.dumps({"packages": packages, "jobs": len(jobs) + len(folders), "found": found}))
"""


def _attack(ray_home, needle: str) -> dict:
    import subprocess
    import sys

    from providers.local_ray import ray_env

    state = json.loads((ray_home / "local" / "ray.json").read_text())
    token_file = ray_home / "local" / "auth_token"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(ray_home), **ray_env(token_file)}
    proc = subprocess.run([sys.executable, "-c", ATTACK, state["address"], state["dashboard_url"],
                           token_file.read_text().strip(), needle, state["temp_dir"]], env=env,
                          capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_another_job_finds_no_value_of_a_running_or_finished_job_in_what_ray_keeps(
        ray_home, tmp_path):
    from providers.local import LocalProvider, local_ray
    from tests.conftest import status_in_process

    value = "pw-" + secrets.token_urlsafe(18)
    digest = hashlib.sha256(value.encode()).hexdigest()
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text("print('the job's own code')\n")
    job = tmp_path / "victim.yaml"
    job.write_text("name: victim\nworkdir: work\nsecrets: {DB_PASSWORD: null}\n"
                   "run: printf 'sha256 %s\\n' \"$(printf %s \"$DB_PASSWORD\" | sha256sum)\"; "
                   "sleep 4\n")
    rec = run_json(ray_home, "submit", "-d", str(job), "--secret", f"DB_PASSWORD={value}",
                   timeout=120)
    with environment(orch_env(ray_home)):
        from orchestrator.settings import load_settings

        local = LocalProvider(local_ray(load_settings()))
    backend = wait_until("the victim's backend id",
                         lambda: status_in_process(ray_home, rec["id"]).get("backend_id"))
    # Its digest of the value, printed once its command runs (the entrypoint line that Ray's
    # log begins with holds the command, not its output).
    wait_until("the victim running", lambda: digest in local.logs(backend), timeout=120)
    running = _attack(ray_home, value)
    assert running["jobs"] >= 1, running
    assert running["found"] == [], (running, local.logs(backend))
    final = wait_until("the victim's end", lambda: (r := status_in_process(ray_home, rec["id"]))
                       ["status"] in ("SUCCEEDED", "FAILED", "CANCELLED") and r, timeout=120)
    assert final["status"] == "SUCCEEDED", final
    assert _attack(ray_home, value)["found"] == []


def test_a_job_that_ended_before_its_driver_took_the_values_leaves_none_in_ray(
        ray_home, tmp_path, monkeypatch):
    """Its driver never took the values (stopped, or dead before it did): when orch records
    its end, it removes their file from the job's folder (a job orch started itself) or
    overwrites the package in Ray's GCS (a Ray job)."""
    from orchestrator.client import Local
    from orchestrator.settings import load_settings
    from providers.local import LocalProvider, local_ray
    from tests.conftest import status_in_process

    # The fault: the job's driver dies before it takes its values.
    monkeypatch.setattr(LocalProvider, "with_secrets", lambda self, entrypoint: "exit 3")
    value = "pw-" + secrets.token_urlsafe(18)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "main.py").write_text("print('the job')\n")
    job = tmp_path / "dies.yaml"
    job.write_text("name: dies\nworkdir: work\nsecrets: {DB_PASSWORD: null}\nrun: python main.py\n")
    with environment(orch_env(ray_home, DB_PASSWORD=value)):
        settings = load_settings()
        local = Local(settings)
        try:
            rec = local.submit(job)
        finally:
            local.close()
    provider = LocalProvider(local_ray(settings))
    wait_until("its end", lambda: provider.state(rec.backend_id or rec.id).status == "FAILED")
    assert _attack(ray_home, value)["found"]  # the job's folder (or package) still holds the file
    final = status_in_process(ray_home, rec.id)  # orch records its end
    assert final["status"] == "FAILED", final
    assert _attack(ray_home, value)["found"] == []
