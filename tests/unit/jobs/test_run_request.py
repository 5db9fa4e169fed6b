"""The runner's input: one typed RunRequest, written by orch, read back by the runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from jobs.context import cpus_for_worker
from jobs.request import BadRequest, Budget, RunRequest, WorkerOptions

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_a_request_survives_its_json():
    req = RunRequest(job_id="orch-1", target="image-classification", num_workers=2,
                     config={"epochs": 3}, use_gpu=True, loader_workers=4, cpus_per_worker=3,
                     budget=Budget(limit_usd=2.5, price_per_hour_usd=1.75, what="budget.max_cost"),
                     telemetry_point_s=2.0)
    back = RunRequest.from_json(req.to_json())
    assert back == req and back.budget == req.budget and back.name == "orch-1"
    options = WorkerOptions.of(back, back.budget)
    assert options.cpus_per_worker == 3 and options.telemetry_point_s == 2.0


@pytest.mark.parametrize("change, named", [
    ({"num_workers": 0}, "num_workers"), ({"num_workers": "2"}, "num_workers"),
    ({"use_gpu": "yes"}, "use_gpu"), ({"loader_workers": -1}, "loader_workers"),
    ({"precision": "fp8"}, "precision"), ({"placement": "ring"}, "placement"),
    ({"cpus_per_worker": 0}, "cpus_per_worker"), ({"config": []}, "config"),
    ({"telemetry_point_s": 0.5}, "telemetry_point_s is 0.5; want seconds between 1 and 3600"),
    ({"telemetry_point_s": True}, "telemetry_point_s"),
    ({"cpu_per_worker": 2}, "does not know: cpu_per_worker"),
    ({"budget": {"limit_usd": 1, "price_per_hour_usd": 1, "t1": 0}}, "unknown fields: t1"),
])
def test_a_bad_request_is_refused_by_name(change, named):
    data = {**json.loads(RunRequest(job_id="orch-1", target="m:f").to_json()), **change}
    with pytest.raises(BadRequest, match=named):
        RunRequest.from_dict(data)


def test_a_request_without_its_job_or_loop_is_refused():
    with pytest.raises(BadRequest, match="lacks job_id, target"):
        RunRequest.from_dict({"num_workers": 1})
    with pytest.raises(BadRequest, match="not JSON"):
        RunRequest.from_json("{")


def test_the_runner_refuses_a_bad_request_with_one_line_and_exit_2():
    env = {**os.environ, "ORCH_RUN": json.dumps({"job_id": "orch-1", "target": "m:f",
                                                "precision": "fp8"}), "PYTHONPATH": REPO}
    proc = subprocess.run([sys.executable, "-m", "jobs.runner"], env=env, capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert "ORCH_RUN.precision is 'fp8'; want auto, fp32, bf16 or fp16" in proc.stderr
    assert "Traceback" not in proc.stderr
    # orch reads why from the same event a failed run prints
    event = json.loads(proc.stdout.strip().removeprefix("::orch::"))
    assert event["event"] == "result" and event["ok"] is False and "fp8" in event["error"]


def test_a_worker_shares_its_node_cpus_unless_the_job_file_said():
    opts = WorkerOptions(job_id="j", target="m:f")
    node = len(os.sched_getaffinity(0))
    assert cpus_for_worker(opts, 1) == node
    assert cpus_for_worker(opts, node * 4) == 1  # never below one
    assert cpus_for_worker(WorkerOptions(job_id="j", target="m:f", cpus_per_worker=6), 2) == 6


def test_the_runners_trainer_starts_no_dataset_manager_and_no_placement_group_cleaner(tmp_path):
    # Each is one more actor process per run (see jobs/runner.py); the real Ray Train's
    # default callbacks, with those two left out and the others kept.
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from jobs.trainer import trainer_class

    def loop(config):
        pass

    kw = dict(scaling_config=ScalingConfig(num_workers=1),
              run_config=RunConfig(name="t", storage_path=str(tmp_path)))
    plain = {type(c).__name__ for c in TorchTrainer(loop, **kw)._create_default_callbacks()}
    ours = {type(c).__name__ for c in trainer_class(TorchTrainer)(loop, **kw)._create_default_callbacks()}
    assert {"DatasetsCallback", "PlacementGroupCleanerCallback"} <= plain
    assert ours == plain - {"DatasetsCallback", "PlacementGroupCleanerCallback"}
    assert "BackendSetupCallback" in ours


def test_the_runners_scaling_policy_sends_no_autoscaler_requests():
    # Ray Train's fixed policy would create Ray Data's AutoscalingCoordinator actor (and, with
    # no Ray started here, start one); the runner's keeps every decision and sends nothing.
    from ray.train import ScalingConfig
    from ray.train.v2._internal.execution.scaling_policy import (
        FixedScalingPolicy,
        ResizeDecision,
        create_scaling_policy,
    )

    from jobs.trainer import without_autoscaler_requests

    plain = create_scaling_policy(ScalingConfig(num_workers=3))
    assert type(plain) is FixedScalingPolicy
    ours = without_autoscaler_requests(plain)
    assert isinstance(ours, FixedScalingPolicy) and type(ours) is not FixedScalingPolicy
    ours.after_controller_start(object())
    decision = ours.make_decision_for_non_running_worker_group()
    assert isinstance(decision, ResizeDecision) and decision.num_workers == 3
    assert ours._coordinator_client is None
    ours.before_controller_abort()  # nothing to cancel
    other = object()
    assert without_autoscaler_requests(other) is other  # an elastic policy, or another's
