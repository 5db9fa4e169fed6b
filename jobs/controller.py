"""A hosted run's Ray Train controller (jobs/host.py runs it, jobs/runner.py starts it): its
output in the job's log, and its synchronization actor in a light warm process.

Its own module, below both the runner and the host: the runner starts this controller for
a run the host hands it, and the host starts the runner's runs; neither imports the other
back for it.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from typing import Any, Optional

from . import forkserver

# Ray's worker setup hook: a process started with this variable imports the module and
# calls the function before it takes work.
SETUP_HOOK_VAR = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"
# The synchronization actor's env_vars over the controller's: its warm process runs
# host.preload_light instead of host.preload.
LIGHT_ENV = {SETUP_HOOK_VAR: f"{__package__}.host.preload_light"}


def to_log(path: str) -> None:
    """Send this process's stdout and stderr to the job's log (a process of the runner host
    that runs one job's part: its controller or a worker)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _sync_actor_in_a_light_process() -> None:
    """In a run's controller: its worker group starts the synchronization actor with the
    light setup hook, so that it takes the warm process `WarmPool` keeps for it. A Ray Train
    without that module attribute keeps its own way (its sync actor then takes a full one)."""
    from ray.train.v2._internal.execution.worker_group import worker_group

    base = getattr(worker_group, "SynchronizationActor", None)
    if base is None or isinstance(base, LightSyncActor):
        return
    worker_group.SynchronizationActor = LightSyncActor(base)


class LightSyncActor:
    """Ray Train's SynchronizationActor, its `.options()` with the light hook added."""

    def __init__(self, base: Any):
        self._base = base

    def options(self, **kwargs: Any) -> Any:
        return self._base.options(runtime_env={"env_vars": dict(LIGHT_ENV)}, **kwargs)


def hosted_runtime_env(env: dict) -> dict:
    """The runtime env of a hosted run's controller, and so (Ray merges it under theirs) of
    its workers and synchronization actor: the host's env_vars, and the processes forked
    from a zygote that imported what they import (jobs/forkserver.py)."""
    return {"env_vars": dict(env), "py_executable": forkserver.py_executable()}


@functools.cache
def controller_class() -> type:
    """Ray Train's controller, its output sent to the job's log first."""
    from ray.train.v2._internal.execution.controller import TrainController as Base

    class TrainController(Base):  # the same name: `ray::TrainController` in the process list
        def __init__(self, log_path: str, *args: Any, **kwargs: Any):
            to_log(log_path)
            _sync_actor_in_a_light_process()
            super().__init__(*args, **kwargs)

    return TrainController


def start(init_kwargs: dict, log_path: Optional[str] = None, env: Optional[dict] = None) -> Any:
    """A run's Ray Train controller on this node, started as TorchTrainer starts it (Ray
    Train 2.60), so that the runner holds its handle (to abort the run): a hosted run's
    (`log_path` given) with its output in the job's log and the host's `env` as env_vars;
    else with the env_vars TorchTrainer gives it."""
    import ray

    node = {ray._raylet.RAY_NODE_ID_KEY: ray.get_runtime_context().get_node_id()}
    if log_path is not None:
        return ray.remote(num_cpus=0, label_selector=node, runtime_env=hosted_runtime_env(env or {}))(
            controller_class()).remote(log_path, **init_kwargs)
    from ray._common.constants import RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR
    from ray.train.v2._internal.constants import (
        DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE,
        get_env_vars_to_propagate,
    )
    from ray.train.v2._internal.execution.controller import TrainController

    env_vars = get_env_vars_to_propagate()
    env_vars.setdefault(RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR,
                        DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE)
    return ray.remote(num_cpus=0, label_selector=node, runtime_env={"env_vars": env_vars})(
        TrainController).remote(**init_kwargs)


def abort(controller: Any) -> None:
    """Stop a run as Ray Train's own Ctrl-C does (its workers and placement group go);
    killed outright when that does not finish."""
    import ray

    try:
        ray.get(controller.abort.remote(), timeout=30)
    except ray.exceptions.RayActorError:
        return  # the abort ends with the controller's exit
    except Exception:  # noqa: BLE001
        pass
    with contextlib.suppress(Exception):
        ray.kill(controller)
