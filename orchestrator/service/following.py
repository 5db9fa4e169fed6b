"""Following a job: its record kept in step with its backend (state, metrics, budget, the
end and its ledger line), its log with secrets redacted, and cancelling it."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Optional

from orchestrator.base import redact
from orchestrator.base.errors import BackendError, OrchError
from orchestrator.decision import reconcile
from orchestrator.records import JobRow, with_info
from orchestrator.records.metrics import RunMetrics
from orchestrator.service import job_groups, pipelines, preemption, run_metrics
from orchestrator.service.budgets import enforce_budget
from orchestrator.service.core import Core
from orchestrator.service.git_workdir import checkout_folder
from orchestrator.service.processes import alive
from orchestrator.service.run_metrics import add_scaling, from_log
from orchestrator.store import TERMINAL
from providers.base import KeepsLogs, ShipsSecrets

log = logging.getLogger("orch.follow")

# `orch submit` records its job within seconds of starting (its imports and the plan).
SUBMIT_START_S = 60.0


def refresh(core: Core, rec: JobRow) -> JobRow:
    """Bring a job's record in step with its backend; finished jobs are left alone."""
    return refresh_with_log(core, rec)[0]


def refresh_with_log(core: Core, rec: JobRow) -> tuple[JobRow, Optional[str]]:
    """`refresh`, and the redacted log it read on the way (None where it read none):
    a follower needs no second read of the whole log each time it looks."""
    if rec.status in TERMINAL:
        return rec, None
    if held_elsewhere(core, rec):
        return rec, None  # the replica holding its values keeps it in step, and finishes it
    if not rec.backend_id:
        if rec.info.queued:
            return rec, None  # waiting in `orch serve`'s queue: nothing was launched yet
        if rec.info.after:
            return pipelines.advance_stage(core, rec, refresh), None  # a pipeline's stage
        rec = recover_launch(core, rec)
        if not rec.backend_id:
            return rec, None
    provider, backend_id = core.provider(rec.placed_on), rec.backend_id
    step = reconcile.launched(gone=provider.gone(), backend_status=None)
    if step.action == "finish":
        return finish(core, rec, step.status or "FAILED", step.message), None
    try:
        state = core.retrying(provider).state(backend_id, backend_info(rec))
    except BackendError as e:
        # The job's history says when its backend stopped answering; its state stays the
        # last one known, since the job may well still be running there.
        core.store.set_status(rec.id, rec.status, f"last known {rec.status}: {e.message}")
        raise
    if state.message:  # a backend's message may quote the job's output (Ray's does)
        state = dataclasses.replace(state, message=redact_text(core, rec, state.message))
    if state.info and rec.info.backend_start and state.info.get("backend_start"):
        # A job run again (the preemption contract) held the hardware from its first run on.
        state = dataclasses.replace(state, info={**state.info, "backend_start": min(
            rec.info.backend_start, state.info["backend_start"])})
    if state.info and any(getattr(rec.info, k, None) != v for k, v in state.info.items()):
        rec = core.store.update(rec.id, info=with_info(rec, **state.info))
    step = reconcile.launched(gone=None, backend_status=state.status, backend_message=state.message,
                              cancel_requested=bool(rec.cancel_requested),
                              budget_stop=rec.info.budget_stop)
    if step.action == "finish" and state.exit_code == preemption.PREEMPTED_EXIT:
        run = redact_text(core, rec, core.retrying(provider).logs(backend_id))
        again = preemption.resumed(core, rec, state, run, finish, write_private)
        if again is not None:
            return again, None
    if step.action == "finish":
        return finish(core, rec, step.status or "FAILED", step.message), None
    if step.action == "running":
        clean = redactor(core, rec)
        text = clean(core.retrying(provider).logs(backend_id))
        rec = core.store.set_status(rec.id, "RUNNING", step.message,
                                    metrics=clean.tree(from_log(text, rec.metrics, **trust(core, rec))))
        rec = enforce_budget(core, rec, provider)
        if rec.info.primary is False:  # a job group's auxiliary task
            rec = job_groups.advance_group(core, rec, refresh, cancel)
        return rec, text
    return rec, None


def held_elsewhere(core: Core, rec: JobRow) -> bool:
    """Whether another live process holds the job's secret values (Core.values_elsewhere):
    that one follows it, finishes it and keeps its log redacted by them."""
    return rec.id not in core.secrets and core.values_elsewhere is not None and \
        core.values_elsewhere(rec)


