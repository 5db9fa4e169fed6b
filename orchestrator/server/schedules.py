"""Registering a cron job with `orch serve`, and the status page's summary of the server.

A schedule keeps its job file's text to run it again at every slot, so the text must hold
no secret value: a scheduled job's `secrets:` are written `NAME: null` and taken from the
server's environment at each run (only the names serve_env_secrets lists for the schedule's
owner: client_policy); a literal value in `secrets:` or in a credential-like `envs:` entry is
refused at registration.
"""

from __future__ import annotations

import os
import time
from typing import Optional

from orchestrator.server import cron
from orchestrator.store import TERMINAL, iso, public_schedule


def literal_secrets(spec) -> list[str]:
    """The job file keys that hold a secret value a schedule would have to store."""
    from orchestrator.base.redact import looks_secret

    return ([f"envs.{k}" for k, v in spec.envs.items() if v is not None and looks_secret(k)]
            + [f"secrets.{k}" for k, v in spec.secrets.items() if v is not None])


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


def register(local, spec, text: str, file: Optional[str], owner: Optional[str],
             priority: int = 0, now: Optional[float] = None) -> dict:
    """Check a cron job as a submit would, refuse stored secrets, and record its schedule;
    its first slot is the first one after `now` (the scheduler's clock)."""
    from orchestrator.base import redact
    from orchestrator.service.fingerprint import fingerprint
    from orchestrator.spec.checks import check_runnable

    expr = spec.schedule.cron
    if not cron.valid(expr):
        raise spec.error("schedule.cron", f"{expr!r} is not a schedule croniter can read",
                         "five fields, minute hour day month weekday, e.g. '0 3 * * *' (UTC)")
    bad = literal_secrets(spec)
    if bad:
        names = [k.split(".", 1)[1] for k in bad]
        raise spec.error(bad[0], "a scheduled job cannot keep a secret value in its job file: "
                         "the server stores the file to run it again",
                         f"write `secrets: {{{names[0]}: null}}` and set {', '.join(names)} in the "
                         "server's environment: each run reads it there")
    check_runnable(spec, serves_clients=True)  # a schedule is always a client's
    check_server_secrets(spec, local.settings, owner)
    fp, dirty = fingerprint(spec, content_only=True)  # no git in a client's folder
    local.orch.place(spec, fp, dirty, owner)  # refused now rather than at every slot
    rec = local.orch.store.add_schedule(
        name=spec.name or "job", owner=owner, cron=expr,
        spec=redact.redact_spec(spec.model_dump(mode="json")), source_text=text,
        source_file=file, next_at=cron.next_slot(expr, time.time() if now is None else now),
        priority=priority)
    return public_schedule(rec, local.orch.store.schedule_events(rec["id"]))


def _check_may_change(s: dict, who) -> None:
    """`who` None: the store itself, on the server's machine (as `orch token` does)."""
    from orchestrator.server import auth

    if who is not None and not auth.may_cancel(who, s["owner"]):
        raise auth.Forbidden(f"{s['id']} belongs to {s['owner'] or 'the server'}: {who.name} "
                             "may not change it", "only its owner or an admin token (`orch token "
                             "create NAME --admin`) can")


def by_name(who) -> str:
    if who is not None:
        return who.name
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = f"uid {os.getuid()}"
    return f"{user}, on the store directly"


def set_paused(store, sched_id: str, paused: bool, who=None, now: Optional[float] = None) -> dict:
    """Pause or resume a schedule (its owner, an admin, or the store's own user); a resumed
    one runs from its next slot after `now`. Asking for the state it is in changes nothing
    ("unchanged": True)."""
    s = store.schedule(sched_id)
    _check_may_change(s, who)
    if s["paused"] == paused:
        return {**public_schedule(s, store.schedule_events(s["id"])), "unchanged": True}
    now = time.time() if now is None else now
    s = store.pause_schedule(s["id"], paused, cron.next_slot(s["cron"], now),
                             f"{'paused' if paused else 'resumed'} by {by_name(who)}")
    return public_schedule(s, store.schedule_events(s["id"]))


def remove(store, sched_id: str, who=None) -> dict:
    """Delete a schedule and its log; the jobs it ran are kept. Returns what it was."""
    s = store.schedule(sched_id)
    _check_may_change(s, who)
    gone = public_schedule(s, store.schedule_events(s["id"]))
    store.remove_schedule(s["id"])
    return gone


def summary(local, settings, limit: int = 50) -> dict:
    """Jobs with state, target, cost and verdict; the queue (each job's place overall and
    in its target's line, and what the scheduler last said it waits for); the month's
    spend against monthly_budget; the schedules. Money in settings.currency."""
    from orchestrator.decision import job_ledger as ledger

    rate, now = settings.currency_rate, time.time()
    store = local.orch.store
    jobs = []
    for pub in local.jobs(limit):  # each checked with its backend, as `orch status` does
        rec = store.get(pub.id)
        saved = rec.info.cost
        entry = saved if saved and rec.status in TERMINAL else ledger.entry(rec, now)
        verdict = (pub.metrics or {}).get("verdict") or {}
        jobs.append({"id": pub.id, "name": pub.name, "status": pub.status,
                     "target": pub.target, "kind": pub.kind, "owner": pub.owner,
                     "created_at": pub.created_at, "message": pub.message,
                     "cost": entry.cost_usd * rate, "verdict": verdict.get("kind"),
                     "advice": verdict.get("advice") or []})
    queue: list[dict] = []
    line: dict[str, int] = {}
    for i, r in enumerate(store.queued()):  # each target starts its own line in order
        line[r.target] = line.get(r.target, 0) + 1
        queue.append({"position": i + 1, "id": r.id, "name": r.name, "owner": r.owner,
                      "priority": r.priority or 0, "created_at": iso(r.created_at),
                      "target": r.target, "in_line": line[r.target],
                      "waiting_for": r.message})
    month_recs = store.list(limit=1_000_000, since=ledger.month_start(now))
    basis = settings.budget_basis  # the month counted as the monthly budget counts it
    spent = ledger.month_spend((ledger.entry(r, now) for r in month_recs), now, basis) * rate
    return {"now": iso(now), "currency": settings.currency, "jobs": jobs, "queue": queue,
            "month": {"month": time.strftime("%Y-%m", time.gmtime(now)), "spent": spent,
                      "budget": settings.monthly_budget, "basis": basis},
            "schedules": [public_schedule(s) for s in store.schedules()]}
