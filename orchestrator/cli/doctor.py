"""`orch doctor`: check the store, local Ray, the on-prem cluster, SkyPilot and S3; repair a
damaged store."""

from __future__ import annotations

import typer
from rich.markup import escape

from orchestrator.cli.render import local_only, out, print_json

_STYLE = {"ok": "[green]ok[/]     ", "problem": "[red]problem[/]", "skipped": "[dim]skipped[/]"}


def doctor(
    json_out: bool = typer.Option(False, "--json", help="JSON on stdout"),
    repair_store: bool = typer.Option(
        False, "--repair-store", help="move a damaged job store aside (it is kept) and salvage "
                                      "every readable job, API token and schedule into a new one"),
) -> None:
    """Check everything orch depends on; exit 1 when anything is a problem."""
    from orchestrator.service.orch import Orch
    from orchestrator.settings import load_settings

    settings = load_settings()
    local_only("doctor", "this machine (its store, Ray, SkyPilot and S3 access)")
    if repair_store and settings.database_url is not None:
        from orchestrator.base.errors import InputError
        from orchestrator.store import store_location

        raise InputError(f"--repair-store mends a SQLite store; this one is PostgreSQL at "
                         f"{store_location(settings)}", "PostgreSQL keeps its own: restore from "
                         "its backups (pg_dump / pg_restore); `orch doctor` shows what is wrong")
    orch = Orch(settings)
    repaired = orch.repair_store() if repair_store else None
    checks = orch.checks()
    problems = sum(c.ok is False for c in checks)
    if json_out:
        print_json({"ok": problems == 0, "problems": problems,
                    "checks": [c.as_dict() for c in checks],
                    **({"repair": repaired} if repaired is not None else {})})
    else:
        if repaired is not None:
            out.print(escape(_repair_text(repaired)))
        width = max(len(c.name) for c in checks)
        for c in checks:
            out.print(f"{_STYLE[c.state]}  {escape(c.name):{width}}  {escape(c.detail)}")
            if c.fix and c.ok is False:
                out.print(f"{'':9}  {'':{width}}  [dim]fix:[/] {escape(c.fix)}")
        out.print("no problems" if not problems else
                  f"{problems} problem{'s' if problems > 1 else ''}")
    if problems:
        raise typer.Exit(1)


# Each table as the repair's report names its rows.
_ROWS = {"jobs": "job rows", "job_events": "history events", "tokens": "API token rows",
         "schedules": "schedule rows", "schedule_events": "schedule log events"}


def _and(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def _repair_text(answer: dict) -> str:
    from orchestrator.records.repair import StoreRepair

    r = StoreRepair.model_validate(answer)
    if not r.done:
        return r.reason
    t = r.tables
    tokens, schedules, logs = r.table("tokens"), r.table("schedules"), r.table("schedule_events")
    saved = [f"{r.jobs} jobs", f"{r.events} history events"]
    # Tokens and schedules only where there were some: a store without them reads as before.
    if tokens.salvaged or tokens.gone:
        saved.append(f"{tokens.salvaged} API tokens"
                     + (f" ({tokens.revoked} revoked)" if tokens.revoked else ""))
    if any(x.salvaged or x.gone for x in (schedules, logs)):
        saved.append(f"{schedules.salvaged} schedules"
                     + (f" ({schedules.paused} paused)" if schedules.paused else ""))
        saved.append(f"{logs.salvaged} schedule log events")
    lost = [f"{v.unreadable} {_ROWS[k]}" for k, v in t.items() if v.unreadable]
    tail = [_ROWS[k] for k, v in t.items() if v.more_may_be_lost]
    text = (f"moved the damaged store to {r.moved_to} (kept; delete it yourself once you no "
            f"longer need it)\nsalvaged {_and(saved)} into a new store at {r.new_store}"
            + (f"; unreadable: {_and(lost)}" if lost else "")
            + (f"; unreadable at the end, so not counted: {_and(tail)}" if tail else ""))
    if tokens.gone or r.lost_token_names:
        names = r.lost_token_names
        text += ("\nlost API tokens: a lost live token is refused (401) until its holder is given "
                 "a new one (`orch token create NAME`)"
                 + ("; salvaged jobs and schedules name owners whose token is gone: "
                    + ", ".join(names) if names else ""))
    if schedules.gone or r.lost_schedules:
        named = [s.id + (f" ({s.name})" if s.name else "") for s in r.lost_schedules]
        dropped = logs.dropped
        text += ("\nlost schedules: they no longer run; send their job files to `orch serve` again "
                 "(each starts at its next slot)"
                 + (f"; salvaged jobs and logs name these: {', '.join(named)}" if named else "")
                 + (f"; their {dropped} log events stay only in the file kept aside"
                    if dropped else ""))
    return text
