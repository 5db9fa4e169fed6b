"""`orch submit FILE`: check, record and launch a job, then follow it unless detached."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from orchestrator.cli.render import err, metric_summary, out, print_json, status_text, duration, job_duration


def submit(
    file: Path = typer.Argument(..., help="the job file (job.yaml)"),
    detach: bool = typer.Option(False, "--detach", "-d", help="return the job id at once"),
    json_out: bool = typer.Option(False, "--json", help="print the job record as JSON on stdout"),
    key: Optional[str] = typer.Option(None, "--idempotency-key", help="submitting the same key "
                                      "again returns that job instead of launching another: safe "
                                      "to retry after a crash or a lost connection"),
) -> None:
    """Submit a job; in the foreground, stream its logs and progress until it ends."""
    from orchestrator.cli.follow import follow
    from orchestrator.service import Orch
    from orchestrator.settings import load_settings
    from orchestrator.spec import load_spec
    from orchestrator.store import public

    spec = load_spec(file)
    settings = load_settings()
    console = err if json_out else out
    orch = Orch(settings, on_ray_start=lambda: err.print(
        "[dim]starting the local Ray instance (reused by later jobs; `orch local down` stops it)[/]"))
    rec = orch.submit(spec, idempotency_key=key)
    if rec.get("existing"):
        err.print(f"[yellow]note:[/] idempotency key {escape(key or '')} was submitted before as "
                  f"{rec['id']} ({rec['status']}); nothing new was launched. A new key runs the "
                  "job again.")
    for warning in (rec["decision"] or {}).get("warnings", []):
        err.print(f"[yellow]note:[/] {escape(warning)}")
    if detach:
        if json_out:
            print_json(public(rec))
        else:
            out.print(rec["id"])
        return
    console.print(f"[bold]{rec['id']}[/] {rec['name']} -> {rec['target']} ({rec['kind']}); "
                  f"Ctrl-C detaches, `orch cancel {rec['id']}` stops it")
    try:
        rec = follow(orch, rec, console)
    except KeyboardInterrupt:
        err.print(f"\ndetached: {rec['id']} keeps running. `orch logs {rec['id']} --follow` "
                  f"re-attaches, `orch cancel {rec['id']}` stops it.")
        raise typer.Exit(130)
    summary = metric_summary(rec["metrics"] or {})
    console.print(f"{rec['id']} {status_text(rec['status'])} in {duration(job_duration(rec))}"
                  + (f"  {summary}" if summary else "")
                  + (f"\n  {rec['message']}" if rec["status"] != "SUCCEEDED" and rec["message"] else ""))
    verdict = (rec["metrics"] or {}).get("verdict")
    if verdict:
        console.print(f"[bold]{verdict['kind']}[/]: {escape('; '.join(verdict['reasons']))}")
        for advice in verdict["advice"]:
            console.print(f"  try: {escape(advice)}")
    if json_out:
        print_json(public(rec, orch.store.history(rec["id"])))
    raise typer.Exit(0 if rec["status"] == "SUCCEEDED" else 1)
