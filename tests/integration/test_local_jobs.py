"""Local-only mode end to end: real `orch` processes, a real local Ray, real training."""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from jobs import events
from jobs.precision import pick
from orchestrator.cli.follow import when
from orchestrator.service.run_metrics import PHASES
from providers.local_ray import LocalRay
from tests.conftest import ORCH, ROOT, orch_env, run_json, run_orch, status_in_process
from tests.integration.conftest import actor_processes, local_ray_dir, train_processes
from tests.integration.test_runner_host import epoch, wait_ready, wait_warm, watch_sync_actors

pytestmark = pytest.mark.integration


def wait_for(home, job_id, statuses, timeout=240):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        rec = status_in_process(home, job_id)
        if not seen or seen[-1] != rec["status"]:
            seen.append(rec["status"])
        if rec["status"] in statuses:
            return rec, seen
        time.sleep(1)
    raise AssertionError(f"{job_id} never reached {statuses}; saw {seen}")


def write_job(tmp_path, text, name="job.yaml"):
    (tmp_path / "userjob").symlink_to(ROOT / "tests" / "fixtures" / "userjob")
    path = tmp_path / name
    path.write_text(text)
    return path


def test_quickstart_trains_with_two_workers_in_the_precision_it_measured_on_warm_processes(
        ray_home, tmp_path):
    from jobs.warm import IDLE_S

    wait_ready(ray_home)
    # The host refills its pool once jobs pause (jobs/warm.py), with at least its base
    # workers: a job right after another may find fewer warm, and start the rest at once.
    time.sleep(IDLE_S + 1)
    wait_warm(local_ray_dir(ray_home))
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        submit = subprocess.Popen([ORCH, "submit", "examples/quickstart.yaml", "--json"],
                                  env=orch_env(ray_home), cwd=str(ROOT), stdout=stdout,
                                  stderr=stderr, stdin=subprocess.DEVNULL)
        # The run's synchronization actor, looked for every 0.1 s: pid -> (started at, whether
        # torch is loaded in it).
        syncs = watch_sync_actors(local_ray_dir(ray_home), lambda: submit.poll() is not None,
                                  timeout=600)
    proc = subprocess.CompletedProcess(submit.args, submit.returncode, out.read_text(), err.read_text())
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    m = rec["metrics"]
    assert rec["status"] == "SUCCEEDED" and rec["target"] == "local"
    assert m["accuracy"] >= 0.9
    assert m["workers"] == 2 and m["precision_auto"]
    # precision: auto timed fp32 and bf16 on these workers and trains in what it kept.
    assert set(m["precision_trials"]) == {"fp32", "bf16"}
    assert m["precision"] == pick(m["precision_trials"]), m["precision_trials"]
    assert f"precision {m['precision']} (auto; a step took fp32 " in proc.stderr
    assert not [a for a in m["verdict"]["advice"] if a.startswith("precision")]
    assert m["run_settings"]["world_size"] == 2
    assert m["samples_per_sec"] > 0 and m["epoch"] == m["epochs"] == 8
    assert "report epoch 8/8" in proc.stderr  # progress and logs go to stderr with --json
    # No Ray tracebacks or error lines in the user's terminal: the actors that printed them
    # at a run's start and end (PreemptionWatcher, PlacementGroupCleaner) are not started.
    # Nor Ray Data's AutoscalingCoordinator, whose first answer, late under CPU load, printed
    # a GetTimeoutError traceback at each of Ray Train's scaling decisions.
    for noise in ("Traceback", "PreemptionWatcher", "PlacementGroupCleaner",
                  "resource request", " E "):
        assert noise not in proc.stderr, proc.stderr[-3000:]
    # This Ray's: another Ray on the machine (another test run's) may have one.
    assert not actor_processes(local_ray_dir(ray_home), "ray::_AutoscalingCoordinatorActor")
    # Data in memory, a model to train: the time goes to compute, and orch says so.
    assert m["verdict"]["kind"] == "compute-bound", m["verdict"]
    assert m["data_fraction"] < 0.3 and m["time_compute_s"] > m["time_data_s"]
    assert "compute-bound" in proc.stderr
    # Each worker read its device (here its process's CPU) over the run, and the record
    # keeps the series and a summary of both; the verdict says how busy they were.
    tel = m["telemetry"]
    assert sorted(tel["workers"]) == ["0", "1"], tel
    for w in tel["workers"].values():
        assert w["summary"]["source"] == "psutil" and w["summary"]["samples"] >= 2, w
        assert w["series"] and 0 <= w["series"][0]["util"] <= 100 and w["series"][0]["mem_gb"] > 0
    s = tel["summary"]
    assert s["workers"] == 2 and 0 < s["mean_util"] <= 100 and s["peak_mem_gb"] > 0.1, s
    assert m["verdict"]["reasons"][0].startswith("CPUs busy "), m["verdict"]
    assert "device_now" not in m  # the run is over: the summary says more
    assert [h["status"] for h in rec["history"]] == ["PENDING", "RUNNING", "SUCCEEDED"]
    # Where the job's time went, submit to end, kept with it and shown by `orch status ID`.
    assert list(m["phases"]) == list(PHASES), m["phases"]
    # From its record on, the phases add up to the record's own span (whole seconds there).
    since_recorded = sum(v for k, v in m["phases"].items() if k != "submit_to_recorded")
    span = when(rec["finished_at"]) - when(rec["created_at"])
    assert 0 < m["phases"]["training"] < since_recorded <= span + 2, (m["phases"], span)
    assert m["phases"]["submit_to_recorded"] < 30, m["phases"]
    shown = run_orch(ray_home, "status", rec["id"]).stdout
    assert "submit→recorded" in shown and "last step→ended" in shown, shown
    assert "devices      CPU busy " in shown and ", 2 workers" in shown, shown
    listed = {j["id"]: j for j in run_json(ray_home, "status")}
    assert listed[rec["id"]]["target"] == "local" and listed[rec["id"]]["status"] == "SUCCEEDED"
    logs = run_orch(ray_home, "logs", rec["id"], "--events")
    assert logs.returncode == 0 and "Wrapping provided model in DistributedDataParallel" in logs.stdout
    # It ran on the runner host's warm processes: its synchronization actor's too, without
    # torch (host.preload_light); each worker's process forked from the zygote that imported
    # torch (jobs/forkserver.py), ahead of the job or, where the pool fell short, at once.
    assert len(syncs) == 1, syncs
    (sync_started, sync_has_torch), = syncs.values()
    created = epoch(rec["created_at"])  # whole seconds
    assert sync_started < created and not sync_has_torch, syncs
    workers = [e for e in events.parse(logs.stdout) if e["event"] == "worker"]
    assert sorted(w["rank"] for w in workers) == [0, 1]
    for w in workers:  # from the pool, or forked at once: never an import of its own
        assert w["forked"], (w, created)
    assert "::orch::" in logs.stdout and ":actor_name:" not in logs.stdout  # Ray's markers left out
    # Started by orch, not as a Ray job (providers/process_jobs.py): Ray's Jobs API has no
    # such job, its folder holds its log and exit, and its runner started within a second.
    folder = Path(local_ray_dir(ray_home)) / "session_latest" / "orch-jobs" / rec["id"]
    assert json.loads((folder / "exit").read_text())["code"] == 0
    assert "Wrapping provided model in DistributedDataParallel" in (folder / "log").read_text()
    state = json.loads((ray_home / "local" / "ray.json").read_text())
    with pytest.raises(urllib.error.HTTPError) as no_job:
        urllib.request.urlopen(urllib.request.Request(
            f"{state['dashboard_url']}/api/jobs/{rec['id']}", headers=LocalRay(ray_home).headers()),
            timeout=10)
    assert no_job.value.code == 404
    assert m["phases"]["launched_to_driver"] < 1.0, m["phases"]


