"""Job groups: a SkyPilot file of tasks that run at once, side by side, recorded as one job a
task. All of them start or none does: every task is checked and placed before anything is
written, and a task whose launch fails takes the ones launched before it down with it.
Each task is followed on its own (a task recovered by its backend is that task alone);
once every primary task has ended, an auxiliary task still running is stopped: after its
`termination_delay` when every primary task succeeded, at once when one did not (as
SkyPilot's jobs controller does), by whichever orch brings its record in step next.

A task is told its group (SKYPILOT_JOBGROUP_NAME, as SkyPilot tells it) and where the
other tasks run: ORCH_JOBGROUP_HOSTS (`task=address,...`) and ORCH_JOBGROUP_<TASK>_HOST.
Addresses are known before launch where the tasks share this machine (the `local`
target); a group whose tasks must reach each other (`inter_connection`, on unless the
header says false) runs there, and is refused elsewhere with what to do."""

from __future__ import annotations

import time
from typing import Callable, Optional

from orchestrator.base.errors import BackendError, InputError, OrchError
from orchestrator.base.targets import LOCAL
from orchestrator.records import JobRow
from orchestrator.service.core import Core
from orchestrator.service.submitting import Submitted, check, launch, record
from orchestrator.spec.job_group import JobGroup
from orchestrator.store import TERMINAL

LOOPBACK = "127.0.0.1"


def host_var(task: str) -> str:
    return f"ORCH_JOBGROUP_{task.upper().replace('-', '_')}_HOST"


def group_envs(group: JobGroup, task: str, hosts: dict[str, str]) -> dict[str, str]:
    """What each task is told of its group."""
    envs = {"SKYPILOT_JOBGROUP_NAME": group.name, "ORCH_JOBGROUP_NAME": group.name,
            "ORCH_JOBGROUP_TASK": task}
    if hosts:
        envs["ORCH_JOBGROUP_HOSTS"] = ",".join(f"{t}={h}" for t, h in hosts.items())
        envs.update({host_var(t): h for t, h in hosts.items()})
    return envs


Cancel = Callable[..., JobRow]  # following.cancel: (core, job id, wait_s) -> its record


def submit_group(core: Core, group: JobGroup, cancel: Cancel,
                 idempotency_key: Optional[str] = None) -> list[Submitted]:
    """Check and place every task (one that cannot run refuses the group, nothing written),
    record them all, then launch them all; a launch that fails cancels the others
    (`cancel`: following.cancel). A key seen before returns that group's tasks, launching
    nothing."""
    names = group.task_names()
    checked = [check(core, spec) for spec in group.tasks]
    targets = {t: c.decision.target for t, c in zip(names, checked)}
    _fits_together(group, names, checked)
    hosts: dict[str, str] = {}
    if group.inter_connection:
        elsewhere = [f"{t} ({w})" for t, w in targets.items() if w != LOCAL]
        if elsewhere:
            raise InputError(
                f"job group {group.name!r}: its tasks reach each other by address "
                f"(inter_connection), which orch gives on this machine only, and "
                f"{', '.join(elsewhere)} would run elsewhere",
                "pin every task to this machine (`placement: {allow: [local]}`), or set "
                "`inter_connection: false` in the header when the tasks need not reach "
                "each other (then each runs where it is placed), or `sky jobs launch` the file")
        hosts = dict.fromkeys(names, LOOPBACK)
    recorded = []
    for i, (task, spec, done) in enumerate(zip(names, group.tasks, checked)):
        spec.envs = {**spec.envs, **group_envs(group, task, hosts)}
        primary = group.is_primary(task)
        info = {"group": group.name, "task": task, "primary": primary,
                "env_secrets": sorted(k for k, v in spec.secrets.items() if v is None)}
        if not primary:
            info["termination_delay_s"] = group.delays_s.get(task, 0.0)
        key = f"{idempotency_key}:task{i + 1}" if idempotency_key else None
        recorded.append(record(core, spec, key, info=info, checked=done))
    if any(r.existing for r in recorded):
        return [Submitted(r.rec, True) for r in recorded]
    ids = {task: r.rec.id for task, r in zip(names, recorded)}
    rows = [core.store.update(r.rec.id, info={**r.rec.info.model_dump(mode="json",
                                                                       exclude_unset=True),
                                               "group_jobs": ids})
            for r in recorded]
    out: list[Submitted] = []
    for i, (row, r, spec) in enumerate(zip(rows, recorded, group.tasks)):
        try:
            out.append(Submitted(launch(core, row, spec, r.secrets), False))
        except (BackendError, InputError) as e:
            _undo(core, cancel, [s.rec for s in out], rows[i + 1:], names[i], e)
            raise
    return out


