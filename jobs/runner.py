"""The Ray Train driver orch starts on the target: `python -m _orch_runner.runner` (this
package under its shipped name, jobs/__init__.py).

It reads its run request (jobs.request.RunRequest) from the ORCH_RUN variable, joins the
target's Ray (RAY_ADDRESS is set by the Ray Jobs API), runs a TorchTrainer and prints
events (see jobs/events.py) that orch reads from the log. The same runner runs on this
workstation, on an on-prem cluster and on a cloud VM. On a Ray target the job's secret
values reach it through secret_env.py, never its runtime env; it hands them to its
workers in their config. Among them is the job's event key, with which it signs its
`result` and `verdict` events; the key goes to no worker and to nothing it starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
import time
import uuid
from typing import Any, Callable, Optional

from . import controller as train_controller
from . import elastic, events, idle_policy, secret_env, telemetry
from .controller import to_log
from .events import KEY_VAR
from .request import ENV_VAR, BadRequest, Budget, RunRequest, WorkerOptions
from .train_loops import check_target, failure_text, imported, offer_public_name
from .trainer import TRAIN_ENV, Hosted, reporter, trainer_class

_OPTIONS_KEY = "__orch__"


def worker_entry(config: dict) -> Any:
    """What each Ray Train worker runs: set up orch's context, then the real loop."""
    from . import context

    config = dict(config)
    options: WorkerOptions = config.pop(_OPTIONS_KEY)
    if options.log_path:  # a worker of the runner host: this process is the job's alone
        to_log(options.log_path)
        _threads_as_ray_sets_them()
    if options.cwd:
        os.chdir(options.cwd)
    # This node's copy of the working_dir may still hold the secret file: the values came
    # in the config instead, so it goes before the user's code runs.
    secret_env.discard()
    if options.env is not None:
        secret_env.apply(options.env.values)
        options = dataclasses.replace(options, env=None)
    _plain_print()
    if os.getcwd() not in sys.path:  # the job's workdir, where a user's entrypoint lives
        sys.path.insert(0, os.getcwd())
    offer_public_name()  # `from jobs.context import current`, unless the job has its own `jobs`
    ctx = context.install(options)
    import ray

    events.emit("worker", rank=ctx.rank, node_id=ray.get_runtime_context().get_node_id(),
                process_age_s=round(_process_age_s(), 2), forked=_forked())
    fn = imported(options.target)
    # The device over the run: a point every telemetry_point_s while it runs, the summary and
    # the whole (bounded) series at its end, whether the loop returns or raises.
    post = _board(options, ctx.rank)
    sampler = telemetry.Sampler(telemetry.reader_for(ctx.device), options.telemetry_interval_s,
                                point_every_s=options.telemetry_point_s,
                                policy=options.utilization_policy if post else None,
                                on_point=functools.partial(_device_point, ctx.rank))
    if post is not None:
        sampler.on_idle = functools.partial(_idle, post, sampler, ctx.rank, options.utilization_policy)
    sampler.start()
    try:
        return fn(config) if _takes_config(fn) else fn()
    finally:
        events.emit("telemetry", rank=ctx.rank, **sampler.stop())


def _plain_print() -> None:
    """The loop's `print` as Python's own: Ray Train (2.60) patches it in each worker to log
    through its root logger, which wrote every line the loop printed twice to the job's log
    (its console handler, and a copy to the worker's redirected stdout)."""
    import builtins

    patched = sys.modules.get("ray.train.v2._internal.logging.patch_print")
    original = getattr(patched, "_original_print", None)
    if original is not None and builtins.print is not original:
        builtins.print = original


def _takes_config(fn: Callable) -> bool:
    """Whether the loop takes the config: a `train_func(config)` (a required first argument,
    or one named config), or a script's `main()` / `main(epochs=3)`, called with nothing,
    which reads what it needs itself; the submit check refused the others."""
    import inspect

    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or a C function: as Ray Train calls it
        return True
    first = params[0] if params else None
    if first is None or first.kind in (first.KEYWORD_ONLY, first.VAR_KEYWORD):
        return False
    return (first.kind == first.VAR_POSITIONAL or first.default is first.empty
            or first.name in ("config", "cfg", "train_loop_config"))


def _board(options: WorkerOptions, rank: int) -> Optional[Callable[[Optional[float]], None]]:
    """Where this worker posts whether its device is idle (utilization_policy), once it has
    said it is not (a restarted worker's earlier post goes); None without a policy, or
    when the board cannot be reached (the run goes on, unwatched, and says so)."""
    if options.utilization_policy is None or not options.utilization_board:
        return None
    post = functools.partial(idle_policy.post, options.utilization_board, rank)
    try:
        post(None)
    except Exception as e:  # noqa: BLE001
        events.say(f"orch runner: utilization_policy is not applied to worker {rank}: {e}", err=True)
        return None
    return post


