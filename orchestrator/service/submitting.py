"""Submitting a job: check it, place it, record it as PENDING, then launch it on its
backend, storing the backend's id as soon as it exists."""

from __future__ import annotations

import time
from pathlib import Path
from secrets import token_hex
from typing import NamedTuple, Optional

from orchestrator.base import failpoints, redact
from orchestrator.base.errors import BackendError, InputError
from orchestrator.records import JobRow, with_info
from orchestrator.records.placement import Placement
from orchestrator.service import fingerprint as fingerprint_module
from orchestrator.service import git_workdir
from orchestrator.service.launch_spec import LaunchBuilder
from orchestrator.service.processes import alive, submitter
from orchestrator.spec import JobSpec
from orchestrator.spec.check_memo import CheckMemo, memo_path
from orchestrator.spec.checks import check_runnable
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


class Submitting(LaunchBuilder):
    def place(self, spec: JobSpec, fp: str, dirty: bool, owner: Optional[str] = None) -> Placement:
        """Where the job runs and why: the decision `orch plan` shows (planning.plan); its
        hours learn `owner`'s bias (how their runs compare with their estimates)."""
        from orchestrator.service import planning

        decision, notes = planning.plan(spec, self.settings, fingerprint=fp, code_dirty=dirty,
                                        owner=owner)
        if decision.choice is None:
            raise InputError(f"{spec.source_file or spec.name}: no place to run this job: "
                             f"{decision.refusal}",
                             "`orch plan FILE` lists every alternative and why it was excluded")
        record = planning.as_record(decision, notes)
        record.alternatives = record.alternatives[:10]  # the record keeps the best few
        return record

    def submit(self, spec: JobSpec, idempotency_key: Optional[str] = None) -> Submitted:
        """Check, record (PENDING, with its idempotency key), then launch, storing the
        backend's id as soon as it exists. Bad input raises before anything is written.

        A key seen before returns that job: launched, ended, or still being launched by a
        live orch, it is left alone; recorded by an orch that died before its launch, this
        call takes the launch over. The backend knows the job by orch's id, so a launch
        that did happen is found, never repeated."""
        rec, secrets, existing = self.record(spec, idempotency_key)
        if existing:
            sub = rec.info.submitter
            if rec.backend_id or rec.status in TERMINAL or sub is None or alive(sub):
                return Submitted(rec, True)
            # Its orch died before storing a launch: take the launch over, as it was planned.
            rec = self.store.update(rec.id, info=with_info(rec, submitter=submitter()))
            self.store.set_status(rec.id, "PENDING", "launch taken over by a resubmit with "
                                  "the same idempotency key")
        return Submitted(self.launch(rec, spec, secrets), existing)

    def check(self, spec: JobSpec, owner: Optional[str] = None) -> Checked:
        """Everything a job must pass before it is recorded, and where it is placed; raises
        (bad input, no place to run) with nothing written."""
        fp, dirty = self.prepared(spec)
        secrets = spec.secret_strings()  # a secret with no value is a job-file error
        return Checked(secrets, fp, self.place(spec, fp, dirty, owner))

    def prepared(self, spec: JobSpec) -> tuple[str, bool]:
        """The checks a plan and a submit share before placement (the job can run where it
        would go, its git workdir is pinned, its resume_from names a usable run); returns
        its fingerprint and whether its code has uncommitted changes."""
        serves = git_workdir.serves_clients(self.settings)
        if serves:
            check_runnable(spec, serves_clients=True)
        git_workdir.pin(spec, git_workdir.reach(self.settings))
        self.resume_point(spec)
        if serves:
            # `orch serve` runs no git in a client's folder: its repository's config could
            # make git run anything (docs/security.md). The code is its files' content.
            return fingerprint_module.fingerprint(spec, content_only=True)
        found = fingerprint_module.fingerprint(spec)
        # What passed for this fingerprint (code, command, config) is not checked again.
        check_runnable(spec, memo=CheckMemo(memo_path(self.settings.home), found[0]))
        return found

    def record(self, spec: JobSpec, idempotency_key: Optional[str] = None, *,
               owner: Optional[str] = None, priority: int = 0,
               info: Optional[dict] = None, checked: Optional[Checked] = None) -> Recorded:
        """Check, plan and record a job as PENDING (`checked`: what `check` found already);
        nothing is launched. Returns the record, the `secrets:` values and whether the key
        was submitted before. `orch serve` records a job here and launches it when its turn
        in the queue comes."""
        secrets, fp, decision = checked or self.check(spec, owner)
        failpoints.reached("planned")
        hidden = redact.secret_env(spec.envs, secrets)
        salt = redact.new_salt()
        job_id = new_job_id()
        # The key its runner signs its result and verdict with: a line the job's own code
        # prints cannot set its outcome (jobs/events.py).
        info = {**(info or {}), "submitter": submitter(), "event_key": token_hex(32)}
        if hidden:  # digests only: a log read after this process is gone is still redacted
            key = redact.store_key(self.settings.home)
            info.update(secret_salt=salt, secret_hmacs=redact.digests(hidden.values(), salt, key),
                        secret_lengths=redact.lengths(hidden.values()))
        rec = self.store.create_job(
            name=spec.name or "job", spec=redact.redact_spec(spec.model_dump(mode="json")),
            kind=decision.kind, target=decision.target, fingerprint=fp, decision=decision,
            source_file=str(Path(spec.source_file).resolve()) if spec.source_file else None,
            idempotency_key=idempotency_key or f"auto-{job_id}", job_id=job_id, info=info,
            owner=owner, priority=priority)
        failpoints.reached("recorded")
        return Recorded(rec, secrets, existing=rec.id != job_id)

    def launch(self, rec: JobRow, spec: JobSpec, secrets: Optional[dict] = None) -> JobRow:
        """Launch a recorded job as it was planned; `secrets` None: read them now."""
        secrets = spec.secret_strings() if secrets is None else secrets
        decision = rec.decision
        target = rec.placed_on
        provider = self.provider(target)
        self._secrets[rec.id] = redact.secret_env(spec.envs, secrets)
        try:
            provider.prepare()
            failpoints.reached("prepared")
            launch = self._backend_class(target).adapt_launch(
                self.launch_for(rec.id, spec, target, decision, secrets,
                                event_key=rec.info.event_key), spec, decision)
            backend_id = self._retry(provider, "submit", launch)
            failpoints.reached("launched")
        except BackendError as e:
            self._secrets.pop(rec.id, None)
            self.store.set_status(rec.id, "FAILED", f"launch failed: {e.message}")
            raise
        extra = provider.launch_info(backend_id) if isinstance(provider, HasLaunchInfo) else {}
        if launch.offers:  # what the cloud ledger prices each launch with
            extra = {**extra, "offers": [o.model_dump(mode="json") for o in launch.offers]}
        # One write: the backend's id and what is needed to follow the job arrive together.
        info = with_info(rec, drop=("queued",), entrypoint=launch.entrypoint,
                         storage_path=launch.metadata.get("storage_path"),
                         run_name=launch.metadata.get("run_name"),
                         launched_at=round(time.time(), 3), **extra)
        rec = self.store.update(rec.id, backend_id=backend_id, address=provider.address,
                                info=info)
        failpoints.reached("stored")
        return rec
