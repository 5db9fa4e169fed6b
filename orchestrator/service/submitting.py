"""Submitting a job: check it, place it, record it as PENDING, then launch it on its
backend, storing the backend's id as soon as it exists."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from secrets import token_hex
from typing import NamedTuple, Optional

from orchestrator.base import failpoints, redact
from orchestrator.base.errors import BackendError
from orchestrator.base.preemption import RESTARTS_VAR, run_name
from orchestrator.records import JobRow, with_info
from orchestrator.records.placement import Placement
from orchestrator.service import placing
from orchestrator.service.core import Core
from orchestrator.service.launch_spec import launch_for
from orchestrator.service.processes import alive, submitter
from orchestrator.spec import JobSpec
from orchestrator.store import TERMINAL, new_job_id
from providers.base import HasLaunchInfo


class Recorded(NamedTuple):
    """A job just recorded (`Submitting.record`), or the one its idempotency key named."""
    rec: JobRow
    secrets: dict  # the `secrets:` values, for its launch only: never stored
    existing: bool  # the key was submitted before: `rec` is that earlier job


class Checked(NamedTuple):
    """A job that passed every check before recording: its secrets, code and placement."""
    secrets: dict  # the `secrets:` values, for its launch only: never stored
    fingerprint: str
    decision: Placement  # the plan it is placed by (`orch plan --json`'s shape)


class Submitted(NamedTuple):
    """What a submit did: the job's record, and whether its key was submitted before."""
    rec: JobRow
    existing: bool


def place(core: Core, spec: JobSpec, fp: str, dirty: bool, owner: Optional[str] = None) -> Placement:
    """Where a prepared job runs and why: the decision `orch plan` shows (placing.decided),
    refused (InputError) when it has no place to run."""
    return placing.placement(spec, placing.decided(core, spec, fp, dirty, owner))


def submit(core: Core, spec: JobSpec, idempotency_key: Optional[str] = None) -> Submitted:
    """Check, record (PENDING, with its idempotency key), then launch, storing the
    backend's id as soon as it exists. Bad input raises before anything is written.

    A key seen before returns that job: launched, ended, or still being launched by a
    live orch, it is left alone; recorded by an orch that died before its launch, this
    call takes the launch over. The backend knows the job by orch's id, so a launch
    that did happen is found, never repeated."""
    rec, secrets, existing = record(core, spec, idempotency_key)
    if existing:
        sub = rec.info.submitter
        if rec.backend_id or rec.status in TERMINAL or sub is None or alive(sub):
            return Submitted(rec, True)
        # Its orch died before storing a launch: take the launch over, as it was planned.
        rec = core.store.update(rec.id, info=with_info(rec, submitter=submitter()))
        core.store.set_status(rec.id, "PENDING", "launch taken over by a resubmit with "
                              "the same idempotency key")
    return Submitted(launch(core, rec, spec, secrets), existing)


def check(core: Core, spec: JobSpec, owner: Optional[str] = None) -> Checked:
    """Everything a job must pass before it is recorded, and where it is placed (the plan
    entry, service/placing.py); raises (bad input, no place to run) with nothing written."""
    secrets = spec.secret_strings()  # a secret with no value is a job-file error
    planned = placing.plan(core, spec, owner)
    return Checked(secrets, planned.fingerprint, placing.placement(spec, planned))


def record(core: Core, spec: JobSpec, idempotency_key: Optional[str] = None, *,
           owner: Optional[str] = None, priority: int = 0,
           info: Optional[dict] = None, checked: Optional[Checked] = None) -> Recorded:
    """Check, plan and record a job as PENDING (`checked`: what `check` found already);
    nothing is launched. Returns the record, the `secrets:` values and whether the key
    was submitted before. `orch serve` records a job here and launches it when its turn
    in the queue comes."""
    secrets, fp, decision = checked or check(core, spec, owner)
    failpoints.reached("planned")
    hidden = redact.secret_env(spec.envs, secrets)
    salt = redact.new_salt()
    job_id = new_job_id()
    # The key its runner signs its result and verdict with: a line the job's own code
    # prints cannot set its outcome (jobs/events.py).
    info = {**(info or {}), "submitter": submitter(), "event_key": token_hex(32)}
    if hidden:  # digests only: a log read after this process is gone is still redacted
        key = redact.store_key(core.settings.home, file=core.settings.secret_key_file)
        info.update(secret_salt=salt, secret_hmacs=redact.digests(hidden.values(), salt, key),
                    secret_lengths=redact.lengths(hidden.values()),
                    **redact.heads_info(hidden.values(), salt, key))
    rec = core.store.create_job(
        name=spec.name or "job", spec=redact.redact_spec(spec.model_dump(mode="json")),
        kind=decision.kind, target=decision.target, fingerprint=fp, decision=decision,
        source_file=str(Path(spec.source_file).resolve()) if spec.source_file else None,
        idempotency_key=idempotency_key or f"auto-{job_id}", job_id=job_id, info=info,
        owner=owner, priority=priority)
    failpoints.reached("recorded")
    return Recorded(rec, secrets, existing=rec.id != job_id)


def launch(core: Core, rec: JobRow, spec: JobSpec, secrets: Optional[dict] = None) -> JobRow:
    """Launch a recorded job as it was planned; `secrets` None: read them now."""
    secrets = spec.secret_strings() if secrets is None else secrets
    decision = rec.decision
    target = rec.placed_on
    provider = core.provider(target)
    core.secrets[rec.id] = redact.secret_env(spec.envs, secrets)
    try:
        provider.prepare()
        failpoints.reached("prepared")
        made = core.backend_class(target).adapt_launch(
            launch_for(core, rec.id, spec, target, decision, secrets,
                       event_key=rec.info.event_key), spec, decision)
        made = dataclasses.replace(made, owner=rec.owner)
        if rec.info.preemptions:  # run again by the preemption contract: a new name for it
            made = dataclasses.replace(made, submission_id=run_name(rec.id, rec.info.preemptions + 1),
                                       env={**made.env, RESTARTS_VAR: str(rec.info.preemptions)})
        backend_id = core.retrying(provider).submit(made)
        failpoints.reached("launched")
    except BackendError as e:
        core.secrets.pop(rec.id, None)
        core.store.set_status(rec.id, "FAILED", f"launch failed: {e.message}")
        raise
    extra = provider.launch_info(backend_id) if isinstance(provider, HasLaunchInfo) else {}
    if made.offers:  # what the cloud ledger prices each launch with
        extra = {**extra, "offers": [o.model_dump(mode="json") for o in made.offers]}
    # One write: the backend's id and what is needed to follow the job arrive together.
    info = with_info(rec, drop=("queued",), entrypoint=made.entrypoint,
                     storage_path=made.tags.storage_path,
                     run_name=made.tags.run_name,
                     launched_at=round(time.time(), 3), **extra)
    rec = core.store.update(rec.id, backend_id=backend_id, address=provider.address, info=info)
    failpoints.reached("stored")
    return rec