def test_cancel_running_job_leaves_no_workers(ray_home, tmp_path):
    job = write_job(tmp_path, "name: long\ntrain:\n  job: image-classification\n"
                              "  config: {epochs: 200, dataset_multiplier: 4}\nscaling: {num_workers: 2}\n")
    job_id = run_orch(ray_home, "submit", str(job), "--detach").stdout.strip()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:  # wait until training really runs
        rec = status_in_process(ray_home, job_id)
        if rec["metrics"].get("reports"):
            break
        assert rec["status"] in ("PENDING", "RUNNING"), rec
        time.sleep(1)
    assert len(train_processes(local_ray_dir(ray_home))) >= 2
    proc = run_orch(ray_home, "cancel", job_id)
    assert proc.returncode == 0, proc.stderr
    assert "CANCELLED" in proc.stdout
    rec = run_json(ray_home, "status", job_id)
    assert rec["status"] == "CANCELLED"
    deadline = time.monotonic() + 30
    while train_processes(local_ray_dir(ray_home)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert train_processes(local_ray_dir(ray_home)) == []
    assert run_orch(ray_home, "cancel", job_id).returncode == 0  # already ended: says so


def test_a_job_stops_at_its_budget_after_a_checkpoint(ray_home, tmp_path):
    # This machine's power priced at about 4 USD a second (150 W at 96,000 USD/kWh): a 20 USD
    # budget lasts 5 s from submission, since budgets count cash, and owned hardware's cash
    # is its power; so the job stops after its first epoch's checkpoint.
    job = write_job(tmp_path, "name: budgeted\ntrain:\n  job: image-classification\n"
                              "  config: {epochs: 200}\nscaling: {num_workers: 2}\n"
                              "estimate: {hours: 0.0005}\nbudget: {max_cost: 20}\n")
    proc = run_orch(ray_home, "submit", str(job), "--json", ORCH_ELECTRICITY_PRICE="96000")
    rec = json.loads(proc.stdout)
    assert rec["status"] == "CANCELLED", (rec["status"], rec["message"], proc.stderr[-3000:])
    m = rec["metrics"]
    assert "stopped at its budget after epoch" in rec["message"]
    assert "budget.max_cost 20.00 USD reached" in rec["message"]
    assert 1 <= m["stopped"]["epoch"] < 200 and m["epoch"] == m["stopped"]["epoch"]
    assert m["checkpoint"] and m["checkpoint"] in rec["message"]
    cost = rec["run"]["cost"]  # the ledger line: Ray's own clock, about 4 USD a second
    assert 20 <= cost["cost_usd"] <= 480, cost
    deadline = time.monotonic() + 30
    while train_processes(local_ray_dir(ray_home)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert train_processes(local_ray_dir(ray_home)) == []


def test_no_secret_value_in_the_store_the_logs_or_the_status(ray_home, tmp_path):
    token, aws = "hf_" + secrets.token_hex(12), secrets.token_hex(20)
    job = tmp_path / "secret.yaml"
    job.write_text(f"name: with-token\nenvs:\n  HF_TOKEN: {token}\n"
                   "run: echo \"the job sees $HF_TOKEN\" && test -n \"$HF_TOKEN\"\n")
    proc = run_orch(ray_home, "submit", str(job), "--json", AWS_SECRET_ACCESS_KEY=aws,
                    AWS_ACCESS_KEY_ID="AKIA" + secrets.token_hex(8).upper())
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    assert rec["status"] == "SUCCEEDED"
    assert "the job sees <redacted>" in proc.stderr  # followed live, redacted on the way
    shown = run_orch(ray_home, "logs", rec["id"]).stdout + run_orch(ray_home, "status", "--json").stdout
    files = [p for p in ray_home.rglob("*") if p.is_file() and "session_" not in str(p)]
    assert any(p.name == "orch.db" for p in files) and any(p.suffix == ".log" for p in files)
    for value in (token, aws):
        assert value not in proc.stdout + proc.stderr + shown
        for p in files:
            assert value.encode() not in p.read_bytes(), p
    for p in [ray_home / "orch.db", ray_home / "logs" / f"{rec['id']}.log"]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    # A train: job, which orch starts itself (no Ray job), printing its value: its raw output
    # stays in the local Ray's session folder, as a Ray job's driver log does, and nowhere else.
    work = tmp_path / "leaky"
    work.mkdir()
    (work / "leak.py").write_text("import os\n\ndef loop(config):\n"
                                  "    print('the loop sees', os.environ['HF_TOKEN'], flush=True)\n")
    job.write_text(f"name: leaky\nworkdir: {work}\nenvs:\n  HF_TOKEN: {token}\n"
                   "train:\n  entrypoint: leak:loop\n")
    proc = run_orch(ray_home, "submit", str(job), "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["status"] == "SUCCEEDED", proc.stderr[-3000:]
    assert "the loop sees <redacted>" in proc.stderr
    files = [p for p in ray_home.rglob("*") if p.is_file() and "session_" not in str(p)]
    assert [p for p in files if token.encode() in p.read_bytes()] == []


def test_unmodified_ray_train_script_runs_as_run_job(ray_home, tmp_path):
    job = tmp_path / "plain.yaml"
    job.write_text(f"name: plain-script\nworkdir: {ROOT / 'tests' / 'fixtures'}\n"
                   "envs:\n  GREETING: hello\n"
                   "setup: echo setup says $GREETING\n"
                   "run: python plain_ray_train.py\n")
    proc = run_orch(ray_home, "submit", str(job), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    assert rec["status"] == "SUCCEEDED" and rec["name"] == "plain-script"
    log = run_orch(ray_home, "logs", rec["id"]).stdout
    assert "setup says hello" in log
    assert "plain script finished, error: None" in log
    # It joined orch's Ray (2 CPUs or however many the instance has) rather than starting one.
    assert "Connecting to existing Ray cluster" in log


def test_user_entrypoint_and_a_failing_one(ray_home, tmp_path):
    good = write_job(tmp_path, "name: user-loop\nworkdir: userjob\ntrain:\n"
                               "  entrypoint: mytrain:train_func\n  config: {epochs: 3}\n"
                               "scaling: {num_workers: 2}\nprecision: bf16\n")
    proc = run_orch(ray_home, "submit", str(good), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    assert rec["metrics"]["epoch"] == 3 and rec["metrics"]["precision"] == "bf16"

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: user-broken\nworkdir: userjob\ntrain:\n  entrypoint: mytrain:broken\n")
    proc = run_orch(ray_home, "submit", str(bad), "--json")
    assert proc.returncode == 1
    rec = json.loads(proc.stdout)
    assert rec["status"] == "FAILED"
    assert "user code failed on purpose" in rec["message"]

    # Its module is read at the door, not imported (issue 34): an import that fails on the
    # target is the run's to report, in the words the door used to say it.
    missing = tmp_path / "missing.yaml"
    missing.write_text("name: user-import\nworkdir: userjob\ntrain:\n"
                       "  entrypoint: needs_missing:train_func\n")
    proc = run_orch(ray_home, "submit", str(missing), "--json")
    assert proc.returncode == 1, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    assert rec["status"] == "FAILED" and rec["message"] == (
        "train.entrypoint 'needs_missing:train_func' does not import: ModuleNotFoundError: "
        "No module named 'not_installed_on_the_target_zz'"), rec["message"]


def test_a_workdir_with_a_jobs_package_of_its_own_runs_its_own(ray_home, tmp_path):
    """`jobs` is a common name: orch's runner is `_orch_runner` on the target, so the job's
    `jobs.train` is imported from its workdir, not looked for in orch's package."""
    work = tmp_path / "own"
    (work / "jobs").mkdir(parents=True)
    (work / "jobs" / "__init__.py").write_text("OWN = 7\n")
    (work / "jobs" / "train.py").write_text(
        "import os\n\nimport ray.train\n\nimport jobs\n\n\ndef train_loop(config):\n"
        "    here = os.path.realpath(os.getcwd())\n"
        "    ray.train.report({'own': jobs.OWN,\n"
        "                      'from_workdir': int(os.path.realpath(__file__).startswith(here))})\n")
    job = tmp_path / "own.yaml"
    job.write_text(f"name: own-jobs\nworkdir: {work}\ntrain:\n  entrypoint: jobs.train:train_loop\n"
                   "scaling: {num_workers: 1}\n")
    proc = run_orch(ray_home, "submit", str(job), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    assert rec["status"] == "SUCCEEDED", (rec["message"], proc.stderr[-3000:])
    assert rec["metrics"]["own"] == 7 and rec["metrics"]["from_workdir"] == 1, rec["metrics"]


def test_local_status_reports_the_instance(ray_home):
    state = run_json(ray_home, "local", "status")
    assert state["dashboard_url"].startswith("http://127.0.0.1:")
    assert state["processes"] > 0
    assert state["runner_host"] in ("ready", "starting"), state


def test_exploratory_job_without_cloud_credentials_runs_locally_detached(ray_home, tmp_path):
    # One worker: priced on one-GPU cloud offers (two workers would need two GPUs each).
    # No backfill: the idle workstation would otherwise take the exploratory job at its
    # power before any cloud is tried; here it must rent, find no credentials, and fall back.
    # Submitted with --detach: the submit returns at once, and `orch status` follows the job
    # to its end and reads its training metrics.
    job = write_job(tmp_path, "name: explore-cpu\ntrain:\n  job: image-classification\n"
                              "  config: {epochs: 2}\nscaling: {num_workers: 1}\n")
    start = time.monotonic()
    proc = run_orch(ray_home, "submit", str(job), "--detach", ORCH_MODE="hybrid",
                    ORCH_CLOUDS="lambda,runpod,aws", HOME=str(tmp_path),
                    ORCH_CATALOG_DIR=str(ROOT / "examples" / "catalog"),
                    ORCH_EXPLORATORY_BACKFILL="false")
    returned_in = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    assert job_id.startswith("orch-")
    assert returned_in < 20, f"--detach took {returned_in:.1f}s"
    assert "no configured cloud has credentials here" in proc.stderr and "sky check" in proc.stderr
    assert "Instead: local" in proc.stderr and "Traceback" not in proc.stderr
    rec, seen = wait_for(ray_home, job_id, {"SUCCEEDED", "FAILED", "CANCELLED"})
    assert rec["status"] == "SUCCEEDED" and rec["target"] == "local", rec
    assert seen[-1] == "SUCCEEDED" and rec["metrics"]["epoch"] == 2
    assert any("no configured cloud has credentials" in r for r in rec["decision"]["reasons"])


def test_a_pipeline_runs_its_stages_in_order_and_stops_after_a_failure(ray_home, tmp_path):
    out = tmp_path / "stages.log"
    pipe = tmp_path / "pipe.yaml"
    pipe.write_text(f"name: prep-train\n---\nname: prep\nrun: echo prep >> {out}; sleep 1\n"
                    f"---\nname: train\nrun: echo train >> {out}\n")
    proc = run_orch(ray_home, "submit", str(pipe), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = json.loads(proc.stdout)["stages"]
    assert out.read_text().split() == ["prep", "train"]  # each ran once, in order
    assert [first["status"], second["status"]] == ["SUCCEEDED", "SUCCEEDED"]
    assert second["run"]["after"] == first["id"] and second["run"]["stage"] == 2
    # The second was launched only after the first had ended, by the submit following them.
    launching = [h for h in second["history"]
                 if (h["message"] or "").endswith("succeeded: launching")]
    assert len(launching) == 1 and launching[0]["at"] >= first["finished_at"], second["history"]
    assert "pipeline prep-train: 2 stages" in proc.stderr

    pipe.write_text(f"name: broken\n---\nrun: exit 3\n---\nrun: echo never >> {out}\n")
    proc = run_orch(ray_home, "submit", str(pipe), "--json")
    assert proc.returncode == 1
    first, second = json.loads(proc.stdout)["stages"]
    assert first["status"] == "FAILED" and second["status"] == "CANCELLED"
    assert second["message"] == f"not started: stage 1 ({first['id']}) ended FAILED"
    assert second["backend_id"] is None and "never" not in out.read_text()


GROUP = """\
name: pair
execution: parallel
primary_tasks: [client]
termination_delay: 2s
---
name: server
envs: {{PORT: "{port}"}}
run: python -m http.server "$PORT" --bind "$ORCH_JOBGROUP_SERVER_HOST"
---
name: client
envs: {{PORT: "{port}"}}
run: |
  python - <<'PY'
  import os, time, urllib.request
  url = f"http://{{os.environ['ORCH_JOBGROUP_SERVER_HOST']}}:{{os.environ['PORT']}}/"
  for _ in range(120):
      try:
          urllib.request.urlopen(url, timeout=2).read()
          break
      except OSError:
          time.sleep(0.5)
  else:
      raise SystemExit(f"no server at {{url}}")
  print("reached the server of", os.environ["SKYPILOT_JOBGROUP_NAME"])
  PY
"""


def test_a_job_group_runs_side_by_side_and_stops_its_auxiliary_task_after_the_delay(
        ray_home, tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    group = tmp_path / "group.yaml"
    group.write_text(GROUP.format(port=port))
    proc = run_orch(ray_home, "submit", str(group), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    server, client = json.loads(proc.stdout)["tasks"]
    # The client reached the server: both ran at once, the client told the server's address.
    assert client["status"] == "SUCCEEDED", client["message"]
    assert "reached the server of pair" in run_orch(ray_home, "logs", client["id"]).stdout
    # The server (it would serve for ever) was stopped once the client had ended, 2 s on.
    assert server["status"] == "CANCELLED"
    assert "primary tasks succeeded" in server["message"] and "termination_delay 2s" in server["message"]
    stopping = [h for h in server["history"] if "primary tasks succeeded" in (h["message"] or "")]
    assert stopping, server["history"]
    waited = _epoch(stopping[0]["at"]) - _epoch(client["finished_at"])
    assert waited >= 1, (stopping, client["finished_at"])  # 2 s, counted in whole seconds
    assert (server["run"]["primary"], client["run"]["primary"]) == (False, True)
    listed = run_orch(ray_home, "status").stdout
    assert "pair (group: server cancelled, client succeeded)" in " ".join(listed.split())


def _epoch(iso: str) -> float:
    import calendar
    import time

    return float(calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ")))


PREEMPTIBLE = """\
name: preemptible
run: |
  python - <<'PY'
  import json, os, pathlib, signal, sys, time
  ck = pathlib.Path(os.environ["ORCH_CHECKPOINT_PATH"])
  ck.mkdir(parents=True, exist_ok=True)
  state = ck / "state.json"
  epoch = json.loads(state.read_text())["epoch"] if state.exists() else 0
  print(f"run {int(os.environ.get('ORCH_RESTARTS', '0')) + 1} starts at epoch {epoch}", flush=True)
  def preempted(*_):  # the contract: save, then exit with the code that asks for another run
      state.write_text(json.dumps({"epoch": epoch}))
      print(f"preempted at epoch {epoch}: checkpoint saved", flush=True)
      sys.exit(int(os.environ["ORCH_PREEMPTED_EXIT_CODE"]))
  signal.signal(signal.SIGTERM, preempted)
  (ck / "pid").write_text(str(os.getpid()))
  while epoch < 4:
      time.sleep(0.5)
      epoch += 1
      state.write_text(json.dumps({"epoch": epoch}))
      print(f"epoch {epoch} done", flush=True)
      if epoch == 2 and not os.environ.get("ORCH_RESTARTS"):
          (ck / "at-2").write_text("")
          time.sleep(60)  # waits here for the notice
  PY
"""


def test_a_job_preempted_by_the_contract_resumes_from_its_checkpoint_as_one_record(
        ray_home, tmp_path):
    import signal

    job = tmp_path / "preemptible.yaml"
    job.write_text(PREEMPTIBLE)
    job_id = run_orch(ray_home, "submit", str(job), "--detach").stdout.strip()
    ck = ray_home / "checkpoints" / job_id
    deadline = time.monotonic() + 120
    while not (ck / "at-2").exists():
        assert time.monotonic() < deadline, run_orch(ray_home, "logs", job_id).stdout[-2000:]
        time.sleep(0.5)
    os.kill(int((ck / "pid").read_text()), signal.SIGTERM)  # the platform's notice
    while True:
        rec = json.loads(run_orch(ray_home, "status", job_id, "--json").stdout)
        if rec["status"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            break
        assert time.monotonic() < deadline, rec
        time.sleep(1)
    out = run_orch(ray_home, "logs", job_id).stdout
    assert rec["status"] == "SUCCEEDED", (rec["message"], out[-2000:])
    assert rec["run"]["preemptions"] == 1
    # Both runs' output, in order, in the one job's log: the second went on from epoch 2.
    import re

    lines = [ln for ln in out.splitlines() if re.match(r"(run \d|epoch \d|preempted at epoch)", ln)]
    assert lines == ["run 1 starts at epoch 0", "epoch 1 done", "epoch 2 done",
                     "preempted at epoch 2: checkpoint saved", "run 2 starts at epoch 2",
                     "epoch 3 done", "epoch 4 done"], out[-3000:]
    assert any("preempted (exit 75) in run 1" in h["message"] for h in rec["history"])
    # Recorded once: no second job, and no failure in its history.
    listed = json.loads(run_orch(ray_home, "status", "--json").stdout)
    assert [r["id"] for r in listed].count(job_id) == 1
    assert sum(r["name"] == "preemptible" for r in listed) == 1
    assert "FAILED" not in {h["status"] for h in rec["history"]}


HOLDER = """\
name: holder
run: |
  python - <<'PY'
  import os, time, ray
  ray.init()
  @ray.remote(num_cpus=1)
  class Hold:
      def ping(self):
          return 1
  hold = Hold.remote()
  ray.get(hold.ping.remote())
  open("{held}", "w").close()
  while not os.path.exists("{free}"):
      time.sleep(0.5)
  PY
"""


def test_an_elastic_job_starts_on_the_one_free_slot_and_grows_when_the_other_frees(
        ray_home, tmp_path):
    held, free = tmp_path / "held", tmp_path / "free"
    holder = tmp_path / "holder.yaml"
    holder.write_text(HOLDER.format(held=held, free=free))
    holder_id = run_orch(ray_home, "submit", str(holder), "--detach").stdout.strip()
    deadline = time.monotonic() + 120
    while not held.exists():  # one of the local Ray's 2 CPUs is taken
        assert time.monotonic() < deadline, run_orch(ray_home, "logs", holder_id).stdout[-2000:]
        time.sleep(0.5)
    job = write_job(tmp_path, "name: elastic\nworkdir: userjob\ntrain:\n  entrypoint: "
                              f"mytrain:elastic\n  config: {{epochs: 4, epoch_s: 1, free_at: 1, "
                              f"grow_s: 90, free: '{free}'}}\n"
                              "scaling: {num_workers: {min: 1, max: 2}}\n"
                              "resources: {cpus: 2}\n")
    proc = run_orch(ray_home, "submit", str(job), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    out = run_orch(ray_home, "logs", rec["id"], "--events").stdout or run_orch(
        ray_home, "logs", rec["id"]).stdout
    reports = [ev for ev in events.parse(out) if ev["event"] == "report"]
    worlds = [(ev["metrics"]["epoch"], ev["metrics"]["world"]) for ev in reports]
    assert rec["status"] == "SUCCEEDED" and rec["metrics"]["epoch"] == 4, (rec["message"], worlds)
    # Started on 1 and grew to 2: on 1, the loop waits for the growth after its first epoch
    # (Ray Train looks for room every 10 s, jobs/elastic.py) for at most 90 s, then trains on.
    assert worlds[0][1] == 1 and worlds[-1] == (4, 2), worlds
    assert {e for e, _ in worlds} == set(range(1, 5)), worlds  # every epoch, from the checkpoint
    assert run_orch(ray_home, "status", holder_id, "--json").returncode == 0
