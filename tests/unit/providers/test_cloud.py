"""The cloud provider: real sky.Task objects, and the SDK boundary through a replaying fake."""

from __future__ import annotations

import copy
import json

import pytest

from orchestrator.base.errors import BackendError
from orchestrator.decision.cloud_bill import update_ledger
from orchestrator.service import following, submitting
from orchestrator.service.orch import Orch
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from providers.base import BackendState
from providers.cloud import CloudProvider, build_task
from tests import fake_sky
from tests.conftest import ROOT
from tests.fake_sky import FakeSky, catalog_offline

T0 = 1_800_000_000.0
JOB = """\
name: explore
resources:
  accelerators: {accel}
train:
  job: image-classification
estimate: {{hours: 1.5, gpu: A100}}
checkpoint: {{storage: "s3://bucket/ckpt"}}
"""
RESULT = "::orch::" + json.dumps({"event": "result", "ok": True, "metrics": {"epoch": 3, "accuracy": 0.95}})


@pytest.fixture
def orch(tmp_path, monkeypatch):
    monkeypatch.setattr("providers.cloud.enabled_clouds", lambda clouds: (list(clouds), {}))
    settings = Settings(home=tmp_path / "home", mode="hybrid", clouds=["lambda", "runpod", "aws"],
                        catalog_dir=ROOT / "examples" / "catalog")
    return Orch(settings)


def use_fake(orch, script, clock=None, **kw) -> FakeSky:
    fake = FakeSky(script, logs=kw.pop("logs", RESULT), **kw)
    ticks = iter(clock or [])
    orch.core.providers["cloud"] = CloudProvider(sdk=fake, startup_minutes=6,
                                             clock=lambda: next(ticks, T0 + 10_000))
    return fake


def statuses(orch, rec, n):
    seen = []
    for _ in range(n):
        rec = orch.refresh(orch.get(rec.id))
        seen.append(rec.status)
    return rec, seen


def strip(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if not k.startswith("_")}


@pytest.mark.parametrize("accel", ["H100:1", "{H100: 1, A100-80GB: 1}", "[H100:1, A100:1]"])
def test_task_round_trips_through_skypilot_yaml(orch, accel):
    import sky

    spec = load_spec_text(JOB.format(accel=accel), "explore.yaml")
    decision = submitting.place(orch.core, spec, "fp", False)
    assert decision.target == "cloud"
    launch = orch.for_cloud(orch.launch_for("orch-t", spec, "cloud", decision), spec, decision)
    task = build_task(launch)
    cfg = task.to_yaml_config()
    # from_yaml_config consumes the dict it is given, so hand it a copy.
    again = sky.Task.from_yaml_config(copy.deepcopy(cfg)).to_yaml_config()
    assert strip(again) == strip(cfg)
    ordered = cfg["resources"]["ordered"]
    first = decision.choice
    assert ordered[0]["infra"] == f"{first.cloud}/{first.region}"
    assert ordered[0]["accelerators"] == {first.gpu: first.count}
    assert ordered[0]["use_spot"] is first.spot
    assert len(ordered) >= 2  # fallbacks in cost order
    allowed = {c.name for c in spec.resources.accelerator_choices()}
    assert all(next(iter(r["accelerators"])) in allowed for r in ordered)
    assert cfg["envs"]["ORCH_JOB_ID"] == "orch-t" and "_orch_runner.runner" in cfg["run"]
    # The preemption contract, as SkyPilot reads it: exit 75 recovers, not counted an error.
    assert cfg["envs"]["ORCH_PREEMPTED_EXIT_CODE"] == "75"
    recovery = ordered[0]["job_recovery"]
    assert recovery["recover_on_exit_codes"] == [75]
    assert recovery["max_restarts_on_errors"] == (1 if first.spot else 0)


