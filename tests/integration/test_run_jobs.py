"""`run:` jobs on the real local Ray: each in a folder of its own, its files its artifacts."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, run_orch

pytestmark = pytest.mark.integration


def _submit(home, path) -> dict:
    proc = run_orch(home, "submit", str(path), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    assert rec["status"] == "SUCCEEDED", rec
    return rec


def test_the_same_workdir_twice_starts_afresh_and_keeps_its_own_files(ray_home, tmp_path):
    # Ray unpacks an unchanged workdir once and hands that folder to every job: the second
    # job found the first one's snapshot and resumed from it, unasked (issue 48).
    job = tmp_path / "job.yaml"
    job.write_text(f"name: resumer\nworkdir: {ROOT / 'tests' / 'fixtures' / 'resumer'}\n"
                   "run: python train.py\n")
    first, second = _submit(ray_home, job), _submit(ray_home, job)
    for rec in (first, second):
        log = run_orch(ray_home, "logs", rec["id"]).stdout
        assert "starting at epoch 0" in log and "Resuming" not in log, log
        arts = json.loads(run_orch(ray_home, "artifacts", rec["id"], "--json").stdout)
        assert arts["location"].endswith(rec["id"])
        # What it wrote, not the script it was given.
        assert [f["key"] for f in arts["files"]] == ["out/result.txt", "snapshot.txt"], arts
        got = tmp_path / rec["id"]
        assert run_orch(ray_home, "artifacts", rec["id"], "--download", str(got)).returncode == 0
        assert (got / "out" / "result.txt").read_text() == "trained epochs 0..3\n"
    # Resuming is the job file's choice, and then it starts from that job's files.
    job.write_text(job.read_text() + f"checkpoint:\n  resume_from: {second['id']}\n")
    third = _submit(ray_home, job)
    log = run_orch(ray_home, "logs", third["id"]).stdout
    assert "Resuming training from snapshot at Epoch 3" in log, log
    arts = json.loads(run_orch(ray_home, "artifacts", third["id"], "--json").stdout)
    assert {f["key"] for f in arts["files"]} == {"out/result.txt", "snapshot.txt"}


def test_a_failing_script_says_why_in_its_summary_status_and_json(ray_home, tmp_path):
    job = tmp_path / "cuda.yaml"
    job.write_text(f"name: needs-cuda\nworkdir: {ROOT / 'tests' / 'fixtures' / 'resumer'}\n"
                   "run: python needs_cuda.py\n")
    proc = run_orch(ray_home, "submit", str(job))
    assert proc.returncode == 1, proc.stderr[-3000:]
    error = "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'"
    summary = proc.stdout + proc.stderr
    assert f"{error} (exit code 1)" in summary and "hint: the script uses CUDA" in summary, summary
    assert "torch.cuda.set_device(0)" in summary  # the traceback's last lines, once
    job_id = summary.split(" FAILED in ")[0].split()[-1]
    rec = json.loads(run_orch(ray_home, "status", job_id, "--json").stdout)
    assert rec["message"] == f"{error} (exit code 1)"
    failure = rec["metrics"]["failure"]
    assert failure["error"] == error and failure["lines"][0] == "Traceback (most recent call last):"
    shown = run_orch(ray_home, "status", job_id).stdout
    assert error in shown and "no GPU" in shown


def test_a_run_jobs_reports_and_phases_show_in_status_and_its_log_is_its_own(ray_home, tmp_path):
    job = tmp_path / "reporter.yaml"
    job.write_text(f"name: reporter\nworkdir: {ROOT / 'tests' / 'fixtures' / 'resumer'}\n"
                   "run: python reporter.py\n")
    rec = _submit(ray_home, job)
    assert (rec["metrics"]["epoch"], rec["metrics"]["loss"], rec["metrics"]["accuracy"]) == (3, 0.25, 0.9)
    phases = rec["metrics"]["phases"]
    assert {"launched_to_driver", "driver_to_first_output", "training"} <= set(phases), phases
    shown = run_orch(ray_home, "status", rec["id"]).stdout
    assert "epoch 3/3  loss 0.2500  accuracy 0.900" in shown and "→first output" in shown, shown
    # Its log is its own output; orch's event lines only when asked for.
    log = run_orch(ray_home, "logs", rec["id"]).stdout
    assert "epoch 1 done" in log and "trained" in log and "::orch::" not in log, log
    everything = run_orch(ray_home, "logs", rec["id"], "--events").stdout
    assert everything.count('"event": "report"') + everything.count('"event":"report"') == 3


def test_an_unchanged_torchrun_script_runs_from_its_job_files_folder(ray_home):
    """examples/own-script: `torchrun --standalone --nproc_per_node=2 ddp.py`, no workdir
    key (the job file's folder), two gloo processes on CPU; its snapshot is its artifact."""
    rec = _submit(ray_home, ROOT / "examples" / "own-script" / "torchrun.yaml")
    log = run_orch(ray_home, "logs", rec["id"]).stdout
    assert "rank 0 of 2 done on cpu" in log and "rank 1 of 2 done on cpu" in log, log
    assert "Resuming" not in log and rec["metrics"]["epoch"] == 3
    arts = json.loads(run_orch(ray_home, "artifacts", rec["id"], "--json").stdout)
    assert [f["key"] for f in arts["files"]] == ["snapshot.pt"], arts


PROBE = """import json, os, subprocess, sys, time
warm = "torch" in sys.modules  # imported before this line: forked from the warm zygote
import torch
print("probe " + json.dumps({"warm": warm, "rank": os.environ.get("LOCAL_RANK"),
                             "pid": os.getpid(), "threads": torch.get_num_threads()}), flush=True)
if sys.argv[1:] == ["sleep"]:
    child = subprocess.Popen(["sleep", "300"])
    print("probe " + json.dumps({"grandchild": child.pid}), flush=True)
    time.sleep(300)
"""


def _probes(home, job_id: str) -> list:
    log = run_orch(home, "logs", job_id).stdout
    return [json.loads(line.split("probe ", 1)[1]) for line in log.splitlines() if "probe {" in line]


def test_a_run_jobs_python_and_torchrun_start_warm_and_a_cancel_stops_all_they_started(
        ray_home, tmp_path):
    """providers/warm_python.py: a local `run:` job's `python` and `torchrun` (and
    torchrun's workers) are forked from a process that imported torch, with the command's
    own environment (torchrun's OMP_NUM_THREADS=1 for its workers); `orch cancel` stops the
    forked command and what it started."""
    import time

    import psutil

    from providers.local_ray import LocalRay
    from providers.warm_python import SOCKET, _listening
    from tests.conftest import status_in_process
    from tests.integration.conftest import wait_until

    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "probe.py").write_text(PROBE)
    first = tmp_path / "first.yaml"
    first.write_text("name: probe\nworkdir: work\nrun: python probe.py\n")
    _submit(ray_home, first)  # starts the zygote where none runs yet
    sock = LocalRay(ray_home).temp_dir() / SOCKET
    wait_until("the warm zygote", lambda: _listening(sock), timeout=120)
    both = tmp_path / "both.yaml"
    both.write_text("name: probe2\nworkdir: work\n"
                    "run: python probe.py && torchrun --nproc_per_node=2 probe.py\n")
    rec = _submit(ray_home, both)
    probes = _probes(ray_home, rec["id"])
    assert len(probes) == 3 and all(p["warm"] for p in probes), probes
    assert sorted(str(p["rank"]) for p in probes) == ["0", "1", "None"], probes
    assert [p["threads"] for p in probes if p["rank"] is not None] == [1, 1], probes

    sleeper = tmp_path / "sleeper.yaml"
    sleeper.write_text("name: sleeper\nworkdir: work\nrun: python probe.py sleep\n")
    proc = run_orch(ray_home, "submit", "--detach", str(sleeper))
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    seen = wait_until("the sleeper's processes", lambda: (p := _probes(ray_home, job_id))
                      and len(p) == 2 and p, timeout=120)
    assert seen[0]["warm"], seen
    pids = (seen[0]["pid"], seen[1]["grandchild"])
    assert run_orch(ray_home, "cancel", job_id).returncode == 0
    wait_until("the job cancelled", lambda: status_in_process(ray_home, job_id)["status"]
               == "CANCELLED", timeout=60)

    def gone() -> bool:
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    return False
            except psutil.NoSuchProcess:
                continue
        return True

    deadline = time.monotonic() + 15
    while not gone():
        assert time.monotonic() < deadline, f"still running after the cancel: {pids}"
        time.sleep(0.2)
