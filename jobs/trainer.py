"""The runner's Ray Train trainer: TorchTrainer with what orch leaves out (actors a run on
orch's targets does not need, autoscaler requests nobody answers), its controller started
here where the runner must hold it (a hosted run, or one its utilization policy may stop),
and the callback that turns rank 0's reports into events.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Optional

from . import controller as train_controller
from . import events
from .elastic import sized_from_free


@dataclass(frozen=True)
class Hosted:
    """A run inside the runner host (jobs/host.py): one long-lived driver with torch and Ray
    Train imported, whose warm worker processes each run takes its controller and workers from."""
    env: dict  # the job's public environment (its secret values never reach the host)
    cwd: Optional[str]  # the job's working_dir on this node
    log_path: str  # the job's log, which its controller and workers write to
    controller_env: dict  # the controller's env_vars, as the host's warm processes have them
    on_controller: Callable[[Any], None]  # handed the run's controller (to abort it on cancel)
    values: Any = None  # job_values.Remote: where its workers fetch its secret values


def reporter(where: Callable[[Any], Any] = lambda path: path):
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


# Ray Train's fixed-size scaling policy (2.60) tells Ray Data's AutoscalingCoordinator, a
# detached actor it creates on the cluster's first run, what the workers need, every 20 s,
# so that a Ray autoscaler can add nodes for them. orch's targets have no Ray autoscaler (a
# workstation, an on-prem cluster of fixed nodes, a SkyPilot cluster SkyPilot sized): the
# request changes nothing there, yet the actor is one more process importing Ray Data, and
# under CPU load its first answer takes over the 5 s Ray Train waits, which printed a
# GetTimeoutError traceback into the job's log at every scaling decision until it answered.
def without_autoscaler_requests(policy: Any) -> Any:
    """`policy`, or, when it is Ray Train's FixedScalingPolicy, one that sends no resource
    requests; its ElasticScalingPolicy, one sized from what the cluster has free
    (sized_from_free); another Ray version's is left as it is."""
    try:
        from ray.train.v2._internal.execution.scaling_policy import FixedScalingPolicy
    except ImportError:
        return policy
    if type(policy) is not FixedScalingPolicy:
        return sized_from_free(policy)

    class Fixed(FixedScalingPolicy):
        def after_controller_start(self, train_run_context):
            pass  # the request it would send; nothing is left to cancel at shutdown

        def _maybe_send_resource_request(self):
            pass

    return Fixed(policy.scaling_config)


# Ray Train callbacks the runner leaves out, each one actor process fewer per run (Ray
# Train 2.50-2.60; another version without them is left as it is):
# - DatasetsCallback starts a DatasetManager actor for the run's Ray Datasets, even when
#   there are none, as here (the loop builds its own DataLoader);
# - PlacementGroupCleanerCallback starts a detached actor that removes the workers'
#   placement group should the controller die while its driver lives on (as under Ray
#   Tune); the runner's driver ends with its run, and Ray removes a finished job's groups.
def trainer_class(base: type, hosted: Optional[Hosted] = None,
                   on_controller: Optional[Callable[[Any], None]] = None) -> type:
    class Trainer(base):  # a subclass of the class given (TorchTrainer)
        def _create_default_callbacks(self):
            left_out = {"PlacementGroupCleanerCallback"}
            if not getattr(self, "datasets", None):  # Ray Datasets would need their manager
                left_out.add("DatasetsCallback")
            return [c for c in super()._create_default_callbacks()
                    if type(c).__name__ not in left_out]

        def _initialize_and_run_controller(self, **controller_init_kwargs):
            policy = controller_init_kwargs.get("scaling_policy")
            controller_init_kwargs["scaling_policy"] = without_autoscaler_requests(policy)
            if hosted is None and on_controller is None:
                return super()._initialize_and_run_controller(**controller_init_kwargs)
            # As TorchTrainer does (Ray Train 2.60), with its handle kept so that a cancel or
            # the utilization policy can abort the run; a hosted run's with the controller's
            # runtime env fixed to what the host's warm processes were started with, and its
            # output in the job's log.
            import ray

            if hosted is not None:
                controller: Any = train_controller.start(
                    controller_init_kwargs, hosted.log_path, hosted.controller_env)
                hosted.on_controller(controller)
            else:
                controller = train_controller.start(controller_init_kwargs)
                if threading.current_thread() is threading.main_thread():
                    self._register_sigint_handler(controller)  # Ctrl-C aborts, as before
            if on_controller is not None:
                on_controller(controller)
            ray.get(controller.run.remote())
            return ray.get(controller.get_result.remote())

    return Trainer