def test_pending_starting_running_succeeded(orch):
    spec = load_spec_text(JOB.format(accel="H100:1"), "explore.yaml")
    fake = use_fake(orch, [
        {"status": "PENDING"}, {"status": "STARTING"},
        {"status": "RUNNING", "start_at": T0, "cloud": "runpod", "region": "US",
         "resources": "1x runpod([Spot], {'H100': 1})"},
        {"status": "SUCCEEDED", "start_at": T0, "end_at": T0 + 1800, "cloud": "runpod",
         "region": "US", "resources": "1x runpod([Spot], {'H100': 1})", "job_duration": 1800}])
    rec = orch.submit(spec).rec
    assert len(fake.launched) == 1 and fake.launched[0][1] == rec.id
    rec, seen = statuses(orch, rec, 4)
    assert seen == ["PENDING", "PENDING", "RUNNING", "SUCCEEDED"]
    ledger = rec.info.ledger
    assert len(ledger.launches) == 1 and ledger.launches[0].price_per_hour == 1.75
    assert ledger.cost_usd == pytest.approx(1.75 * (0.5 + 0.1))
    assert rec.metrics.number("accuracy") == 0.95


def test_recovery_cost_is_summed_over_both_runs(orch):
    spec = load_spec_text(JOB.format(accel="H100:1"), "explore.yaml")
    where = {"cloud": "runpod", "region": "US", "resources": "1x runpod([Spot], {'H100': 1})"}
    use_fake(orch, [
        {"status": "RUNNING", "start_at": T0, **where},
        {"status": "RECOVERING", "start_at": T0, **where},
        {"status": "RUNNING", "start_at": T0, "recovery_count": 1, "last_recovered_at": T0 + 900, **where},
        {"status": "SUCCEEDED", "start_at": T0, "recovery_count": 1, "last_recovered_at": T0 + 900,
         "end_at": T0 + 2700, **where}],
        clock=[T0 + 100, T0 + 600, T0 + 1000, T0 + 2800])
    rec = orch.submit(spec).rec
    rec, seen = statuses(orch, rec, 4)
    assert seen == ["RUNNING", "RUNNING", "RUNNING", "SUCCEEDED"]
    ledger = rec.info.ledger
    first, second = ledger.launches
    assert (first.started_at, first.ended_at, first.reason) == (T0, T0 + 600, "preempted")
    assert (second.started_at, second.ended_at) == (T0 + 900, T0 + 2700)
    assert ledger.recoveries == 1
    assert ledger.cost_usd == pytest.approx(1.75 * (600 / 3600 + 0.1) + 1.75 * (1800 / 3600 + 0.1))
    cost = rec.info.cost  # orch cost's ledger line, kept with the job when it finished
    assert cost.cost_usd == pytest.approx(ledger.cost_usd) and cost.recoveries == 1
    assert cost.hours == pytest.approx((600 + 360 + 1800 + 360) / 3600)
    assert cost.target == "cloud" and cost.alternative.cost_usd > 0


def test_recovering_is_reported_while_it_happens(orch):
    spec = load_spec_text(JOB.format(accel="H100:1"), "explore.yaml")
    use_fake(orch, [{"status": "RUNNING", "start_at": T0}, {"status": "RECOVERING", "start_at": T0}])
    rec = orch.submit(spec).rec
    rec, _ = statuses(orch, rec, 2)
    assert rec.status == "RUNNING" and "recovering" in rec.message


@pytest.mark.parametrize("sky_status,words", [
    ("FAILED_SETUP", "setup commands failed"),
    ("FAILED_NO_RESOURCE", "no capacity for any offer"),
    ("FAILED_CONTROLLER", "controller failed"),
])
def test_failures_end_failed_with_a_reason(orch, sky_status, words):
    spec = load_spec_text(JOB.format(accel="{H100: 1, A100-80GB: 1}"), "explore.yaml")
    fake = use_fake(orch, [{"status": "PENDING"}, {"status": sky_status, "failure_reason": "boom"}],
                    logs="setup: pip failed\n")
    rec = orch.submit(spec).rec
    rec, seen = statuses(orch, rec, 2)
    assert seen == ["PENDING", "FAILED"]
    assert words in rec.message and "boom" in rec.message
    # SkyPilot got the next offers to try before giving up on capacity.
    assert len(fake.launched[0][0].resources) >= 2