def _fits_together(group: JobGroup, names: list[str], checked: list) -> None:
    """All or none on this machine: the GPUs of the tasks placed here must be free at once,
    or one task would wait in Ray's queue for another to end (and a group never does)."""
    from orchestrator.service.metrics_snapshot import local_gpus

    here = {t: c.decision.choice.count for t, c in zip(names, checked)
            if c.decision.target == LOCAL and c.decision.choice is not None
            and c.decision.choice.gpu not in (None, "CPU")}
    need, have = sum(here.values()), local_gpus()
    if need > have:
        raise InputError(f"job group {group.name!r}: its tasks need {need} GPUs at once here "
                         f"({', '.join(f'{t} {n}' for t, n in here.items())}) and this machine "
                         f"has {have}: its tasks start together or not at all",
                         "ask for fewer GPUs per task, or let some tasks run elsewhere "
                         "(`inter_connection: false`)")


def _undo(core: Core, cancel: Cancel, launched: list[JobRow], waiting: list[JobRow], task: str,
          why: OrchError) -> None:
    """All or none: the tasks launched before the one that failed are cancelled, the ones
    after it are never started."""
    for rec in launched:
        try:
            cancel(core, rec.id, wait_s=0)
        except OrchError:
            pass  # its record says it was asked; reconcile finishes it
        core.store.set_status(rec.id, "CANCELLED", f"stopped: task {task} of its group could "
                              f"not launch ({why.message})")
    for rec in waiting:
        core.store.set_status(rec.id, "CANCELLED", f"not started: task {task} of its group "
                              f"could not launch ({why.message})")


def siblings(core: Core, rec: JobRow) -> dict[str, JobRow]:
    """The group's tasks, by name, as the store has them."""
    return {t: core.store.get(i) for t, i in (rec.info.group_jobs or {}).items()}


def stop_due(rec: JobRow, tasks: dict[str, JobRow], now: float) -> Optional[str]:
    """Why an auxiliary task must stop now (None: not yet): every primary task ended, and
    its delay passed since the last one did (none when one of them did not succeed)."""
    if rec.info.primary is not False or rec.status in TERMINAL or rec.cancel_requested:
        return None
    primary = [r for r in tasks.values() if r.info.primary]
    if not primary or any(r.status not in TERMINAL for r in primary):
        return None
    failed = [r for r in primary if r.status != "SUCCEEDED"]
    if failed:
        return (f"stopped: primary task {failed[0].info.task} ended {failed[0].status}, so its "
                "group's auxiliary tasks stop at once")
    ended = max((r.finished_at or r.updated_at) for r in primary)
    delay = rec.info.termination_delay_s or 0.0
    if now < ended + delay:
        return None
    return (f"stopped: the group's primary tasks succeeded {now - ended:.0f}s ago "
            f"(termination_delay {delay:g}s)")


def advance_group(core: Core, rec: JobRow, refresh: Callable[[Core, JobRow], JobRow],
                  cancel: Cancel) -> JobRow:
    """An auxiliary task that runs: stopped once its group's primary tasks say so. The
    primary ones are brought in step first (`refresh`, `cancel`: following's)."""
    if rec.info.primary is not False or rec.status in TERMINAL or rec.cancel_requested:
        return rec
    tasks = siblings(core, rec)
    for t, r in tasks.items():
        if r.info.primary and r.status not in TERMINAL:
            try:
                tasks[t] = refresh(core, r)
            except OrchError:
                return rec  # its backend does not answer now: asked again next time
    why = stop_due(rec, tasks, time.time())
    if why is None:
        return rec
    core.store.set_status(rec.id, rec.status, why)  # in its history, whatever follows
    stopped = cancel(core, rec.id, wait_s=10)
    return core.store.update(stopped.id, message=why) if stopped.status in TERMINAL else stopped

