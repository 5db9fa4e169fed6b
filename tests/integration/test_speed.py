"""Where the time goes, verdicts, loader tuning, surviving a killed worker and learned speeds, on a real local Ray."""

from __future__ import annotations

import json
import sys

import pytest

from jobs import events
from orchestrator.decision.models import PastRun
from tests.conftest import environment, orch_env, run_orch, status_in_process
from tests.integration.conftest import local_ray_dir, train_processes, wait_until
from tests.integration.test_local_jobs import wait_for

pytestmark = pytest.mark.integration


def submit(home, tmp_path, name, config, extra=""):
    job = tmp_path / f"{name}.yaml"
    job.write_text(f"name: {name}\ntrain:\n  job: image-classification\n  config: {config}\n"
                   f"scaling: {{num_workers: 2}}\nprecision: bf16\n{extra}")
    proc = run_orch(home, "submit", str(job), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_an_input_bound_job_is_diagnosed_input_bound(ray_home, tmp_path):
    # Its compute-bound counterpart is the quickstart, checked in test_local_jobs.py.
    # 8 ms of sleep a sample: more than a bf16 step takes on a slow 2-core CPU (at 3 ms, 0.41
    # of a step went to data there, where the verdict still said input-bound).
    slow = submit(ray_home, tmp_path, "slow-input", "{epochs: 1, slow_data_ms: 8}",
                  "data: {loader_workers: 0}\n")
    m = slow["metrics"]
    assert m["verdict"]["kind"] == "input-bound", m["verdict"]
    assert m["data_fraction"] > 0.5 and m["time_data_s"] > m["time_compute_s"]
    assert any("loader_workers" in a for a in m["verdict"]["advice"])
    for key in ("time_data_s", "time_copy_s", "time_compute_s", "samples_per_sec", "cpu_percent"):
        assert key in m
    # precision: bf16 was asked: kept, timed against fp32, and the verdict says so where
    # fp32 was much faster here (a CPU without native bf16), and only there.
    trials = m["precision_trials"]
    assert m["precision"] == "bf16" and not m["precision_auto"] and set(trials) == {"fp32", "bf16"}
    line = [a for a in m["verdict"]["advice"] if a.startswith("precision: fp32")]
    assert bool(line) == (trials["bf16"] >= 1.5 * trials["fp32"]), (trials, m["verdict"])


def test_loader_workers_auto_tunes_a_slow_dataset(ray_home, tmp_path):
    rec = submit(ray_home, tmp_path, "slow-auto", "{epochs: 1, slow_data_ms: 3}",
                 "data: {loader_workers: auto}\n")
    settings = rec["metrics"]["run_settings"]
    assert settings["loader_workers"] >= 2, settings
    assert settings["gpu_name"] == "cpu"  # the model it ran on, from which orch learns its speeds
    tuning = settings["loader_tuning"]
    assert set(tuning) >= {"0", "2"} and tuning["0"] > tuning[str(settings["loader_workers"])]


def test_a_killed_worker_is_restarted_and_training_resumes(ray_home, tmp_path):
    job = tmp_path / "tough.yaml"
    job.write_text("name: tough\ntrain:\n  job: image-classification\n"
                   "  config: {epochs: 7, dataset_multiplier: 3}\n"
                   "scaling: {num_workers: 2}\ncheckpoint: {max_failures: 1}\n")
    job_id = run_orch(ray_home, "submit", str(job), "--detach").stdout.strip()
    wait_until("two reports", lambda: (status_in_process(ray_home, job_id)["metrics"].get("reports")
                                       or 0) >= 2, timeout=180, poll_s=1)
    victims = [p for p in train_processes(local_ray_dir(ray_home)) if " ".join(p.cmdline()).startswith("ray::RayTrainWorker")]
    assert victims, "no training worker to kill"
    victims[0].kill()  # one worker process dies mid-run, as on an out-of-memory kill
    rec, _ = wait_for(ray_home, job_id, {"SUCCEEDED", "FAILED", "CANCELLED"}, timeout=300)
    assert rec["status"] == "SUCCEEDED", rec
    assert rec["metrics"]["epoch"] == 7
    log = run_orch(ray_home, "logs", job_id, "--events").stdout
    resumed = [e for e in events.parse(log) if e["event"] == "resume"]
    assert resumed and resumed[0]["epoch"] >= 2


def test_plan_shows_the_ratio_two_measured_runs_give(ray_home, tmp_path):
    # This machine has one model, so the runs are real and only the device each recorded is
    # set in the store afterwards: one "ran" on an A100, the next on an H100. The job file
    # that is planned asks for either; resources are not part of the fingerprint, so the
    # plan reads the runs of the CPU file. Both files exist before the first run: the
    # workdir's content is part of it.
    body = f"name: learned\nrun: {sys.executable} -c 'import time; time.sleep(0.5)'\n"
    # The files' folder is their workdir (docs/job-file.md): nothing else is written in it.
    work = tmp_path / "work"
    work.mkdir()
    cpu, gpus = work / "cpu.yaml", work / "gpus.yaml"
    cpu.write_text(body)
    gpus.write_text(body + "resources: {accelerators: {A100: 1, H100: 1}}\n")
    ids = []
    for _ in range(2):
        proc = run_orch(ray_home, "submit", str(cpu), "--json")
        assert proc.returncode == 0, proc.stderr[-3000:]
        ids.append(json.loads(proc.stdout)["id"])
        wait_for(ray_home, ids[-1], {"SUCCEEDED"})
    with environment(orch_env(ray_home)):
        from orchestrator.settings import load_settings
        from orchestrator.store import open_store

        store = open_store(load_settings())
        try:
            runs = []
            for job_id, name in zip(ids, ("NVIDIA A100-SXM4-40GB", "NVIDIA H100 80GB HBM3")):
                rec = store.get(job_id)
                stored = rec.metrics.to_dict()
                metrics = {**stored, "run_settings": {**stored.get("run_settings", {}), "gpu_name": name}}
                assert rec.choice is not None and rec.decision is not None
                choice = rec.choice.model_copy(update={"gpu": name.split()[1][:4], "count": 1})  # the faked device
                decision = rec.decision.model_copy(update={"choice": choice})
                runs.append(PastRun.from_row(store.update(job_id, metrics=metrics, decision=decision)))
        finally:
            store.close()
    a100, h100 = runs
    assert (a100.gpu, h100.gpu) == ("A100", "H100") and a100.fingerprint == h100.fingerprint
    config = tmp_path / "team.toml"
    config.write_text('[[onprem]]\ngpu = "A100"\ncount = 1\npurchase_price = 10000\n'
                      '[[onprem]]\ngpu = "H100"\ncount = 1\npurchase_price = 25000\n')
    proc = run_orch(ray_home, "plan", str(gpus), "--json", ORCH_MODE="hybrid", ORCH_CONFIG=str(config))
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = json.loads(proc.stdout)
    assert plan["fingerprint"] == a100.fingerprint
    basis = {a["gpu"]: (a["est_hours"], a["hours_basis"]) for a in plan["alternatives"]}
    # The last run (the "H100") is the known point; each device measured is taken as
    # measured, and the other model's figure names the ratio the two runs measured.
    ratio = h100.duration_s / a100.duration_s  # the A100's speed over the H100's
    assert basis["H100"] == (pytest.approx(h100.duration_s / 3600, rel=1e-3),
                             "measured: median of 1 run on H100x1")
    hours, source = basis["A100"]
    assert hours == pytest.approx(a100.duration_s / 3600, rel=1e-3)
    assert source == (f"measured: median of 1 run on A100x1: A100: {ratio:.2g}x this job's H100 "
                      "speed (1 run on H100, 1 run on A100)")
    text = run_orch(ray_home, "plan", str(gpus), ORCH_MODE="hybrid", ORCH_CONFIG=str(config)).stdout
    assert "this job's H100 speed" in " ".join(text.split())
