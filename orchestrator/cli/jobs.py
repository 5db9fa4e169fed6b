"""`orch status`, `orch logs`, `orch cancel`: follow and control recorded jobs."""

from __future__ import annotations

import time
from typing import Optional

import typer

from rich.markup import escape

from orchestrator.cli.render import (duration, err, job_duration, metric_summary, out, print_json,
                                     status_text, table)


def _orch():
    from orchestrator.service import Orch
    from orchestrator.settings import load_settings

    return Orch(load_settings())


def status(
    job_id: Optional[str] = typer.Argument(None, help="a job id (or a unique prefix); all jobs when omitted"),
    json_out: bool = typer.Option(False, "--json", help="JSON on stdout"),
    limit: int = typer.Option(50, "--limit", "-n", help="how many recent jobs to list"),
) -> None:
    """Show jobs (newest first) or one job in detail, after checking with their backends."""
    from orchestrator.store import public

    orch = _orch()
    if job_id is None:
        recs = orch.list(limit)
        if json_out:
            print_json([public(r) for r in recs])
            return
        if not recs:
            out.print("no jobs yet: `orch submit examples/quickstart.yaml` runs one")
            return
        out.print(table(
            ["ID", "NAME", "STATUS", "KIND", "TARGET", "CREATED", "DURATION", "METRICS"],
            [(r["id"], r["name"], status_text(r["status"]), r["kind"], r["target"],
              time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created_at"])),
              duration(job_duration(r)), metric_summary(r["metrics"] or {}))
             for r in recs]))
        return
    from orchestrator.errors import BackendError

    rec, warning = orch.get(job_id), None
    try:
        rec = orch.refresh(rec)
    except BackendError as e:  # show what is known, and why it may be stale
        warning = f"last known state: {e.message}" + (f"\n  -> {e.hint}" if e.hint else "")
    history = orch.store.history(rec["id"])
    if json_out:
        print_json({**public(rec, history), **({"warning": warning} if warning else {})})
        return
    out.print(f"[bold]{rec['id']}[/] {rec['name']}  {status_text(rec['status'])}")
    if warning:
        err.print(f"[yellow]warning:[/] {escape(warning)}")
    for label, value in (("kind", rec["kind"]), ("target", rec["target"]),
                         ("fingerprint", rec["fingerprint"]), ("duration", duration(job_duration(rec))),
                         ("job file", rec["source_file"]), ("message", rec["message"]),
                         ("log", rec["log_path"])):
        if value:
            out.print(f"  {label:12} {value}")
    metrics = rec["metrics"] or {}
    if metrics:
        out.print(f"  {'metrics':12} {metric_summary(metrics)}")
        if "time_data_s" in metrics:
            out.print(f"  {'step time':12} data {metrics['time_data_s'] * 1000:.1f} ms, copy "
                      f"{metrics['time_copy_s'] * 1000:.1f} ms, compute "
                      f"{metrics['time_compute_s'] * 1000:.1f} ms")
        verdict = metrics.get("verdict")
        if verdict:
            out.print(f"  {'verdict':12} {verdict['kind']}: " + "; ".join(verdict["advice"]))
        settings = metrics.get("run_settings")
        if settings:
            out.print(f"  {'run':12} " + ", ".join(f"{k} {v}" for k, v in settings.items()))
    ledger = (rec["info"] or {}).get("ledger")
    if ledger:
        out.print(f"  {'cost':12} {ledger['cost_usd']:.2f} USD for {ledger['billed_hours']:.2f} "
                  f"billed hours, {ledger['recoveries']} recoveries")
    scaling = metrics.get("scaling")
    if scaling:
        out.print(f"  {'scaling':12} {scaling['workers']} workers: {scaling['speedup']:.2f}x one "
                  f"worker ({scaling['efficiency']:.0%} efficiency)")
    out.print("  history")
    for h in history:
        out.print(f"    {h['at']}  {status_text(h['status'])}  {h['message'] or ''}")


def logs(
    job_id: str = typer.Argument(..., help="a job id (or a unique prefix)"),
    follow_: bool = typer.Option(False, "--follow", "-f", help="keep printing until the job ends"),
) -> None:
    """Print a job's log."""
    orch = _orch()
    rec = orch.refresh(orch.get(job_id))
    if follow_:
        from orchestrator.cli.follow import follow

        follow(orch, rec, out)
        return
    text = orch.logs(rec)
    if text:
        out.print(text, markup=False, highlight=False, end="" if text.endswith("\n") else "\n")


def cancel(job_id: str = typer.Argument(..., help="a job id (or a unique prefix)")) -> None:
    """Stop a job; it ends as CANCELLED."""
    orch = _orch()
    rec = orch.get(job_id)
    if rec["status"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
        out.print(f"{rec['id']} already ended: {status_text(rec['status'])}")
        return
    rec = orch.cancel(rec["id"])
    out.print(f"{rec['id']} {status_text(rec['status'])}")
    if rec["status"] != "CANCELLED":
        raise typer.Exit(1)
