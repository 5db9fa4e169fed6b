"""Registering a cron job with `orch serve`, and the status page's summary of the server.

A schedule keeps its job file's text to run it again at every slot, so the text must hold
no secret value: a scheduled job's `secrets:` are written `NAME: null` and taken from the
server's environment at each run; a literal value in `secrets:` or in a credential-like
`envs:` entry is refused at registration.
"""

from __future__ import annotations

import time
from typing import Optional

from orchestrator.server import cron
from orchestrator.store import TERMINAL, iso, public_schedule


def literal_secrets(spec) -> list[str]:
    """The job file keys that hold a secret value a schedule would have to store."""
    from orchestrator.redact import looks_secret

    return ([f"envs.{k}" for k, v in spec.envs.items() if v is not None and looks_secret(k)]
            + [f"secrets.{k}" for k, v in spec.secrets.items() if v is not None])


def check_server_secrets(spec) -> None:
    """A job run by the server takes its null-valued secrets from the server's environment."""
    import os

    missing = [k for k, v in spec.secrets.items() if v is None and k not in os.environ]
    if missing:
        raise spec.error(f"secrets.{missing[0]}", "no value, and the server's environment does "
                         "not set it", f"set {', '.join(missing)} in the environment of `orch "
                         "serve` (under systemd: /etc/orch/serve.env) and restart it")


def register(local, spec, text: str, file: Optional[str], owner: Optional[str],
             priority: int = 0, now: Optional[float] = None) -> dict:
    """Check a cron job as a submit would, refuse stored secrets, and record its schedule;
    its first slot is the first one after `now` (the scheduler's clock)."""
    from orchestrator import redact
    from orchestrator.checks import check_runnable
    from orchestrator.fingerprint import fingerprint

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
    check_runnable(spec)
    check_server_secrets(spec)
    fp, dirty = fingerprint(spec)
    local.orch.place(spec, fp, dirty)  # refused now rather than at every slot
    rec = local.orch.store.add_schedule(
        name=spec.name or "job", owner=owner, cron=expr,
        spec=redact.redact_spec(spec.model_dump(mode="json")), source_text=text,
        source_file=file, next_at=cron.next_slot(expr, time.time() if now is None else now),
        priority=priority)
    return public_schedule(rec, local.orch.store.schedule_events(rec["id"]))


def summary(local, settings, limit: int = 50) -> dict:
    """Jobs with state, target, cost and verdict; the queue; the month's spend against
    monthly_budget; the schedules. Money in settings.currency."""
    from orchestrator import ledger

    rate, now = settings.currency_rate, time.time()
    store = local.orch.store
    jobs = []
    for pub in local.jobs(limit):  # each checked with its backend, as `orch status` does
        rec = store.get(pub["id"])
        saved = (rec["info"] or {}).get("cost")
        entry = saved if saved and rec["status"] in TERMINAL else ledger.entry(rec, now)
        verdict = (pub["metrics"] or {}).get("verdict") or {}
        jobs.append({"id": pub["id"], "name": pub["name"], "status": pub["status"],
                     "target": pub["target"], "kind": pub["kind"], "owner": pub["owner"],
                     "created_at": pub["created_at"], "message": pub["message"],
                     "cost": entry["cost_usd"] * rate, "verdict": verdict.get("kind"),
                     "advice": verdict.get("advice") or []})
    queue = [{"position": i + 1, "id": r["id"], "name": r["name"], "owner": r.get("owner"),
              "priority": r.get("priority") or 0, "created_at": iso(r["created_at"])}
             for i, r in enumerate(store.queued())]
    month_recs = store.list(limit=1_000_000, since=ledger.month_start(now))
    spent = ledger.month_spend((ledger.entry(r, now) for r in month_recs), now) * rate
    return {"now": iso(now), "currency": settings.currency, "jobs": jobs, "queue": queue,
            "month": {"month": time.strftime("%Y-%m", time.gmtime(now)), "spent": spent,
                      "budget": settings.monthly_budget},
            "schedules": [public_schedule(s) for s in store.schedules()]}
