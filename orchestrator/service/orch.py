"""`Orch`: the job service on this machine's store and backends, as one object. The CLI,
the client and `orch serve` call it; it does not print.

It holds a `Core` (settings, store, clock, providers) and hands it to the service's
modules, each plain functions: placing (the one plan entry), submitting (check, record,
launch), launch_spec (what a provider runs), budgets, following (refresh, logs, cancel)
and pipelines (stages launched in order). Each method here is one call into them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from orchestrator.service import (
    budgets,
    following,
    job_groups,
    launch_spec,
    pipelines,
    placing,
    submitting,
    sweeps,
)
from orchestrator.service.core import Core

if TYPE_CHECKING:
    from jobs.request import Budget
    from orchestrator.base.redact import Redactor
    from orchestrator.records import JobRow
    from orchestrator.records.placement import PlacedOffer, Placement
    from orchestrator.settings import Settings
    from orchestrator.spec import JobSpec
    from orchestrator.store import Store
    from providers.base import Backend, Launch
    from providers.local_ray import LocalRay
    from providers.ray_cluster import ClusterSnapshot


class Orch:
    """orch on this machine's store and backends: plan, submit, follow, cancel and price jobs."""

    def __init__(self, settings: Settings, on_ray_start: Optional[Callable[[], None]] = None,
                 held: Optional[dict[str, dict]] = None):
        self.core = Core(settings, on_ray_start=on_ray_start, held=held)

    @property
    def settings(self) -> Settings:
        return self.core.settings

    @settings.setter
    def settings(self, settings: Settings) -> None:
        self.core.settings = settings

    @property
    def store(self) -> Store:
        return self.core.store

    def close(self) -> None:
        """Close the store, if this Orch opened it."""
        self.core.close()

    def get(self, job_id: str) -> JobRow:
        return self.core.store.get(job_id)

    # -- backends ----------------------------------------------------------------------

    def local_ray(self) -> LocalRay:
        return self.core.local_ray()

    def provider(self, target: str) -> Backend:
        return self.core.provider(target)

    def capacity(self, target: str) -> Optional[ClusterSnapshot]:
        return self.core.capacity(target)

    def stop_idle(self, everyone: bool = False) -> list[str]:
        """In the per-user isolation mode, stop the users' Ray instances idle for
        serve_isolation_idle_s (providers/isolated.py; `orch serve` asks every period), or
        all of them (`everyone`: `orch local down`): the OS users whose instance stopped.
        Never raises: an instance that will not stop now is tried again next time."""
        if self.settings.serve_isolation != "per-user":
            return []
        try:
            return self.provider("local").stop_idle(everyone)  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001
            return []

    # -- planning and submitting -------------------------------------------------------

    def plan(self, spec: JobSpec, owner: Optional[str] = None) -> placing.Planned:
        return placing.plan(self.core, spec, owner)

    def prepared(self, spec: JobSpec) -> tuple[str, bool]:
        return placing.prepared(self.core, spec)

    def place(self, spec: JobSpec, fp: str, dirty: bool, owner: Optional[str] = None) -> Placement:
        return submitting.place(self.core, spec, fp, dirty, owner)

    def check(self, spec: JobSpec, owner: Optional[str] = None) -> submitting.Checked:
        return submitting.check(self.core, spec, owner)

    def record(self, spec: JobSpec, idempotency_key: Optional[str] = None, *,
               owner: Optional[str] = None, priority: int = 0, info: Optional[dict] = None,
               checked: Optional[submitting.Checked] = None) -> submitting.Recorded:
        return submitting.record(self.core, spec, idempotency_key, owner=owner,
                                 priority=priority, info=info, checked=checked)

    def launch(self, rec: JobRow, spec: JobSpec, secrets: Optional[dict] = None) -> JobRow:
        return submitting.launch(self.core, rec, spec, secrets)

    def submit(self, spec: JobSpec, idempotency_key: Optional[str] = None) -> submitting.Submitted:
        return submitting.submit(self.core, spec, idempotency_key)

    def submit_pipeline(self, pipeline, idempotency_key: Optional[str] = None) -> list[submitting.Submitted]:
        return pipelines.submit_pipeline(self.core, pipeline, idempotency_key)

    def submit_group(self, group, idempotency_key: Optional[str] = None) -> list[submitting.Submitted]:
        return job_groups.submit_group(self.core, group, following.cancel, idempotency_key)

    def submit_sweep(self, spec: JobSpec, idempotency_key: Optional[str] = None) -> list[submitting.Submitted]:
        return sweeps.submit_sweep(self.core, spec, idempotency_key)

    def cancel_sweep(self, sweep_id: str) -> list[JobRow]:
        return sweeps.cancel_sweep(self.core, sweep_id)

    # -- what a provider runs, and its budget ------------------------------------------

    def launch_for(self, job_id: str, spec: JobSpec, target: str, decision: Optional[Placement] = None,
                   secrets: Optional[dict] = None, event_key: str = "") -> Launch:
        return launch_spec.launch_for(self.core, job_id, spec, target, decision, secrets,
                                      event_key=event_key)

    def for_cloud(self, launch: Launch, spec: JobSpec, decision: Placement) -> Launch:
        return launch_spec.for_cloud(launch, spec, decision)

    def resume_point(self, spec: JobSpec,
                     before: Optional[str] = None) -> Optional[launch_spec.ResumePoint]:
        return launch_spec.resume_point(self.core, spec, before)

    def budget_limit(self, max_cost: Optional[float],
                     job_id: Optional[str] = None) -> Optional[budgets.BudgetLimit]:
        return budgets.budget_limit(self.core, max_cost, job_id)

    def run_budget(self, spec: JobSpec, choice: Optional[PlacedOffer],
                   job_id: str) -> Optional[Budget]:
        return budgets.run_budget(self.core, spec, choice, job_id)

    # -- following ---------------------------------------------------------------------

    def refresh(self, rec: JobRow) -> JobRow:
        return following.refresh(self.core, rec)

    def refresh_with_log(self, rec: JobRow) -> tuple[JobRow, Optional[str]]:
        return following.refresh_with_log(self.core, rec)

    def logs(self, rec: JobRow) -> str:
        return following.logs(self.core, rec)

    def redactor(self, rec: JobRow) -> Redactor:
        return following.redactor(self.core, rec)

    @staticmethod
    def ending(text: str) -> bool:
        return following.ending(text)

    def cancel(self, job_id: str, wait_s: float = 30.0) -> JobRow:
        return following.cancel(self.core, job_id, wait_s)

    def list(self, limit: int = 50) -> list[JobRow]:
        return following.list_jobs(self.core, limit)
