"""`orch doctor`: check the store, local Ray, the on-prem cluster, SkyPilot and S3; repair a
damaged store."""

from __future__ import annotations

import typer
from rich.markup import escape

from orchestrator.cli.render import out, print_json

_STYLE = {"ok": "[green]ok[/]     ", "problem": "[red]problem[/]", "skipped": "[dim]skipped[/]"}


def doctor(
    json_out: bool = typer.Option(False, "--json", help="JSON on stdout"),
    repair_store: bool = typer.Option(
        False, "--repair-store", help="move a damaged job store aside (it is kept) and salvage "
                                      "every readable job into a new one"),
) -> None:
    """Check everything orch depends on; exit 1 when anything is a problem."""
    from orchestrator import doctor as doc
    from orchestrator.settings import load_settings

    settings = load_settings()
    repaired = doc.repair_store(settings.home) if repair_store else None
    checks = doc.run_checks(settings)
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


def _repair_text(r: dict) -> str:
    if not r["done"]:
        return r["reason"]
    lost = [f"{r[key]} {what}" for key, what in (("unreadable_jobs", "job rows"),
                                                  ("unreadable_events", "history events"))
            if r[key]]
    return (f"moved the damaged store to {r['moved_to']} (kept; delete it yourself once you no "
            f"longer need it)\nsalvaged {r['jobs']} jobs and {r['events']} history events into "
            f"a new store at {r['store']}"
            + (f"; unreadable: {' and '.join(lost)}" if lost else "")
            + ("; rows after the last readable one may be lost too"
               if r["unreadable_tail"] else ""))