def _idle(post: Callable[[Optional[float]], None], sampler: telemetry.Sampler, rank: int,
          policy: Optional[telemetry.IdlePolicy], peak: Optional[float]) -> None:
    """This worker's device turned idle (`peak`) or busy again (None): posted to the run's
    board. Where the run may be stopped for it, the device's summary so far goes to the log
    first, since a stopped worker ends without its own last word."""
    if peak is not None and policy is not None and policy.action == "stop":
        events.emit("telemetry", rank=rank, **sampler.snapshot())
    post(peak)


def _device_point(rank: int, point: dict) -> None:
    """A point of a worker's device series as an event (`t`, an event's clock, becomes
    `since_s`, seconds since the worker started sampling; `source` says what measured it)."""
    events.emit("device", rank=rank, since_s=point["t"], **{k: v for k, v in point.items() if k != "t"})


def _process_age_s() -> float:
    """How long this worker's process has lived: more than the run, when it was warm."""
    try:
        import psutil

        return time.time() - psutil.Process().create_time()
    except Exception:  # noqa: BLE001  (psutil comes with Ray's default extras only)
        return 0.0


def _forked() -> bool:
    """Whether this worker's process was forked by orch's zygote (jobs/zygote.py), so
    started with torch and Ray Train already imported, however young it is."""
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return False
    return b"--serve" in args and any(a.endswith(b"zygote.py") for a in args)


def _threads_as_ray_sets_them() -> None:
    """A warm process was started before it had a task, so Ray did not set its
    OMP_NUM_THREADS to the CPUs the worker holds, as it does for a process started for it:
    torch's threads are set here instead (else two 1-CPU workers each ran as many threads
    as the node has cores, 3-5x slower a step on 2 cores)."""
    import ray
    import torch

    cpus = int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1) or 1)
    os.environ["OMP_NUM_THREADS"] = str(max(1, cpus))
    torch.set_num_threads(max(1, cpus))


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


def run(req: RunRequest, hidden: Optional[dict] = None, hosted: Optional[Hosted] = None) -> int:
    """Train `req` and print its events; the exit code. `hidden`: the job's secret values
    (None: read them here). `hosted`: the run is one of the runner host's, whose driver is
    connected to Ray already."""
    if hosted is None:
        for name, value in TRAIN_ENV.items():
            os.environ.setdefault(name, value)
    import ray

    started = time.monotonic()
    key = None  # a hosted run: the host hands its state events to the job's runner, which signs them
    if hosted is None:
        # What jobs.secret_env took out of its file before this process started; or the
        # file itself, when the runner was started without that step.
        if hidden is None:
            hidden = {**secret_env.take(), **secret_env.from_environ()}
        key = secret_env.event_key(hidden)
        # Out of this process's environment before Ray starts: a Ray this process starts
        # (on a cloud VM) hands its environment on to every worker it runs.
        os.environ.pop(KEY_VAR, None)
        # A job orch started itself has its runtime env as a Ray job's driver has
        # (providers/process_jobs.py gives it): ray.init takes it from there.
        ray.init(log_to_driver=True, **_fresh_package(hidden))  # the file held the key too
        values = hidden
    else:
        values = hosted.env
    budget = req.budget
    if budget is not None and budget.t0 is None:  # orch's clock when it holds the hardware
        budget = dataclasses.replace(budget, t0=time.time())  # from submission, else ours
    options = worker_options(req, budget, values, hosted)
    if hosted is None:
        check_target(req.target)  # fail here, once, rather than in every worker
    with events.signing(key) if key else contextlib.nullcontext():
        return _fit(req, options, hosted, started)


def worker_options(req: RunRequest, budget: Optional[Budget], values: dict,
                   hosted: Optional[Hosted] = None) -> WorkerOptions:
    """What each Ray Train worker gets beside the loop's config. Workers are started by the
    cluster's raylet, not by this process, so they do not inherit its environment: the
    secret values go in their config, wrapped so Ray Train's run state (shown on the
    dashboard) prints their names only, and without the job's event key (the workers run
    the job's own code)."""
    values = secret_env.for_workers(values)
    hidden = secret_env.Hidden(values) if values else None
    if hosted is not None and hosted.values is not None:
        hidden = hosted.values  # fetched from the job's runner by each worker, not held here
    options = WorkerOptions.of(req, budget, hidden)
    if hosted is not None:  # the host imports no job's code: its workers do, from its working_dir
        options = dataclasses.replace(options, log_path=hosted.log_path, cwd=hosted.cwd)
    return options