def test_a_launch_request_that_fails_before_any_job_exists(orch):
    spec = load_spec_text(JOB.format(accel="H100:1"), "explore.yaml")
    use_fake(orch, [], request_status="FAILED",
             request_error="NoCloudAccessError: no cloud access")
    rec = orch.submit(spec).rec
    rec = orch.refresh(rec)
    assert rec.status == "FAILED" and "NoCloudAccessError" in rec.message


def test_cancel_and_no_double_launch(orch):
    spec = load_spec_text(JOB.format(accel="H100:1"), "explore.yaml")
    fake = use_fake(orch, [{"status": "RUNNING", "start_at": T0}])
    rec = orch.submit(spec).rec
    launch = orch.for_cloud(orch.launch_for(rec.id, spec, "cloud", rec.decision), spec,
                            rec.decision)
    assert orch.provider("cloud").submit(launch) == rec.id  # already in SkyPilot's queue
    assert len(fake.launched) == 1
    rec = following.cancel(orch.core, rec.id, wait_s=5)
    assert fake.cancelled == [rec.id] and rec.status == "CANCELLED"


def test_ledger_misses_no_recovery_between_polls():
    offers = [{"cloud": "runpod", "region": "US", "spot": True, "price_per_hour": 2.0}]
    ledger = update_ledger(None, {"status": "RUNNING", "start_at": T0, "cloud": "runpod",
                                  "region": "US"}, offers, T0 + 60, 0)
    # The next poll sees it running again after a recovery it never saw happen.
    ledger = update_ledger(ledger, {"status": "RUNNING", "start_at": T0, "recovery_count": 1,
                                    "last_recovered_at": T0 + 1200, "cloud": "runpod",
                                    "region": "US"}, offers, T0 + 1800, 0)
    assert len(ledger.launches) == 2 and ledger.launches[0].ended_at == T0 + 1200
    assert ledger.launches[0].reason == "preempted" and ledger.recoveries == 1
    assert ledger.cost_usd == pytest.approx(2.0 * (1200 + 600) / 3600)
    # As a job's info keeps it (JSON), the next poll reads it back the same.
    again = update_ledger(ledger.model_dump(mode="json"), {"status": "SUCCEEDED", "end_at": T0 + 2400,
                                                          "recovery_count": 1}, offers, T0 + 3000, 0)
    assert again.launches[1].reason == "succeeded" and again.launches[1].ended_at == T0 + 2400
    assert again.cost_usd == pytest.approx(2.0 * (1200 + 1200) / 3600)


