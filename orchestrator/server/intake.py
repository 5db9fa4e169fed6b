"""A client's job file arriving at `orch serve`: the request's shape, the file read and
checked as a client's (no server path, no server variable: `client_policy`), its upload
put in as its workdir, then queued for the scheduler or registered as a schedule (the
service's schedule rules, after the secrets the server's environment gives its owner)."""

from __future__ import annotations

import os
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.base.errors import InputError
from orchestrator.records import Registered, SubmittedJob, with_info
from orchestrator.records.caller import Caller
from orchestrator.server.git_gate import Busy
from orchestrator.server.scheduler import queue_info
from orchestrator.service.orch import Orch
from orchestrator.service.respec import given_values
from orchestrator.service.upload import DIGEST_PATTERN

MAX_SPEC = 1 << 20  # the job file limit orch applies everywhere


class JobIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    spec: str = Field(..., max_length=MAX_SPEC, description="the job file's text (YAML)")
    file: Optional[str] = Field(None, max_length=4096, description="the job file's path: "
                                "named in messages; relative paths in it (workdir) are resolved "
                                "from it only inside the server's serve_workdir_roots")
    idempotency_key: Optional[str] = Field(None, max_length=200, description="the same key "
                                           "from the same user returns that job again")
    priority: int = Field(0, ge=-1000, le=1000, description="higher launches first")
    upload: Optional[str] = Field(None, pattern=DIGEST_PATTERN, description="a workdir this "
                                  "user sent before (POST /v1/uploads): the job runs from it")
    env: dict[str, str] = Field(default_factory=dict, description="`--env` values over the "
                                "job file's envs")
    secrets: dict[str, str] = Field(default_factory=dict, description="`--secret` values over "
                                    "the job file's secrets; never stored")


class PlanIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    spec: str = Field(..., max_length=MAX_SPEC)
    file: Optional[str] = Field(None, max_length=4096)
    upload: Optional[str] = Field(None, pattern=DIGEST_PATTERN)
    env: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(default_factory=dict)


def job_file(settings, body, who: Optional[Caller] = None):
    """(text, spec) of a submitted job file, checked as a client's; with an upload, its
    workdir is the upload (the caller's own, or any for an admin)."""
    from orchestrator.server import client_policy
    from orchestrator.spec import Overrides, load_spec_text

    given = Overrides(envs=dict(body.env), secrets=dict(body.secrets))
    spec = load_spec_text(body.spec, body.file or "<job>", given)
    if spec.sweep is not None:  # expanded and placed together by the embedded client only
        raise spec.error("sweep", "a sweep runs from `orch submit` without ORCH_SERVER (the "
                         "server takes one job a file)", "submit it from this machine (unset "
                         "ORCH_SERVER), or send each run as a file of its own")
    client_policy.check(spec, body, who.name if who else None, settings)  # no server path, no server env
    if body.upload is None:
        return body.spec, spec
    from orchestrator.service.upload import sharing, with_upload

    sharing.ensure(settings, body.upload, who.name if who else "", bool(who and who.admin))
    text = with_upload(body.spec, spec, settings.home, body.upload,
                       who.name if who else "", bool(who and who.admin))
    return text, load_spec_text(text, body.file or "<job>", given)


def check_server_secrets(spec, settings, owner: Optional[str]) -> None:
    """A job run by the server takes its null-valued secrets from the server's environment:
    only the names serve_env_secrets lists for its owner, and only when they are set there."""
    from orchestrator.server import client_policy

    client_policy.check_env_secrets(spec, owner, settings)
    missing = [k for k, v in spec.secrets.items() if v is None and k not in os.environ]
    if missing:  # listed for this user, so saying it is unset tells them nothing new
        raise spec.error(f"secrets.{missing[0]}", "listed in serve_env_secrets, but the "
                         "server's environment does not set it", f"the server's admin sets "
                         f"{', '.join(missing)} in the environment of `orch serve` (under "
                         "systemd: /etc/orch/serve.env) and restarts it")


def register(orch: Orch, spec, text: str, file: Optional[str], owner: Optional[str],
             priority: int = 0, now: Optional[float] = None, key: Optional[str] = None) -> dict:
    """Register a client's cron job: the secrets the server's environment gives it checked
    for its owner, then the service's rules (service/schedule_rules.register)."""
    check_server_secrets(spec, orch.settings, owner)
    return orch.register_schedule(spec, text, file, owner, priority, now, key)


def check_queue_share(orch: Orch, user: str) -> None:
    """Busy (429) when `user` has serve_queued_per_user jobs queued already: one user's
    submits cannot fill the queue (and the store) for everyone."""
    cap = orch.settings.serve_queued_per_user
    if not cap:
        return
    queued = sum(1 for r in orch.queued() if r.owner == user)
    if queued >= cap:
        raise Busy(f"{user} has {queued} jobs queued on this server, its most at once "
                   f"(serve_queued_per_user {cap})", "submit again once some have launched, "
                   "cancel some (orch cancel ID), or ask the server's admin to raise "
                   "serve_queued_per_user")


def queue_job(scheduler, body: JobIn, who: Caller, text: str, spec):
    """Record the job as queued for the scheduler (its secrets held in memory until it is
    launched), or register its schedule; the API's answer."""
    key = f"api:{who.name}:{body.idempotency_key}" if body.idempotency_key else None
    with scheduler.session() as orch:
        if spec.schedule.cron:
            if body.env or body.secrets:  # a schedule keeps the file's text, not these
                raise InputError("--env and --secret values are not kept with a schedule: "
                                 "its later runs would not have them",
                                 "write the envs into the job file; a scheduled job's "
                                 "secrets come from the server's environment")
            schedule = register(orch, spec, text, body.file, who.name, body.priority,
                                now=scheduler.clock(), key=key)
            return Registered.model_validate({"schedule": schedule})
        check_server_secrets(spec, orch.settings, who.name)
        check_queue_share(orch, who.name)
        extra = {"upload": body.upload} if body.upload else {}
        rec, _, existing = orch.record(spec, key, owner=who.name, priority=body.priority,
                                       info=queue_info(spec, **extra))
        if not existing:
            scheduler.hold(rec.id, spec)
            if given_values(rec):  # only this replica has them: it launches the job
                rec = orch.update(rec.id, info=with_info(rec, held_by=scheduler.me))
            rec = orch.set_status(
                rec.id, "PENDING", f"queued by orch serve (priority {body.priority}, "
                f"submitted by {who.name})")
    scheduler.wake()
    return SubmittedJob.from_row(rec, existing=existing)