def recover_launch(core: Core, rec: JobRow, grace_s: float = 60.0) -> JobRow:
    """A job recorded but with no backend id: its `orch submit` died or is still
    launching (decision.reconcile.unlaunched says what to do; this carries it out)."""
    sub = rec.info.submitter
    facts: dict[str, Any] = dict(age_s=time.time() - rec.created_at,
                                 submitter_gone=sub is not None and not alive(sub), grace_s=grace_s)
    step = reconcile.unlaunched(**facts, backend_gone=False, backend_knows=None, launch_grace_s=0.0)
    if step.action == "keep":
        return rec  # a live submit may still be starting Ray or uploading the workdir
    provider = core.provider(rec.placed_on)
    gone = bool(provider.gone())
    knows = None if gone else not core.retrying(provider).state(rec.id, None).unknown
    step = reconcile.unlaunched(**facts, backend_gone=gone, backend_knows=knows,
                                launch_grace_s=provider.launch_grace_s)
    if step.action == "keep":
        return rec
    if step.action == "fail":
        return core.store.set_status(rec.id, "FAILED", step.message)
    core.store.set_status(rec.id, rec.status, step.message)
    return core.store.update(rec.id, backend_id=rec.id, address=provider.address)


def finish(core: Core, rec: JobRow, status: str, message: Optional[str]) -> JobRow:
    """Record a job's end: its log kept, its metrics and phases, its outcome as its runner
    said it, and its ledger line."""
    text = logs(core, rec)
    forget_secrets(core, rec)
    # The git workdir checked out for it (service/git_workdir.py): its backend took a
    # copy when it was launched, so it goes now rather than piling up in ORCH_HOME.
    shutil.rmtree(checkout_folder(core.settings.home, rec.id), ignore_errors=True)
    log_path = core.settings.home / "logs" / f"{rec.id}.log"
    if text:
        write_private(log_path, text)
        core.store.keep_log(rec.id, text)  # for every replica: its backend may forget the job
    metrics = from_log(text, rec.metrics, **trust(core, rec))
    result = metrics.pop("_result", None)  # the runner's own, for a job with an event key
    metrics["phases"] = phases(rec, text)
    if status == "SUCCEEDED" and result and result.get("ok") is False:
        status = "FAILED"
    if status == "FAILED":
        from orchestrator.service.why_failed import explain, message_with

        failure = explain(text, message)
        if failure:
            metrics["failure"] = failure  # its output's last error lines, and a hint
        said = str(result["error"]) if result and result.get("error") else None
        # A traceback as the runner's error is said once, under the message, not in it; the
        # runner's own words name the cause before the output's last exception does (a lost
        # node's worker died: the surviving worker's output ends in gloo's read error).
        own = explain(said, message) if said and "\n" in said.strip() else None
        message = (said if said and "\n" not in said.strip()
                   else message_with(own if own and own.get("error") else failure, said or message))
    stopped = RunMetrics.read(metrics).stopped
    if status == "SUCCEEDED" and stopped:  # the runner stopped itself at its budget
        status = "CANCELLED"
        message = (f"stopped at its budget after epoch {stopped.epoch}: "
                   f"{stopped.detail}; last checkpoint {RunMetrics.read(metrics).checkpoint}")
    if status == "SUCCEEDED":
        scaling(core, rec, metrics)
    clean = redactor(core, rec)  # what was decoded from its text too (JSON escapes)
    message = clean(message) if message else message
    rec = core.store.set_status(rec.id, status, message, metrics=clean.tree(metrics),
                                log_path=str(log_path) if text else rec.log_path)
    core.secrets.pop(rec.id, None)  # the job's text is all kept, redacted, by now
    from orchestrator.decision import job_ledger as ledger

    # The ledger line, kept with the job: what it cost and what it passed over.
    return core.store.update(rec.id, info=with_info(rec, cost=ledger.entry(rec).to_json()))


def forget_secrets(core: Core, rec: JobRow) -> None:
    """What its backend still keeps of an ended job's secret values, removed (ShipsSecrets)."""
    if not (rec.backend_id and rec.info.secret_hmacs):
        return
    with contextlib.suppress(OrchError):
        provider = core.provider(rec.placed_on)
        if isinstance(provider, ShipsSecrets):
            provider.forget_secrets(rec.backend_id)


def trust(core: Core, rec: JobRow) -> dict:
    """Which of its log's events may set a job's outcome (run_metrics.from_log): the
    state events signed with its event key; `stopped` only where it has a budget."""
    budget = rec.stored.budget.max_cost or core.settings.monthly_budget
    return {"key": rec.info.event_key or None,
            "budgeted": bool(rec.stored.train and budget)}


def phases(rec: JobRow, text: str) -> dict:
    """How long each phase of the job took (run_metrics.phases), from its record and log."""
    info = rec.info
    sub = info.submitter or {}
    started = sub.get("began", sub.get("started"))
    # A submitter that started long before the job is a server, not this job's submit.
    submitted = started if started and rec.created_at - started < SUBMIT_START_S else None
    return run_metrics.phases(text, submitted=submitted, recorded=rec.created_at,
                              launched=info.launched_at, ended=time.time())


def scaling(core: Core, rec: JobRow, metrics: dict) -> None:
    """With N workers, what they bought, against earlier one-worker runs of the same job."""
    add_scaling(metrics, [r.metrics.to_dict() for r in
                          core.store.runs_for_fingerprint(rec.fingerprint or "")
                          if r.status == "SUCCEEDED" and r.id != rec.id])


