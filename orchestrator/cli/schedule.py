"""`orch schedule list / show / pause / resume / rm`: the cron schedules `orch serve` runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from orchestrator.cli.render import err, out, print_json, table

if TYPE_CHECKING:
    from orchestrator.client import Client
    from orchestrator.records import Schedule

schedule_app = typer.Typer(no_args_is_help=True, help="Cron schedules run by `orch serve` (a job "
                           "file with `schedule: {cron: ...}` submitted with ORCH_SERVER set "
                           "registers one).")

ID_HELP = "a schedule id (or a unique prefix)"


def _client() -> tuple[Client, Any]:
    from orchestrator.client import connect
    from orchestrator.settings import load_settings

    settings = load_settings()
    return connect(settings), settings


def _id(sched_id: str) -> str:
    if not sched_id.strip():
        from orchestrator.base.errors import InputError

        raise InputError("no schedule id given", "`orch schedule list` shows the schedules with their ids")
    return sched_id.strip()


def _where(settings) -> str:
    """Whose schedules these are, said once under every listing."""
    if settings.server:
        return f"run by the server at {settings.server}"
    from orchestrator.store import store_location

    return (f"no ORCH_SERVER: the schedules in this machine's store ({store_location(settings)}); "
            "they run only while `orch serve` runs with it")


def _state(s: Schedule) -> str:
    return "[magenta]paused[/]" if s.paused else "[green]active[/]"


@schedule_app.command("list")
def list_(json_out: bool = typer.Option(False, "--json", help="JSON on stdout")) -> None:
    """Every schedule: its cron, owner, next run and last slot (UTC)."""
    client, settings = _client()
    found = client.schedules()
    if json_out:
        print_json([s.to_json() for s in found])
        return
    if not found:
        out.print("no schedules: `orch submit FILE` with `schedule: {cron: ...}` in the job file "
                  "and ORCH_SERVER set registers one")
    else:
        out.print(table(["ID", "NAME", "OWNER", "CRON (UTC)", "NEXT RUN", "LAST SLOT", "PAUSED"],
                        [(s.id, escape(s.name), escape(s.owner or "-"), escape(s.cron),
                          "-" if s.paused else s.next_at, s.last_slot,
                          "yes" if s.paused else "no") for s in found]))
    err.print(f"[dim]{escape(_where(settings))}[/]")


@schedule_app.command("show")
def show(sched_id: str = typer.Argument(..., help=ID_HELP),
         json_out: bool = typer.Option(False, "--json", help="JSON on stdout")) -> None:
    """One schedule with its recent log: slots run, skipped, pauses."""
    client, settings = _client()
    s = client.schedule(_id(sched_id))
    if json_out:
        print_json(s.to_json())
        return
    out.print(f"[bold]{s.id}[/] {escape(s.name)}  {_state(s)}")
    for label, value in (("owner", s.owner), ("cron", f"{s.cron} (UTC)"),
                         ("next run", None if s.paused else s.next_at),
                         ("last slot", s.last_slot), ("priority", s.priority),
                         ("job file", s.source_file), ("registered", s.created_at)):
        if value is not None:
            out.print(f"  {label:12} {escape(str(value))}")
    out.print("  log")
    for e in s.log or []:
        out.print(f"    {e.at}  {escape(e.message or '')}")
    err.print(f"[dim]{escape(_where(settings))}[/]")


def _pause(sched_id: str, paused: bool) -> None:
    client, _ = _client()
    s = client.pause_schedule(_id(sched_id), paused)
    if s.unchanged:
        out.print(f"{s.id} {escape(s.name)} was already {'paused' if paused else 'active'}; "
                  "nothing changed")
    elif paused:
        out.print(f"{s.id} {escape(s.name)} paused: no runs until `orch schedule resume "
                  f"{s.id}`")
    else:
        out.print(f"{s.id} {escape(s.name)} resumed: next run {s.next_at} (UTC); slots "
                  "missed while it was paused do not run")


@schedule_app.command("pause")
def pause(sched_id: str = typer.Argument(..., help=ID_HELP)) -> None:
    """Stop a schedule's runs (its owner or an admin); a running job is not stopped."""
    _pause(sched_id, True)


@schedule_app.command("resume")
def resume(sched_id: str = typer.Argument(..., help=ID_HELP)) -> None:
    """Run a paused schedule again from its next slot."""
    _pause(sched_id, False)


@schedule_app.command("rm")
def rm(sched_id: str = typer.Argument(..., help=ID_HELP)) -> None:
    """Delete a schedule and its log (its owner or an admin); the jobs it ran are kept."""
    client, _ = _client()
    s = client.remove_schedule(_id(sched_id))
    out.print(f"{s.id} {escape(s.name)} removed, with its log; the jobs it ran are kept "
              "(`orch status`)")
