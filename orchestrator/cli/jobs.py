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
    slow,
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


def _rows(recs: list[JobRecord]) -> list[tuple[JobRecord, str, str]]:
    """(record, name, status) a listed row: a job group's tasks as one row, at its first
    task's place, named for the group with its tasks' states (`orch status ID` of a task
    shows it whole)."""
    from orchestrator.decision.reconcile import group_status

    groups: dict[tuple, list[JobRecord]] = {}
    for r in recs:
        if r.run.group_jobs:
            groups.setdefault(tuple(sorted(r.run.group_jobs.values())), []).append(r)
        elif r.run.sweep:
            groups.setdefault((r.run.sweep,), []).append(r)
    rows, shown = [], set()
    for r in recs:
        key = (tuple(sorted(r.run.group_jobs.values())) if r.run.group_jobs
               else (r.run.sweep,) if r.run.sweep else None)
        if key is None:
            rows.append((r, r.name + _stage(r), r.status))
            continue
        if r.run.sweep:
            if key not in shown:
                shown.add(key)
                rows.append(_sweep_row(groups[key]))
            continue
        if key in shown:
            continue
        shown.add(key)
        order = list((r.run.group_jobs or {}).values())
        tasks = sorted(groups[key], key=lambda t: order.index(t.id) if t.id in order else 0)
        state = group_status([(t.status, t.run.primary is not False) for t in tasks])
        parts = ", ".join(f"{t.run.task} {t.status.lower()}" for t in tasks)
        rows.append((tasks[0], f"{r.run.group} (group: {parts})", state))
    return rows


def _sweep_row(runs: list[JobRecord]) -> tuple[JobRecord, str, str]:
    """A sweep's one row: its id, its runs' states and its best run so far."""
    from orchestrator.decision.reconcile import group_status
    from orchestrator.decision.sweeps import best

    first = min(runs, key=lambda t: t.run.sweep_run or 0)
    run = first.run
    counts: dict[str, int] = {}
    for t in runs:
        counts[t.status.lower()] = counts.get(t.status.lower(), 0) + 1
    states = ", ".join(f"{n} {s}" for s, n in counts.items())
    top = best([(t, t.metrics.reported()) for t in runs], run.sweep_metric, run.sweep_mode or "min")
    score = (f"; best {run.sweep_metric} {top[1]:.4g} ({top[0].run.sweep_values})" if top else "")
    shown = first.model_copy(update={"id": run.sweep or first.id})
    return (shown, f"{run.sweep_name or first.name} (sweep of {run.sweep_runs}: {states}{score})",
            group_status([(t.status, True) for t in runs]))


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
        with slow("checking jobs with their backends"):
            recs = client.jobs(limit)
        if json_out:
            print_json([r.to_json() for r in recs])
            return
        if not recs:
            out.print("no jobs yet: `orch submit examples/quickstart.yaml` runs one")
            return
        out.print(table(
            ["ID", "NAME", "STATUS", "KIND", "TARGET", "CREATED", "DURATION", "METRICS"],
            [(r.id, name, status_text(state), r.kind, r.target,
              time.strftime("%Y-%m-%d %H:%M", time.localtime(when(r.created_at))),
              duration(run_time(r)), metric_summary(r.metrics))
             for r, name, state in _rows(recs)]))
        return
    with slow(f"checking {job_id} with its backend"):
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
    group = (f"{run.group}: task {run.task} ({'primary' if run.primary else 'auxiliary'}); "
             + ", ".join(f"{t} {i}" for t, i in (run.group_jobs or {}).items())) if run.group else None
    sweep = (f"{run.sweep_name} ({run.sweep}): run {run.sweep_run} of {run.sweep_runs}, "
             f"{run.sweep_values}") if run.sweep else None
    for label, value in (("pipeline", stage), ("job group", group), ("sweep", sweep), ("kind", rec.kind),
                         ("target", rec.target),
                         ("fingerprint", rec.fingerprint), ("duration", duration(run_time(rec))),
                         ("job file", rec.source_file), ("message", rec.message),
                         ("log", rec.log_path)):
        if value:
            out.print(f"  {label:12} {escape(str(value))}")
    metrics = rec.metrics
    for line in failure_lines(metrics, " " * 15):
        out.print(line, highlight=False)
    if metrics:
        if metric_summary(metrics):  # a run stopped before its first report has none
            out.print(f"  {'metrics':12} {metric_summary(metrics)}")
        step = [metrics.number(f"time_{part}_s") for part in ("data", "copy", "compute")]
        if step[0] is not None:
            out.print(f"  {'step time':12} " + ", ".join(
                f"{part} {(s or 0) * 1000:.1f} ms" for part, s in zip(("data", "copy", "compute"), step)))
        device = device_summary(metrics)
        if device:
            out.print(f"  {'devices':12} {device}")
        idle = metrics.utilization
        if idle:
            out.print(f"  {'idle':12} {idle.reason} (utilization_policy, {idle.action})")
        verdict = metrics.verdict
        if verdict:
            out.print(f"  {'verdict':12} {verdict.kind}: " + "; ".join(verdict.advice))
        if metrics.phases:
            out.print(f"  {'time':12} {phase_summary(metrics.phases)}")
        settings = metrics.run_settings
        if settings:
            out.print(f"  {'run':12} " + ", ".join(f"{k} {v}" for k, v in settings.to_dict().items()))
    if rec.cost:  # a cloud job's bill
        out.print(f"  {'cost':12} {rec.cost.usd:.2f} USD for {rec.cost.billed_hours:.2f} "
                  f"billed hours, {rec.cost.recoveries} recoveries")
    scaling = metrics.scaling
    if scaling:
        out.print(f"  {'scaling':12} {scaling.workers} workers: {scaling.speedup:.2f}x one "
                  f"worker ({scaling.efficiency:.0%} efficiency)")
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
    with slow(f"reading {job_id}'s log"):
        text = client.logs(job_id)
    if not events_:
        from jobs.events import parse_line

        text = "".join(line for line in text.splitlines(keepends=True) if parse_line(line) is None)
    if text:
        out.print(text, markup=False, highlight=False, end="" if text.endswith("\n") else "\n")


def cancel(job_id: str = typer.Argument(..., help="a job id (or a unique prefix), or a sweep's id")) -> None:
    """Stop a job (or every run of a sweep); it ends as CANCELLED."""
    if job_id.startswith("sweep-"):  # every run of a sweep at once
        runs = _client().cancel_sweep(job_id)
        for r in runs:
            out.print(f"{r.id} {escape(r.name)} {status_text(r.status)}")
        return
    rec = _client().cancel(job_id)
    if rec.already_ended:
        out.print(f"{rec.id} already ended: {status_text(rec.status)}")
        return
    out.print(f"{rec.id} {status_text(rec.status)}")
    if rec.status != "CANCELLED":
        raise typer.Exit(1)
