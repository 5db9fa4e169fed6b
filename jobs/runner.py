"""The Ray Train driver orch starts on the target: `python -m jobs.runner`.

It reads the run description from the ORCH_RUN environment variable (JSON), joins the
target's Ray (RAY_ADDRESS is set by the Ray Jobs API), runs a TorchTrainer and prints
events (see jobs/events.py) that orch reads from the log. The same runner runs on this
workstation, on an on-prem cluster and on a cloud VM. On a Ray target the job's secret
values reach it through jobs.secret_env, never its runtime env; it hands them to its
workers in their config.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
import time
from typing import Any, Callable

from jobs import events, secret_env

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
    options = dict(config.pop(_OPTIONS_KEY))
    hidden = options.pop("env", None)
    # This node's copy of the working_dir may still hold the secret file: the values came
    # in the config instead, so it goes before the user's code runs.
    secret_env.discard()
    if hidden is not None:
        secret_env.apply(hidden.values)
    if os.getcwd() not in sys.path:  # the job's workdir, where a user's entrypoint lives
        sys.path.insert(0, os.getcwd())
    ctx = context.install(options)
    import ray

    events.emit("worker", rank=ctx.rank, node_id=ray.get_runtime_context().get_node_id())
    fn = resolve_callable(options["target"])
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


def run(spec: dict) -> int:
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from jobs.storage import display_path, storage_args

    started = time.monotonic()
    # What jobs.secret_env took out of its file before this process started; or the file
    # itself, when the runner was started without that step.
    hidden = {**secret_env.take(), **secret_env.from_environ()}
    ray.init(log_to_driver=True)
    num_workers = int(spec["num_workers"])
    use_gpu = _use_gpu(spec.get("use_gpu", "auto"), num_workers)
    options = {k: spec.get(k) for k in ("precision", "loader_workers", "pin_memory", "cpus_per_worker")}
    if spec.get("budget"):  # orch's clock when it holds the hardware from submission, else ours
        options["budget"] = {"t0": time.time(), **spec["budget"]}
    options.update(job_id=spec["job_id"], target=spec["target"])
    if hidden:
        # Ray Train workers are started by the cluster's raylet, not by this process, so
        # they do not inherit its environment; the values go in their config, wrapped so
        # Ray Train's run state (shown on the dashboard) prints their names only.
        options["env"] = secret_env.Hidden(hidden)
    resolve_callable(options["target"])  # fail here, once, rather than in every worker
    config = dict(spec.get("config") or {})
    config[_OPTIONS_KEY] = options
    run_name = spec.get("run_name") or spec["job_id"]
    events.emit("start", num_workers=num_workers, use_gpu=use_gpu, target=spec["target"],
                storage_path=spec["storage_path"], run_name=run_name)
    storage = storage_args(spec.get("storage_path"), spec.get("s3_endpoint_url"))
    where = functools.partial(display_path, args=storage)
    trainer = TorchTrainer(
        worker_entry,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=num_workers, use_gpu=use_gpu,
                                     placement_strategy=spec.get("placement", "pack").upper()),
        run_config=RunConfig(
            # Fixed per run: a restarted worker group, or a later job resuming this run
            # (checkpoint.resume_from), finds its checkpoints under this name.
            name=run_name,
            **storage,  # storage_path None: Ray's default on the cluster
            checkpoint_config=CheckpointConfig(num_to_keep=spec.get("num_to_keep") or 2),
            failure_config=FailureConfig(max_failures=int(spec.get("max_failures") or 0)),
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
    events.emit("result", ok=True, metrics=result.metrics or {},
                checkpoint=where(getattr(checkpoint, "path", None)),
                wall_s=round(time.monotonic() - started, 2))
    _print_verdict(result.metrics or {})
    return 0


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
    raw = os.environ.get("ORCH_RUN")
    if not raw:
        print("orch runner: ORCH_RUN is not set; this module is started by orch", file=sys.stderr)
        return 2
    try:
        return run(json.loads(raw))
    except secret_env.MissingFile as e:
        events.emit("result", ok=False, error=f"orch runner: {e}")
        print(f"orch runner: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
