"""Elastic runs (`scaling.num_workers: {min, max}`): Ray Train's elastic ScalingConfig for a
run, and its elastic policy sized from what the cluster has free."""

from __future__ import annotations

from typing import Any

from . import events
from .request import RunRequest

# How often an elastic run looks for more free resources to grow on (Ray Train's default:
# 60 s); each growth restarts the workers from the latest checkpoint.
ELASTIC_LOOK_S = 10.0


def scaling_config(config: Any, req: RunRequest, use_gpu: bool) -> Any:
    """Ray Train's ScalingConfig for the run: fixed, or elastic from num_workers to
    max_workers; None (the reason printed) where this Ray has no elastic training."""
    if not req.max_workers or req.max_workers <= req.num_workers:
        return config(num_workers=req.num_workers, use_gpu=use_gpu,
                      placement_strategy=req.placement.upper())
    try:
        return config(num_workers=(req.num_workers, req.max_workers), use_gpu=use_gpu,
                      placement_strategy=req.placement.upper(),
                      elastic_resize_monitor_interval_s=ELASTIC_LOOK_S)
    except (TypeError, ValueError) as e:
        import ray

        events.emit("result", ok=False, error=f"scaling.num_workers {{min: {req.num_workers}, max: "
                    f"{req.max_workers}}}: the Ray here ({ray.__version__}) has no elastic "
                    f"training ({e}); give one number of workers, or run on Ray 2.50 or later")
        return None


# Ray Train's ElasticScalingPolicy (2.60) sizes a run from what Ray Data's
# AutoscalingCoordinator says it reserved for it, which on a cluster of fixed nodes is the
# nodes' whole resources, whatever other jobs hold: measured on a 2-CPU Ray with 1 CPU held
# by another job, a {min: 1, max: 2} run asked for 2 workers and waited for the other job
# to end. Sized from what Ray reports free per node (plus what the run's own workers hold
# while they run), it starts on 1 and grows to 2 once the CPU frees.
def sized_from_free(policy: Any) -> Any:
    """`policy`, or, when it is Ray Train's ElasticScalingPolicy, one that counts the
    workers it can run from the cluster's free resources and sends no resource requests."""
    try:
        from ray.train.v2._internal.execution.scaling_policy.elastic import ElasticScalingPolicy
    except ImportError:
        return policy
    if type(policy) is not ElasticScalingPolicy:
        return policy

    class FromFree(ElasticScalingPolicy):
        _running = 0  # the run's workers now (0 while none runs)

        def after_controller_start(self, train_run_context):
            pass  # no coordinator, so no request to send (nor to cancel at the end)

        async def before_controller_shutdown(self):
            pass

        def before_controller_abort(self):
            pass

        def _maybe_send_resource_request(self):
            pass

        def make_decision_for_non_running_worker_group(self):
            self._running = 0
            return super().make_decision_for_non_running_worker_group()

        def make_decision_for_running_worker_group(self, worker_group_state, worker_group_status):
            self._running = worker_group_state.num_workers
            return super().make_decision_for_running_worker_group(worker_group_state,
                                                                  worker_group_status)

        def _get_reserved_resources(self):
            from ray._private.state import available_resources_per_node

            free = {node: dict(r) for node, r in available_resources_per_node().items()}
            per = self.scaling_config._resources_per_worker_not_none
            free["held by this run"] = {k: v * self._running for k, v in per.items()}
            return free

    return FromFree(policy.scaling_config)