def _fit(req: RunRequest, options: WorkerOptions, hosted: Optional[Hosted], started: float) -> int:
    """Run the trainer and print its result and verdict (signed, in `run`'s context)."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from .storage import display_path, storage_args

    use_gpu = _use_gpu(req.use_gpu, req.num_workers)
    held: list = []  # the run's controller, once started: what the watch aborts
    watch = _watch(req, held)
    if watch is not None:
        options = dataclasses.replace(options, utilization_board=watch.board)
    config = dict(req.config)
    config[_OPTIONS_KEY] = options
    events.emit("start", num_workers=req.num_workers, use_gpu=use_gpu, target=req.target,
                storage_path=req.storage_path, run_name=req.name)
    storage = storage_args(req.storage_path, req.s3_endpoint_url)
    where = functools.partial(display_path, args=storage)
    scaling = elastic.scaling_config(ScalingConfig, req, use_gpu)
    if scaling is None:
        return 2
    trainer = trainer_class(TorchTrainer, hosted, None if watch is None else held.append)(
        worker_entry,
        train_loop_config=config,
        scaling_config=scaling,
        run_config=RunConfig(
            # Fixed per run: a restarted worker group, or a later job resuming this run
            # (checkpoint.resume_from), finds its checkpoints under this name.
            name=req.name,
            **storage,  # storage_path None: Ray's default on the cluster
            checkpoint_config=CheckpointConfig(num_to_keep=req.num_to_keep),
            failure_config=FailureConfig(max_failures=req.max_failures),
            callbacks=[reporter(where)],
        ),
    )
    if watch is not None:
        watch.start()
    try:
        result = trainer.fit()
    except Exception as e:  # TrainingFailedError and friends: say why, exit non-zero
        stopped = watch.stopped if watch is not None else None
        events.emit("result", ok=False, error=stopped or failure_text(e),
                    wall_s=round(time.monotonic() - started, 2))
        if not stopped:  # one line: Ray printed the workers' tracebacks already
            first = (str(e).strip().splitlines() or [""])[0]
            events.say(f"orch runner: training failed: {type(e).__name__}: {first}", err=True)
        return 1
    finally:
        if watch is not None:
            watch.close()
            with contextlib.suppress(Exception):
                idle_policy.clear(watch.board)
    checkpoint = getattr(result, "checkpoint", None)
    _prune(checkpoint, req.num_to_keep)
    events.emit("result", ok=True, metrics=result.metrics or {},
                checkpoint=where(getattr(checkpoint, "path", None)),
                wall_s=round(time.monotonic() - started, 2))
    _print_verdict(result.metrics or {})
    return 0


def _watch(req: RunRequest, held: list) -> Optional[idle_policy.Watch]:
    """The run's utilization_policy, watched from here over all its workers: stopping the
    run aborts the controllers in `held`. None without a policy."""
    if req.utilization_policy is None:
        return None

    def stop(reason: str) -> None:
        for controller in list(held):
            train_controller.abort(controller)

    board = f"{req.job_id}/{uuid.uuid4().hex[:8]}"  # this run's alone: a rerun posts afresh
    return idle_policy.Watch(req.utilization_policy, board, req.num_workers, on_stop=stop,
                             poll_s=min(1.0, req.telemetry_interval_s))


def _prune(checkpoint, keep: int) -> None:
    """Leave `keep` checkpoints in the run's folder; a failure to tidy is said, not fatal."""
    from .storage import prune_checkpoints

    if checkpoint is None:
        return
    try:
        stale = prune_checkpoints(checkpoint, keep)
    except Exception as e:  # noqa: BLE001  (the job succeeded; the storage said no)
        events.say(f"orch runner: could not remove old checkpoints: {e}", err=True)
        return
    if stale:
        events.emit("pruned", checkpoints=stale)


def _print_verdict(metrics: dict) -> None:
    """Where the time went, and what would help: at the end of every run, in its log."""
    from .verdict import diagnose

    verdict = diagnose(metrics)
    if verdict is None:
        return
    events.emit("verdict", **verdict)
    events.say(f"orch runner: {verdict['kind']}: {'; '.join(verdict['reasons'])}")
    for advice in verdict["advice"]:
        events.say(f"orch runner:   try: {advice}")


def main() -> int:
    raw = os.environ.get(ENV_VAR)
    if not raw:
        print(f"orch runner: {ENV_VAR} is not set; this module is started by orch", file=sys.stderr)
        return 2
    try:
        # What jobs.secret_env took out of its file before this process started; or the
        # file itself, when the runner was started without that step.
        hidden = {**secret_env.take(), **secret_env.from_environ(), **secret_env.take_key()}
    except secret_env.MissingFile as e:
        return _refused(e)  # unsigned: the key was in the file
    failed = secret_env.run_setup()  # the job's setup:, started without the key
    if failed:
        return failed  # as the shell's `set -e` failed the job before
    with events.signing(secret_env.event_key(hidden)):
        try:
            req = RunRequest.from_json(raw)
        except BadRequest as e:
            return _refused(e)
        from . import hosted

        code = hosted.delegate(req, hidden)  # to the target's runner host, where it has one
        return run(req, hidden) if code is None else code


def _refused(e: Exception) -> int:
    events.emit("result", ok=False, error=f"orch runner: {e}")
    print(f"orch runner: {e}", file=sys.stderr)
    return 2


def _exit(code: int) -> None:
    """Leave without the interpreter's teardown: once Ray is shut down (its logs and the
    GCS told), unloading torch and the rest only delays the job's end, by 0.9 s a job on a
    2-core machine (1.25 s from the result to Ray's job end, 0.39 s this way)."""
    if "ray" in sys.modules:  # not imported when the runner host ran the job
        import ray

        ray.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit(main())
