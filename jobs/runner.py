"""The Ray Train driver orch starts on the target: `python -m jobs.runner`.

It reads its run request (jobs.request.RunRequest) from the ORCH_RUN variable, joins the
target's Ray (RAY_ADDRESS is set by the Ray Jobs API), runs a TorchTrainer and prints
events (see jobs/events.py) that orch reads from the log. The same runner runs on this
workstation, on an on-prem cluster and on a cloud VM. On a Ray target the job's secret
values reach it through jobs.secret_env, never its runtime env; it hands them to its
workers in their config.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import sys
import time
from typing import Any, Callable

from jobs import events, secret_env
from jobs.request import ENV_VAR, BadRequest, RunRequest, WorkerOptions

_OPTIONS_KEY = "__orch__"


def resolve_callable(target: str) -> Callable:
    from jobs.builtin import BUILTIN_JOBS

    target = BUILTIN_JOBS.get(target, target)
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    fn = getattr(module, attr)
    if not callable(fn):
        raise TypeError(f"{target} is not callable")
    return fn


def worker_entry(config: dict) -> Any:
    """What each Ray Train worker runs: set up orch's context, then the real loop."""
    from jobs import context

    config = dict(config)
    options: WorkerOptions = config.pop(_OPTIONS_KEY)
    # This node's copy of the working_dir may still hold the secret file: the values came
    # in the config instead, so it goes before the user's code runs.
    secret_env.discard()
    if options.env is not None:
        secret_env.apply(options.env.values)
        options = dataclasses.replace(options, env=None)
    if os.getcwd() not in sys.path:  # the job's workdir, where a user's entrypoint lives
        sys.path.insert(0, os.getcwd())
    ctx = context.install(options)
    import ray

    events.emit("worker", rank=ctx.rank, node_id=ray.get_runtime_context().get_node_id())
    fn = resolve_callable(options.target)
    return fn(config)


def _make_reporter(where: Callable[[Any], Any] = lambda path: path):
    from ray.train import UserCallback

    class OrchReporter(UserCallback):
        """Runs on the controller: every report of rank 0 becomes a `report` event."""

        def __init__(self):
            self.count = 0

        def after_report(self, run_context, metrics, checkpoint):
            self.count += 1
            m = metrics[0] if metrics else {}
            events.emit("report", index=self.count, metrics=m,
                        checkpoint=where(getattr(checkpoint, "path", None)))

        def after_exception(self, run_context, worker_exceptions):
            for rank, exc in worker_exceptions.items():
                events.emit("worker_error", rank=rank, error=f"{type(exc).__name__}: {exc}")

    return OrchReporter()


def _use_gpu(requested: Any, num_workers: int) -> bool:
    import ray

    if requested != "auto":
        return bool(requested)
    return ray.cluster_resources().get("GPU", 0) >= num_workers


def _fresh_package(hidden: dict) -> dict:
    """ray.init's arguments that give this job's workers a package without the secret file.

    The job's working_dir package held the file; its copy here (this process's cwd) is
    gone, but any other node that unpacked that package for a Train worker or actor would
    leave a copy on its disk. So the job's tasks and actors get this folder packed again,
    now without the file: the first package is unpacked on this node alone.
    """
    if not hidden:
        return {}
    os.environ["RAY_OVERRIDE_JOB_RUNTIME_ENV"] = "1"  # this working_dir wins over the job's
    return {"runtime_env": {"working_dir": os.getcwd()}}


# Ray Train settings the runner starts with, unless the job's environment sets them (Ray
# Train hands them on to its controller and workers). Measured on a 2-core machine, a
# near-empty two-worker job (benchmarks/bench_runner_overhead.py):
# - the preemption watcher is one more actor process per run, started while the workers
#   import torch; it acts on a node being drained (an autoscaler's or a spot VM's notice),
#   which neither a workstation nor orch's on-prem cluster sends, and a lost node is still
#   caught by the health check;
# - the controller checks its workers every 2 s by default, and a run's first step and its
#   end are noticed only at such a check.
TRAIN_ENV = {"RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
             "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5"}


# Ray Train callbacks the runner leaves out, each one actor process fewer per run (Ray
# Train 2.50-2.60; another version without them is left as it is):
# - DatasetsCallback starts a DatasetManager actor for the run's Ray Datasets, even when
#   there are none, as here (the loop builds its own DataLoader);
# - PlacementGroupCleanerCallback starts a detached actor that removes the workers'
#   placement group should the controller die while its driver lives on (as under Ray
#   Tune); the runner's driver ends with its run, and Ray removes a finished job's groups.
def _trainer_class(base: type) -> type:
    class Trainer(base):  # a subclass of the class given (TorchTrainer)
        def _create_default_callbacks(self):
            left_out = {"PlacementGroupCleanerCallback"}
            if not getattr(self, "datasets", None):  # Ray Datasets would need their manager
                left_out.add("DatasetsCallback")
            return [c for c in super()._create_default_callbacks()
                    if type(c).__name__ not in left_out]

    return Trainer