def redactor(core: Core, rec: JobRow, search: bool = True) -> redact.Redactor:
    """The one redaction of everything orch keeps or shows of a job's text (its log, its
    messages and history lines, its result): the job's secrets, as values this process
    holds (`orch serve` holds them from launch to end) and by the digests its record
    keeps, and any credential orch's own environment holds (AWS_SECRET_ACCESS_KEY and
    the like), should the job have printed one. `search` False: the values alone, for text
    that was redacted by all of it when it was kept (a finished job's log)."""
    info = rec.info
    values = list((core.secrets.get(rec.id) or {}).values())
    values += [v for k, v in os.environ.items() if len(v) >= 8 and redact.looks_secret(k)]
    if not search:
        return redact.Redactor(values)
    key = redact.store_key(core.settings.home, create=False,
                                file=core.settings.secret_key_file) if info.secret_hmacs else None
    return redact.Redactor(values, info.secret_salt, info.secret_hmacs, key,
                           info.secret_digests, info.secret_lengths, info.secret_heads)


def redact_text(core: Core, rec: JobRow, text: str) -> str:
    return redactor(core, rec)(text) if text else text


def logs(core: Core, rec: JobRow) -> str:
    """The job's log, secrets redacted: from the backend while it knows the job, else
    the saved copy. A finished job's log as kept: it was redacted whole when it was kept
    (`finish`), so a read costs no digest search (one took minutes of a server's CPU on a
    log of `a-a-a-...`); only the values this process holds are replaced again."""
    if rec.status in TERMINAL:
        kept = kept_log(core, rec)
        if kept is not None:
            return redactor(core, rec, search=False)(kept)
    return redact_text(core, rec, raw_logs(core, rec))


# What a job's log says last before it ends: the runner's `result` (a `train:` job), the
# wrapper's `end` when the command exited (a `run:` job, jobs/workspace.py).
_ENDING = ("result", "end")


def ending(text: str) -> bool:
    """Whether the runner has said its result, or a `run:` job's command has exited: the
    job ends within a second or two (a `run:` job within a moment), so a follower looks
    again sooner than once a second. A job's own line can say so too: all it buys is its
    own follower's quicker looks."""
    from jobs import events

    tail = text[-4096:].splitlines()[-8:]
    return any((events.parse_line(line) or {}).get("event") in _ENDING for line in tail)


def raw_logs(core: Core, rec: JobRow) -> str:
    """A finished job's log as kept at its end (this server's file, else the store's copy,
    which every replica reads); else its backend's."""
    if rec.status in TERMINAL:
        kept = kept_log(core, rec)
        if kept is not None:
            return kept
    if not rec.backend_id:
        return ""
    provider = core.provider(rec.placed_on)
    if isinstance(provider, KeepsLogs) and provider.gone():
        return provider.saved_logs(rec.backend_id)
    earlier = preemption.earlier_output(core, rec, provider)  # a resumed job's earlier runs
    try:
        return earlier + provider.logs(rec.backend_id)
    except BackendError:
        if isinstance(provider, KeepsLogs):  # what it left on disk, when it does not answer
            return earlier + provider.saved_logs(rec.backend_id)
        raise


def kept_log(core: Core, rec: JobRow) -> Optional[str]:
    """A finished job's log as `finish` kept it (this server's file, else the store's
    copy); None where none was kept."""
    if rec.log_path and Path(rec.log_path).exists():
        return Path(rec.log_path).read_text()
    return core.store.kept_log(rec.id)


def cancel(core: Core, job_id: str, wait_s: float = 30.0) -> JobRow:
    rec = core.store.get(job_id)
    if rec.status in TERMINAL:
        return rec
    core.store.update(rec.id, cancel_requested=1)
    rec = core.store.get(rec.id)
    if not rec.backend_id:
        return core.store.set_status(rec.id, "CANCELLED", "cancelled before launch")
    provider = core.provider(rec.placed_on)
    if provider.gone():
        return refresh(core, rec)
    core.retrying(provider).cancel(rec.backend_id)
    if held_elsewhere(core, rec):
        return rec  # stopping: the replica holding its values records its end
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        rec = refresh(core, core.store.get(rec.id))
        if rec.status in TERMINAL:
            return rec
        time.sleep(0.5)
    return rec


def list_jobs(core: Core, limit: int = 50) -> list[JobRow]:
    return refreshed(core, core.store.list(limit))


def refreshed(core: Core, rows: list[JobRow]) -> list[JobRow]:
    """Each job checked with its backend; one whose backend fails, as last known."""
    out = []
    for rec in rows:
        try:
            out.append(refresh(core, rec))
        except OrchError:
            out.append(rec)  # shown as last known; `orch status ID` names the problem
        except Exception:  # a bug this job's record or output meets: the list still answers
            log.exception("%s: checking it failed; shown as last known", rec.id)
            out.append(rec)
    return out


def backend_info(rec: JobRow) -> dict:
    """What the job's `info` holds, as the plain dict a backend reads its own launch info
    from (providers know no orch record)."""
    return rec.info.model_dump(mode="json", exclude_unset=True)


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (a log may hold what the job printed), whole
    or not at all: a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")  # per writer
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