def test_no_cloud_credentials_is_a_clear_refusal(orch_home, tmp_path):
    """With nothing to fall back to, `orch submit` explains and exits 2, without hanging."""
    import time

    from tests.conftest import run_orch

    start = time.monotonic()
    proc = run_orch(orch_home, "submit", str(ROOT / "examples" / "explore.yaml"),
                    ORCH_MODE="hybrid", ORCH_CLOUDS="lambda,runpod,aws",
                    ORCH_CATALOG_DIR=str(ROOT / "examples" / "catalog"), HOME=str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "no configured cloud has credentials here" in proc.stderr and "sky check" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - start < 60
    assert not (orch_home / "orch.db").exists()


def test_a_multi_node_train_job_rents_n_vms_and_joins_them_in_one_ray_cluster(orch):
    spec = load_spec_text("num_nodes: 2\n" + JOB.format(accel="H100:1")
                          + "scaling: {num_workers: 2}\n", "explore.yaml")
    fake = use_fake(orch, [
        {"status": "RUNNING", "start_at": T0, "cloud": "runpod", "region": "US",
         "resources": "2x runpod([Spot], {'H100': 1})"},
        {"status": "SUCCEEDED", "start_at": T0, "end_at": T0 + 1800, "cloud": "runpod",
         "region": "US", "resources": "2x runpod([Spot], {'H100': 1})"}])
    rec = orch.submit(spec).rec
    choice = rec.choice
    assert (choice.target, choice.count, choice.nodes) == ("cloud", 1, 2)
    task = fake.launched[0][0]
    assert task.num_nodes == 2
    assert "python3 -m _orch_runner.multinode -- python3 -m _orch_runner.runner" in task.run
    # Each cluster its own token, as a SkyPilot secret: never in the envs or the record.
    token = task.secrets["RAY_AUTH_TOKEN"].get_secret_value()
    assert len(token) == 64 and "RAY_AUTH_TOKEN" not in task.envs
    assert token not in json.dumps(rec.model_dump(mode="json"), default=str)
    rec, seen = statuses(orch, rec, 2)
    assert seen == ["RUNNING", "SUCCEEDED"]
    # The ledger bills both VMs: the choice's price is per job, num_nodes x the offer's.
    assert rec.info.ledger.cost_usd == pytest.approx(2 * 1.75 * (0.5 + 0.1))


def test_a_multi_node_run_job_runs_its_own_command_on_every_node(orch):
    spec = load_spec_text("name: mpi\nnum_nodes: 2\nrun: mpirun ./a.out\n"
                          "resources: {accelerators: H100:1}\nestimate: {hours: 1, gpu: H100}\n",
                          "mpi.yaml")
    decision = submitting.place(orch.core, spec, "fp", False)
    assert decision.target == "cloud" and decision.choice.nodes == 2
    launch = orch.for_cloud(orch.launch_for("orch-t", spec, "cloud", decision), spec, decision)
    task = build_task(launch)
    assert task.num_nodes == 2 and "mpirun ./a.out" in task.run
    assert "_orch_runner.multinode" not in task.run and not task.secrets  # SkyPilot's own way


def test_a_multi_node_train_job_with_fewer_workers_than_nodes_is_refused(orch):
    from orchestrator.base.errors import InputError

    spec = load_spec_text("num_nodes: 2\n" + JOB.format(accel="H100:1"), "explore.yaml")
    use_fake(orch, [])
    with pytest.raises(InputError, match="a rented node would have no worker"):
        orch.submit(spec)
    assert orch.core.store.list() == []


# What SkyPilot's API server answers where it has no jobs controller (replayed by the fake as
# a real server gave them: tests/integration/test_sky_api_server.py), each to one orch outcome.

def test_no_jobs_controller_means_skypilot_has_no_job():
    fake = FakeSky([])
    provider = CloudProvider(sdk=fake)
    from sky.exceptions import ClusterNotUpError

    with pytest.raises(ClusterNotUpError, match="No in-progress managed jobs"):
        fake.queue("orch-gone")  # what the SDK raises
    assert provider.state("orch-gone") == BackendState("FAILED", "SkyPilot has no job orch-gone",
                                                           unknown=True)
    # A launch of it may still be provisioning SkyPilot's first controller.
    fake.request_status = "RUNNING"
    assert provider.state("orch-gone", {"sky_request_id": "r1"}).status == "PENDING"
    assert provider.logs("orch-gone") == ""
    provider.cancel("orch-gone")  # nothing in progress there: already ended, no error
    assert fake.cancelled == []


def test_a_stopped_jobs_controller_cannot_say_what_became_of_a_job():
    provider = CloudProvider(sdk=FakeSky([{"status": "RUNNING"}], controller="STOPPED"))
    with pytest.raises(BackendError, match="controller is STOPPED") as err:
        provider.state("orch-old")
    assert "sky jobs queue --refresh" in (err.value.hint or "")
    provider.cancel("orch-old")  # "All managed jobs should have finished."


def test_the_first_launch_goes_ahead_with_no_controller_and_no_job_twice(orch):
    spec = load_spec_text(JOB.format(accel="H100:1"), "explore.yaml")
    fake = use_fake(orch, [{"status": "PENDING"}])
    rec = orch.submit(spec).rec
    assert [name for _, name in fake.launched] == [rec.id] and rec.status != "FAILED"


def test_a_catalog_that_cannot_be_downloaded_fails_the_launch_with_a_hint(orch, capsys):
    orch.settings = orch.settings.model_copy(update={"backend_retries": 1})
    spec = load_spec_text(JOB.format(accel="H100:1"), "explore.yaml")
    fake = use_fake(orch, [], launch_error=catalog_offline())
    with pytest.raises(BackendError) as err:
        orch.submit(spec)
    assert err.value.message.endswith(
        "SkyPilot could not download its catalog common/accelerators.csv from "
        "raw.githubusercontent.com (CloudError: no network?) (after 1 attempts)")
    assert "let this machine reach raw.githubusercontent.com" in (err.value.hint or "")
    assert fake.launched == []
    (rec,) = orch.core.store.list()
    assert rec.status == "FAILED" and rec.message.startswith("launch failed: SkyPilot did not accept")
    assert "catalog common/accelerators.csv" in rec.message and "Traceback" not in capsys.readouterr().err


def test_a_catalog_download_refused_without_cloud_error_is_named_too():
    import requests

    from providers.cloud import refusal

    # What a launch on an aws instance type raised with no network (the client's own download).
    e = requests.exceptions.ConnectionError(fake_sky.CATALOG_OFFLINE.replace(
        "common/accelerators.csv", "aws/vms.csv"))
    what, hint = refusal(e)
    assert what == ("SkyPilot could not download its catalog aws/vms.csv from "
                    "raw.githubusercontent.com (ConnectionError: no network?)")
    assert refusal(ValueError("bad\nmore"))[0] == "ValueError: bad"


SUBMIT_TO_A_DEAD_SERVER = """
import json, sys, time
import providers.cloud
providers.cloud.enabled_clouds = lambda clouds: (list(clouds), {})  # the cloud's own boundary
from orchestrator.base.errors import BackendError
from orchestrator.service.orch import Orch
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
home, catalogs, job = sys.argv[1:]
orch = Orch(Settings(home=home, mode="hybrid", clouds=["lambda"], catalog_dir=catalogs,
                     backend_retries=1))
spec = load_spec_text(job, "explore.yaml")
import sky  # noqa: E402,F401  (its import, seconds of CPU on a busy machine, is not what is timed)
from sky.client import sdk  # noqa: E402,F401
start = time.monotonic()
try:
    orch.submit(spec)
    print(json.dumps({"error": None}))
except BackendError as e:
    print(json.dumps({"error": e.message, "hint": e.hint, "took": time.monotonic() - start,
                      "status": orch.core.store.list()[0].status}))
"""


def test_a_skypilot_api_server_that_does_not_answer_is_named_in_seconds(tmp_path):
    """SkyPilot's real client, its API server endpoint a closed loopback port: the launch
    fails at once naming the server and what to check, never a hang or a traceback."""
    import os
    import subprocess
    import sys

    from providers.local_ray import _free_port

    server = f"http://127.0.0.1:{_free_port()}"
    env = {**os.environ, "HOME": str(tmp_path), "SKY_RUNTIME_DIR": str(tmp_path),
           "SKYPILOT_API_SERVER_ENDPOINT": server, "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", SUBMIT_TO_A_DEAD_SERVER, str(tmp_path / "orch"),
                           str(ROOT / "examples" / "catalog"), JOB.format(accel="H100:1")],
                          env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["error"].endswith(f": cannot reach SkyPilot's API server at {server} (after 1 attempts)")
    assert "SKYPILOT_API_SERVER_ENDPOINT" in got["hint"] and "sky api info" in got["hint"]
    assert got["status"] == "FAILED" and got["took"] < 10, got


def test_the_launched_task_carries_the_job_files_own_task_keys(orch):
    """What `orch submit` hands SkyPilot, not only what `orch plan --emit sky` prints."""
    spec = load_spec_text(JOB.format(accel="H100:1") + "volumes: {/mnt/ckpt: team-volume}\n"
                          "config: {docker: {run_options: ['--shm-size=16g']}}\n", "explore.yaml")
    fake = use_fake(orch, [{"status": "PENDING"}])
    orch.submit(spec)
    task = fake.launched[0][0]
    assert task.volumes == {"/mnt/ckpt": "team-volume"}
    assert all(r.cluster_config_overrides == {"docker": {"run_options": ["--shm-size=16g"]}}
               for r in task.resources)
    assert "_orch_runner.runner" in task.run and task.envs["ORCH_JOB_ID"]  # the rest as before


class CountingLogs(FakeSky):
    """The fake SDK, counting the reads of a job's whole log."""

    log_reads = 0

    def logs(self, name: str) -> str:
        self.log_reads += 1
        return super().logs(name)


def test_a_follower_reads_a_running_jobs_log_once_each_time_it_looks(orch):
    from orchestrator.client import Local

    spec = load_spec_text(JOB.format(accel="H100:1"), "explore.yaml")
    running = {"status": "RUNNING", "start_at": T0, "cloud": "runpod", "region": "US"}
    progress = "::orch::" + json.dumps({"event": "progress", "epoch": 1, "epochs": 3,
                                        "step": 2, "steps": 9})
    fake = CountingLogs([running], logs=progress)
    orch.core.providers["cloud"] = CloudProvider(sdk=fake, startup_minutes=6, clock=lambda: T0 + 60)
    rec = orch.submit(spec).rec
    client = Local(orch.settings, orch=orch)
    before = fake.log_reads
    rec, text = client.poll(rec.id)
    # The refresh read the log for the job's metrics; the follower is handed that same text.
    assert rec.status == "RUNNING" and text == progress
    assert fake.log_reads - before == 1
    # Where the refresh reads no log (a job that has ended), the follower reads it itself.
    fake.script = [{**running, "status": "SUCCEEDED", "end_at": T0 + 120}]
    fake.step = -1
    rec, text = client.poll(rec.id)
    assert rec.status == "SUCCEEDED" and text == progress


def test_a_credential_check_that_hangs_is_not_waited_for(monkeypatch):
    import threading
    import time

    from sky.utils import registry

    from providers.cloud import enabled_clouds

    release = threading.Event()

    class Cloud:
        def __init__(self, how):
            self.how = how

        def check_credentials(self, capability):
            if self.how == "hangs":
                release.wait(30)  # an API that does not answer
            if self.how == "raises":
                raise ConnectionError("no route to the API")
            return (True, None) if self.how == "good" else (False, "no key\nmore lines")

    clouds = {name: Cloud(name) for name in ("good", "hangs", "raises", "bad")}
    monkeypatch.setattr(registry.CLOUD_REGISTRY, "from_str", lambda name: clouds.get(name))
    started = time.monotonic()
    try:
        ok, why = enabled_clouds(["hangs", "good", "raises", "bad", "moon"], timeout_s=0.5)
    finally:
        release.set()
    assert time.monotonic() - started < 5  # not the 30 s the hanging check would take
    assert ok == ["good"]
    assert why == {"hangs": "its credential check did not answer within 0.5 s (`sky check hangs` "
                            "shows what it waits for)",
                   "raises": "ConnectionError: no route to the API", "bad": "no key more lines",
                   "moon": "not a SkyPilot cloud"}