def run(req: RunRequest) -> int:
    for key, value in TRAIN_ENV.items():
        os.environ.setdefault(key, value)
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from jobs.storage import display_path, storage_args

    started = time.monotonic()
    # What jobs.secret_env took out of its file before this process started; or the file
    # itself, when the runner was started without that step.
    hidden = {**secret_env.take(), **secret_env.from_environ()}
    ray.init(log_to_driver=True, **_fresh_package(hidden))
    use_gpu = _use_gpu(req.use_gpu, req.num_workers)
    budget = req.budget
    if budget is not None and budget.t0 is None:  # orch's clock when it holds the hardware
        budget = dataclasses.replace(budget, t0=time.time())  # from submission, else ours
    # Ray Train workers are started by the cluster's raylet, not by this process, so they
    # do not inherit its environment; the secret values go in their config, wrapped so Ray
    # Train's run state (shown on the dashboard) prints their names only.
    options = WorkerOptions.of(req, budget, secret_env.Hidden(hidden) if hidden else None)
    resolve_callable(req.target)  # fail here, once, rather than in every worker
    config = dict(req.config)
    config[_OPTIONS_KEY] = options
    events.emit("start", num_workers=req.num_workers, use_gpu=use_gpu, target=req.target,
                storage_path=req.storage_path, run_name=req.name)
    storage = storage_args(req.storage_path, req.s3_endpoint_url)
    where = functools.partial(display_path, args=storage)
    trainer = _trainer_class(TorchTrainer)(
        worker_entry,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=req.num_workers, use_gpu=use_gpu,
                                     placement_strategy=req.placement.upper()),
        run_config=RunConfig(
            # Fixed per run: a restarted worker group, or a later job resuming this run
            # (checkpoint.resume_from), finds its checkpoints under this name.
            name=req.name,
            **storage,  # storage_path None: Ray's default on the cluster
            checkpoint_config=CheckpointConfig(num_to_keep=req.num_to_keep),
            failure_config=FailureConfig(max_failures=req.max_failures),
            callbacks=[_make_reporter(where)],
        ),
    )
    try:
        result = trainer.fit()
    except Exception as e:  # TrainingFailedError and friends: say why, exit non-zero
        events.emit("result", ok=False, error=f"{type(e).__name__}: {e}",
                    wall_s=round(time.monotonic() - started, 2))
        print(f"orch runner: training failed: {e}", file=sys.stderr)
        return 1
    checkpoint = getattr(result, "checkpoint", None)
    _prune(checkpoint, req.num_to_keep)
    events.emit("result", ok=True, metrics=result.metrics or {},
                checkpoint=where(getattr(checkpoint, "path", None)),
                wall_s=round(time.monotonic() - started, 2))
    _print_verdict(result.metrics or {})
    return 0


def _prune(checkpoint, keep: int) -> None:
    """Leave `keep` checkpoints in the run's folder; a failure to tidy is said, not fatal."""
    from jobs.storage import prune_checkpoints

    if checkpoint is None:
        return
    try:
        stale = prune_checkpoints(checkpoint, keep)
    except Exception as e:  # noqa: BLE001  (the job succeeded; the storage said no)
        print(f"orch runner: could not remove old checkpoints: {e}", file=sys.stderr)
        return
    if stale:
        events.emit("pruned", checkpoints=stale)


def _print_verdict(metrics: dict) -> None:
    """Where the time went, and what would help: at the end of every run, in its log."""
    from jobs.verdict import diagnose

    verdict = diagnose(metrics)
    if verdict is None:
        return
    events.emit("verdict", **verdict)
    print(f"orch runner: {verdict['kind']}: {'; '.join(verdict['reasons'])}")
    for advice in verdict["advice"]:
        print(f"orch runner:   try: {advice}")


def main() -> int:
    raw = os.environ.get(ENV_VAR)
    if not raw:
        print(f"orch runner: {ENV_VAR} is not set; this module is started by orch", file=sys.stderr)
        return 2
    try:
        return run(RunRequest.from_json(raw))
    except (secret_env.MissingFile, BadRequest) as e:
        events.emit("result", ok=False, error=f"orch runner: {e}")
        print(f"orch runner: {e}", file=sys.stderr)
        return 2


def _exit(code: int) -> None:
    """Leave without the interpreter's teardown: once Ray is shut down (its logs and the
    GCS told), unloading torch and the rest only delays the job's end, by 0.9 s a job on a
    2-core machine (1.25 s from the result to Ray's job end, 0.39 s this way)."""
    import ray

    ray.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
