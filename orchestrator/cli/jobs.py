"""`orch status`, `orch logs`, `orch cancel`: follow and control recorded jobs."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape

from orchestrator.cli.render import (
    device_summary,
    duration,
    err,
    failure_lines,
    metric_summary,
    out,
    phase_summary,
    print_json,
    status_text,
    table,
)

if TYPE_CHECKING:
    from orchestrator.client import Client
    from orchestrator.records import JobRecord


def _stage(rec: JobRecord) -> str:
    """' [2/3]' for a pipeline's stage, '' for a job alone."""
    run = rec.run
    return f" [{run.stage}/{run.stages}]" if run.stage else ""


def _client() -> Client:
    from orchestrator.client import connect

    return connect()


def status(
    job_id: Optional[str] = typer.Argument(None, help="a job id (or a unique prefix); all jobs when omitted"),
    json_out: bool = typer.Option(False, "--json", help="JSON on stdout"),
    limit: int = typer.Option(50, "--limit", "-n", help="how many recent jobs to list"),
) -> None:
    """Show jobs (newest first) or one job in detail, after checking with their backends."""
    from orchestrator.cli.follow import run_time, when

    client = _client()
    if job_id is None:
        recs = client.jobs(limit)
        if json_out:
            print_json([r.to_json() for r in recs])
            return
        if not recs:
            out.print("no jobs yet: `orch submit examples/quickstart.yaml` runs one")
            return
        out.print(table(
            ["ID", "NAME", "STATUS", "KIND", "TARGET", "CREATED", "DURATION", "METRICS"],
            [(r.id, r.name + _stage(r), status_text(r.status), r.kind, r.target,
              time.strftime("%Y-%m-%d %H:%M", time.localtime(when(r.created_at))),
              duration(run_time(r)), metric_summary(r.metrics or {}))
             for r in recs]))
        return
    rec = client.job(job_id)
    warning = rec.warning
    if json_out:
        print_json(rec.to_json())
        return
    out.print(f"[bold]{rec.id}[/] {rec.name}  {status_text(rec.status)}")
    if warning:
        err.print(f"[yellow]warning:[/] {escape(warning)}")
    run = rec.run
    stage = (f"{run.pipeline}: stage {run.stage} of {run.stages}"
             + (f", after {run.after} succeeded" if run.after else "")) if run.stage else None
    for label, value in (("pipeline", stage), ("kind", rec.kind), ("target", rec.target),
                         ("fingerprint", rec.fingerprint), ("duration", duration(run_time(rec))),
                         ("job file", rec.source_file), ("message", rec.message),
                         ("log", rec.log_path)):
        if value:
            out.print(f"  {label:12} {escape(str(value))}")
    metrics = rec.metrics or {}
    for line in failure_lines(metrics, " " * 15):
        out.print(line, highlight=False)
    if metrics:
        if metric_summary(metrics):  # a run stopped before its first report has none
            out.print(f"  {'metrics':12} {metric_summary(metrics)}")
        if "time_data_s" in metrics:
            out.print(f"  {'step time':12} data {metrics['time_data_s'] * 1000:.1f} ms, copy "
                      f"{metrics['time_copy_s'] * 1000:.1f} ms, compute "
                      f"{metrics['time_compute_s'] * 1000:.1f} ms")
        device = device_summary(metrics)
        if device:
            out.print(f"  {'devices':12} {device}")
        idle = metrics.get("utilization")
        if idle:
            out.print(f"  {'idle':12} {idle.get('reason')} (utilization_policy, {idle.get('action')})")
        verdict = metrics.get("verdict")
        if verdict:
            out.print(f"  {'verdict':12} {verdict['kind']}: " + "; ".join(verdict["advice"]))
        if metrics.get("phases"):
            out.print(f"  {'time':12} {phase_summary(metrics['phases'])}")
        settings = metrics.get("run_settings")
        if settings:
            out.print(f"  {'run':12} " + ", ".join(f"{k} {v}" for k, v in settings.items()))
    if rec.cost:  # a cloud job's bill
        out.print(f"  {'cost':12} {rec.cost.usd:.2f} USD for {rec.cost.billed_hours:.2f} "
                  f"billed hours, {rec.cost.recoveries} recoveries")
    scaling = metrics.get("scaling")
    if scaling:
        out.print(f"  {'scaling':12} {scaling['workers']} workers: {scaling['speedup']:.2f}x one "
                  f"worker ({scaling['efficiency']:.0%} efficiency)")
    out.print("  history")
    for h in rec.history:
        out.print(f"    {h.at}  {status_text(h.status)}  {h.message or ''}")


def logs(
    job_id: str = typer.Argument(..., help="a job id (or a unique prefix)"),
    follow_: bool = typer.Option(False, "--follow", "-f", help="keep printing until the job ends"),
    events_: bool = typer.Option(False, "--events", help="orch's event lines too (::orch::{...})"),
) -> None:
    """Print a job's log: its own output (orch's event lines only with --events)."""
    client = _client()
    if follow_:
        from orchestrator.cli.follow import follow

        follow(client, client.job(job_id), out)
        return
    text = client.logs(job_id)
    if not events_:
        from jobs.events import parse_line

        text = "".join(line for line in text.splitlines(keepends=True) if parse_line(line) is None)
    if text:
        out.print(text, markup=False, highlight=False, end="" if text.endswith("\n") else "\n")


def cancel(job_id: str = typer.Argument(..., help="a job id (or a unique prefix)")) -> None:
    """Stop a job; it ends as CANCELLED."""
    rec = _client().cancel(job_id)
    if rec.already_ended:
        out.print(f"{rec.id} already ended: {status_text(rec.status)}")
        return
    out.print(f"{rec.id} {status_text(rec.status)}")
    if rec.status != "CANCELLED":
        raise typer.Exit(1)
