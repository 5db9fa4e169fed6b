"""`Orch`: the job service on this machine's store and backends, as one object. The CLI,
the client and `orch serve` call it; it does not print.

It holds a `Core` (settings, store, clock, providers) and hands it to the service's
modules, each plain functions: placing (the one plan entry), submitting (check, record,
launch), launch_spec (what a provider runs), budgets, following (refresh, logs, cancel),
pipelines (stages launched in order), views, dashboard and spending (what commands and
routes show), schedule_rules and cost_report. Each method here is one call into them.

It is the one door into the service: cli/, client/ and server/ call these methods and
import no other service module but typed records' (tests/test_layers.py holds them to it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from orchestrator.service import (
    cost_report,
    dashboard,
    following,
    job_groups,
    launch_spec,
    metrics_snapshot,
    pipelines,
    placing,
    replacing,
    schedule_rules,
    spending,
    submitting,
    sweeps,
    views,
)
from orchestrator.service.core import Core

if TYPE_CHECKING:
    from orchestrator.records import CancelledJob, JobDetail, JobRecord, JobRow
    from orchestrator.records.caller import Caller
    from orchestrator.records.cost import CostReport
    from orchestrator.records.page import Fleet, JobProgress, SpendingPage
    from orchestrator.records.placement import Placement
    from orchestrator.records.replica import ReplicaRow
    from orchestrator.records.schedule import ScheduleRow
    from orchestrator.service.doctor.check import Check
    from orchestrator.service.metrics_snapshot import Snapshot
    from orchestrator.settings import Settings
    from orchestrator.spec import JobSpec
    from orchestrator.store import JobQuery
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

    def stop_idle(self, everyone: bool = False, only: Optional[str] = None) -> list[str]:
        """In the per-user isolation modes, stop the users' Ray instances and on-prem clusters
        idle for serve_isolation_idle_s (providers/isolated.py, providers/onprem_users.py;
        `orch serve` asks every period), or all of them (`everyone`; `orch local down`: the
        `only="local"` ones): the OS users whose instance or cluster stopped. Never raises:
        one that will not stop now is tried again next time."""
        targets = [t for t, on in (("local", self.settings.serve_isolation == "per-user"),
                                   ("onprem", self.settings.onprem_isolation == "per-user"
                                    and bool(self.settings.ray_address)))
                   if on and only in (None, t)]
        stopped: list[str] = []
        for target in targets:
            try:
                stopped += self.provider(target).stop_idle(everyone)  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001
                pass
        return stopped

    # -- what orch depends on (service/doctor/) -----------------------------------------

    def checks(self) -> list[Check]:
        """`orch doctor`'s checks of the store, local Ray, the cluster, SkyPilot and S3."""
        from orchestrator.service import doctor

        return doctor.run_checks(self.settings)

    def repair_store(self) -> dict:
        """Move a damaged SQLite store aside and salvage what it holds (service/doctor/repair.py)."""
        from orchestrator.service import doctor

        return doctor.repair_store(self.settings.home)

    # -- planning and submitting -------------------------------------------------------

    def plan(self, spec: JobSpec, owner: Optional[str] = None) -> placing.Planned:
        return placing.plan(self.core, spec, owner)

    @staticmethod
    def pin(spec: JobSpec) -> None:
        """Resolve the job's git workdir ref to the commit a submit would launch, in place."""
        from orchestrator.service.git_workdir import pin

        pin(spec)

    def replace_late(self, now: float, specs: Optional[Mapping[str, JobSpec]] = None) -> list[str]:
        return replacing.replace_late(self.core, now, specs or {})

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

    # -- what a provider runs ----------------------------------------------------------

    def launch_for(self, job_id: str, spec: JobSpec, target: str, decision: Optional[Placement] = None,
                   secrets: Optional[dict] = None, event_key: str = "") -> Launch:
        return launch_spec.launch_for(self.core, job_id, spec, target, decision, secrets,
                                      event_key=event_key)

    def for_cloud(self, launch: Launch, spec: JobSpec, decision: Placement) -> Launch:
        return launch_spec.for_cloud(launch, spec, decision)

    # -- following ---------------------------------------------------------------------

    def refresh(self, rec: JobRow) -> JobRow:
        return following.refresh(self.core, rec)

    def logs(self, rec: JobRow) -> str:
        return following.logs(self.core, rec)

    @staticmethod
    def ending(text: str) -> bool:
        return following.ending(text)

    # -- what commands and routes show (service/views.py, dashboard.py, spending.py) -------

    def job_records(self, limit: int = 50) -> list[JobRecord]:
        return views.job_records(self.core, limit)

    def job_page(self, query: JobQuery, fresh_s: float = 0.0) -> tuple[list[JobRecord], Optional[str]]:
        return views.job_page(self.core, query, fresh_s=fresh_s)

    def job_detail(self, job_id: str) -> JobDetail:
        return views.job_detail(self.core, job_id)

    def poll(self, job_id: str) -> tuple[JobRow, str]:
        return views.poll(self.core, job_id)

    def cancel_job(self, job_id: str) -> CancelledJob:
        return views.cancel_job(self.core, job_id)

    def summary(self) -> dict:
        return views.summary(self.core)

    def job_progress(self, job_id: str) -> JobProgress:
        return dashboard.job_progress(self.core, job_id)

    def fleet(self) -> Fleet:
        return dashboard.fleet(self.core)

    def spending_page(self, now: Optional[float] = None) -> SpendingPage:
        return spending.spending_page(self.core, now)

    def metrics_snapshot(self) -> Snapshot:
        return metrics_snapshot.read(self.core)

    def cost_report(self, by: str = "target", since: Optional[str] = None) -> CostReport:
        return cost_report.cost_report(self.core, by, since)

    def state_counts(self, since: float) -> dict[str, dict[str, int]]:
        return self.core.store.state_counts(since)

    def replicas(self) -> list[ReplicaRow]:
        return self.core.store.replicas()

    # -- schedules (service/schedule_rules.py) ----------------------------------------------

    def register_schedule(self, spec: JobSpec, text: str, file: Optional[str], owner: Optional[str],
                          priority: int = 0, now: Optional[float] = None,
                          key: Optional[str] = None) -> dict:
        return schedule_rules.register(self.core, spec, text, file, owner, priority, now, key)

    def schedules(self) -> list[dict]:
        return schedule_rules.listed(self.core.store)

    def schedule(self, sched_id: str) -> dict:
        return schedule_rules.shown(self.core.store, sched_id)

    def upcoming_schedules(self, count: int = 3) -> dict[str, list[Optional[str]]]:
        return schedule_rules.upcoming(self.core.store, count)

    def pause_schedule(self, sched_id: str, paused: bool, who: Optional[Caller] = None,
                       now: Optional[float] = None) -> dict:
        return schedule_rules.set_paused(self.core.store, sched_id, paused, who, now)

    def remove_schedule(self, sched_id: str, who: Optional[Caller] = None) -> dict:
        return schedule_rules.remove(self.core.store, sched_id, who)

    # -- the records `orch serve`'s loop keeps (server/scheduler.py, intake.py) ------------

    def values_elsewhere(self, held_elsewhere: Callable[[JobRow], bool]) -> None:
        """Tell the service which jobs another live process (a replica) holds the secret
        values of: that one follows and finishes them (following.held_elsewhere)."""
        self.core.values_elsewhere = held_elsewhere

    def unfinished(self) -> list[JobRow]:
        """Every PENDING or RUNNING job."""
        return self.core.store.list(limit=1_000_000, statuses=("PENDING", "RUNNING"))

    def queued(self) -> list[JobRow]:
        return self.core.store.queued()

    def update(self, job_id: str, **fields: Any) -> JobRow:
        return self.core.store.update(job_id, **fields)

    def set_status(self, job_id: str, status: str, message: Optional[str] = None,
                   **fields: Any) -> JobRow:
        return self.core.store.set_status(job_id, status, message, **fields)

    def claim(self, job_id: str, launcher: str, expect: Optional[str] = None) -> bool:
        return self.core.store.claim(job_id, launcher, expect=expect)

    def replica_alive(self, launcher: str) -> Optional[bool]:
        return self.core.store.replica_alive(launcher)

    def schedule_rows(self) -> list[ScheduleRow]:
        """Every schedule as the store keeps it (its job file's text too): for the cron step."""
        return self.core.store.schedules()

    def schedule_done(self, sched_id: str, **fields: Any) -> None:
        self.core.store.schedule_done(sched_id, **fields)

    def collect_uploads(self, keep_hours: float, now: float, shared: bool = False) -> list[str]:
        """Remove the uploads no job needs (upload_gc): this server's folders, or with
        `shared` the archives replicas share."""
        from orchestrator.service.upload_gc import collect, collect_shared

        if shared:
            collect_shared(self.core.store, keep_hours, now)
            return []
        return collect(self.settings.home, self.core.store, keep_hours, now)
