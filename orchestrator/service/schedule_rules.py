"""The rules of cron schedules (`orch serve` runs them): registering one, pausing, resuming
and removing it. The server's API and `orch schedule` on this machine's store both call
these; when a slot is due is `decision.cron_slots`.

A schedule keeps its job file's text to run it again at every slot, so the text must hold
no secret value: a scheduled job's `secrets:` are written `NAME: null` and taken from the
server's environment at each run (which names, the server decides for each owner:
server/client_policy); a literal value in `secrets:` or in a credential-like `envs:` entry
is refused at registration.
"""

from __future__ import annotations

import os
import time
from typing import Optional

from orchestrator.base.errors import Forbidden
from orchestrator.decision import cron_slots
from orchestrator.records import Schedule
from orchestrator.records.caller import Caller, may_change
from orchestrator.records.schedule import ScheduleRow
from orchestrator.service import placing
from orchestrator.service.core import Core
from orchestrator.store import Store, iso


def literal_secrets(spec) -> list[str]:
    """The job file keys that hold a secret value a schedule would have to store."""
    from orchestrator.base.redact import looks_secret

    return ([f"envs.{k}" for k, v in spec.envs.items() if v is not None and looks_secret(k)]
            + [f"secrets.{k}" for k, v in spec.secrets.items() if v is not None])


def register(core: Core, spec, text: str, file: Optional[str], owner: Optional[str],
             priority: int = 0, now: Optional[float] = None,
             idempotency_key: Optional[str] = None) -> dict:
    """Check a cron job as a submit of a client's would be checked and placed (the plan
    entry: service/placing.py), refuse stored secrets, and record its schedule; its first
    slot is the first one after `now` (the scheduler's clock). Each slot's run reads the
    job file's text again, its git ref included."""
    from orchestrator.base import redact

    expr = spec.schedule.cron
    if not cron_slots.valid(expr):
        raise spec.error("schedule.cron", f"{expr!r} is not a schedule croniter can read",
                         "five fields, minute hour day month weekday, e.g. '0 3 * * *' (UTC)")
    bad = literal_secrets(spec)
    if bad:
        names = [k.split(".", 1)[1] for k in bad]
        raise spec.error(bad[0], "a scheduled job cannot keep a secret value in its job file: "
                         "the server stores the file to run it again",
                         f"write `secrets: {{{names[0]}: null}}` and set {', '.join(names)} in the "
                         "server's environment: each run reads it there")
    # A schedule is always a client's; refused now rather than at every slot.
    placing.placement(spec, placing.plan(core, spec, owner, client=True))
    store = core.store
    rec, existing = store.keyed_schedule(
        name=spec.name or "job", owner=owner, cron=expr,
        spec=redact.redact_spec(spec.model_dump(mode="json")), source_text=text,
        source_file=file, next_at=cron_slots.next_slot(expr, core.clock() if now is None else now),
        priority=priority, idempotency_key=idempotency_key)
    return Schedule.from_row(rec, store.schedule_events(rec.id), existing=existing).to_json()


def _check_may_change(s: ScheduleRow, who: Optional[Caller]) -> None:
    """`who` None: the store itself, on the server's machine (as `orch token` does)."""
    if who is not None and not may_change(who, s.owner):
        raise Forbidden(f"{s.id} belongs to {s.owner or 'the server'}: {who.name} "
                        "may not change it", "only its owner or an admin token (`orch token "
                        "create NAME --admin`) can")


def by_name(who: Optional[Caller]) -> str:
    if who is not None:
        return who.name
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = f"uid {os.getuid()}"
    return f"{user}, on the store directly"


def set_paused(store: Store, sched_id: str, paused: bool, who: Optional[Caller] = None,
               now: Optional[float] = None) -> dict:
    """Pause or resume a schedule (its owner, an admin, or the store's own user); a resumed
    one runs from its next slot after `now`. Asking for the state it is in changes nothing
    ("unchanged": True)."""
    s = store.schedule(sched_id)
    _check_may_change(s, who)
    if s.paused == paused:
        return Schedule.from_row(s, store.schedule_events(s.id), unchanged=True).to_json()
    now = time.time() if now is None else now
    s = store.pause_schedule(s.id, paused, cron_slots.next_slot(s.cron, now),
                             f"{'paused' if paused else 'resumed'} by {by_name(who)}")
    return Schedule.from_row(s, store.schedule_events(s.id)).to_json()


def remove(store: Store, sched_id: str, who: Optional[Caller] = None) -> dict:
    """Delete a schedule and its log; the jobs it ran are kept. Returns what it was."""
    s = store.schedule(sched_id)
    _check_may_change(s, who)
    gone = Schedule.from_row(s, store.schedule_events(s.id)).to_json()
    store.remove_schedule(s.id)
    return gone


def listed(store: Store) -> list[dict]:
    """Every schedule with its recent log."""
    return [Schedule.from_row(s, store.schedule_events(s.id)).to_json() for s in store.schedules()]


def upcoming(store: Store, count: int = 3) -> dict[str, list[Optional[str]]]:
    """Each schedule's next `count` slots (UTC, ISO 8601) from its next run; none while paused."""
    out: dict[str, list[Optional[str]]] = {}
    for s in store.schedules():
        slots: list[float] = []
        if not s.paused and s.next_at is not None:
            slots = [s.next_at]
            while len(slots) < count:
                slots.append(cron_slots.next_slot(s.cron, slots[-1]))
        out[s.id] = [iso(t) for t in slots]
    return out


def shown(store: Store, sched_id: str) -> dict:
    """One schedule (an id or a unique prefix) with its recent log."""
    s = store.schedule(sched_id)
    return Schedule.from_row(s, store.schedule_events(s.id)).to_json()
