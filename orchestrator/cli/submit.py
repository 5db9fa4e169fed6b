"""`orch submit FILE`: check, record and launch a job, then follow it unless detached."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape

from orchestrator.cli.given import ENV, ENV_FILE, SECRET, given
from orchestrator.cli.render import duration, err, failure_lines, metric_summary, out, print_json, status_text

if TYPE_CHECKING:
    from orchestrator.records import JobRecord, SubmittedPipeline


def submit(
    file: Path = typer.Argument(..., help="the job file (job.yaml)"),
    detach: bool = typer.Option(False, "--detach", "-d", help="return the job id at once"),
    json_out: bool = typer.Option(False, "--json", help="print the job record as JSON on stdout"),
    key: Optional[str] = typer.Option(None, "--idempotency-key", help="submitting the same key "
                                      "again returns that job instead of launching another: safe "
                                      "to retry after a crash or a lost connection"),
    priority: int = typer.Option(0, "--priority", help="place in an `orch serve` queue: higher "
                                 "launches first (ties: submission order); alone, jobs launch at once"),
    env: list[str] = ENV, env_file: Optional[Path] = ENV_FILE, secret: list[str] = SECRET,
) -> None:
    """Submit a job; in the foreground, stream its logs and progress until it ends."""
    from orchestrator.cli.follow import follow
    from orchestrator.cli.render import note
    from orchestrator.client import Remote, connect
    from orchestrator.records import Registered, SubmittedGroup, SubmittedPipeline, SubmittedSweep

    console = err if json_out else out
    values = given(env, env_file, secret)
    client = connect(on_ray_start=lambda: err.print(
        "[dim]starting the local Ray instance (reused by later jobs; `orch local down` stops it)[/]"),
        on_note=note)
    sub = client.submit(file, key=key, priority=priority, given=values)
    if isinstance(sub, Registered):  # a cron job sent to `orch serve`: it runs on its schedule
        s = sub.schedule
        # Only a server keeps schedules, so the client is a Remote and names it.
        server = f", run by the server at {escape(str(client.url))}" if isinstance(client, Remote) else ""
        if json_out:
            print_json(s.to_json())
        else:
            out.print(f"[bold]{s.id}[/] {escape(s.name)}: cron {escape(s.cron)}, next run "
                      f"{s.next_at} (UTC){server}")
        return
    if isinstance(sub, SubmittedSweep):  # one job a run, placed together
        _sweep(client, sub, console, detach, json_out)
        return
    if isinstance(sub, SubmittedGroup):  # one job a task, all at once
        _group(client, sub, console, detach, json_out)
        return
    if isinstance(sub, SubmittedPipeline):  # one job a stage, each after the one before
        _pipeline(client, sub, console, detach, json_out)
        return
    if sub.existing:
        err.print(f"[yellow]note:[/] idempotency key {escape(key or '')} was submitted before as "
                  f"{sub.id} ({sub.status}); nothing new was launched. A new key runs the "
                  "job again.")
    for warning in sub.decision.warnings if sub.decision else []:
        err.print(f"[yellow]note:[/] {escape(warning)}")
    if detach:
        if json_out:
            print_json(sub.model_dump(mode="json", exclude={"existing"}))  # the job's record
        else:
            out.print(sub.id)
        return
    console.print(f"[bold]{sub.id}[/] {sub.name} -> {sub.target} ({sub.kind}); "
                  f"Ctrl-C detaches, `orch cancel {sub.id}` stops it")
    try:
        rec = follow(client, sub, console)
    except KeyboardInterrupt:
        err.print(f"\ndetached: {sub.id} keeps running. `orch logs {sub.id} --follow` "
                  f"re-attaches, `orch cancel {sub.id}` stops it.")
        raise typer.Exit(130) from None
    _ended(console, rec)
    if json_out:
        print_json(rec.model_dump(mode="json", exclude={"warning"}))  # the job's final record
    raise typer.Exit(0 if rec.status == "SUCCEEDED" else 1)


def _ended(console, rec: JobRecord) -> None:
    """How a job ended: status, time, metrics, and the verdict's advice."""
    from orchestrator.cli.follow import run_time

    summary = metric_summary(rec.metrics)
    console.print(f"{rec.id} {status_text(rec.status)} in {duration(run_time(rec))}"
                  + (f"  {summary}" if summary else "")
                  + (f"\n  {escape(rec.message)}" if rec.status != "SUCCEEDED" and rec.message else ""))
    for line in failure_lines(rec.metrics):
        console.print(line, highlight=False)
    verdict = rec.metrics.verdict
    if verdict:
        console.print(f"[bold]{verdict.kind}[/]: {escape('; '.join(verdict.reasons))}")
        for advice in verdict.advice:
            console.print(f"  try: {escape(advice)}")


def _answered(sub, jobs: list, what: str, ids: list[str], detach: bool, json_out: bool) -> bool:
    """Said of several jobs submitted at once: that their key was seen before (nothing new
    launched), and, detached, their ids (or the record): True where that is all to say."""
    if any(j.existing for j in jobs):
        err.print("[yellow]note:[/] this idempotency key was submitted before: these are that "
                  f"{what}; nothing new was launched")
    if detach:
        if json_out:
            print_json(sub.model_dump(mode="json"))
        else:
            out.print("\n".join(ids))
    return detach


def _pipeline(client, sub: SubmittedPipeline, console, detach: bool, json_out: bool) -> None:
    """A pipeline's stages, recorded: their ids when detached, else each stage followed in
    turn (a stage starts once the one before it succeeded; after a failure the rest end
    CANCELLED, never started)."""
    from orchestrator.cli.follow import follow

    stages, name = sub.stages, sub.pipeline
    if _answered(sub, stages, "pipeline's stages", [s.id for s in stages], detach, json_out):
        return
    n = len(stages)
    console.print(f"[bold]pipeline {escape(name)}[/]: {n} stages, each once the one before "
                  "succeeded; Ctrl-C detaches")
    for i, s in enumerate(stages):
        console.print(f"  {i + 1}. {s.id} {escape(s.name)} -> {s.target} ({s.kind})")
    final = []
    try:
        for i, s in enumerate(stages):
            rec = client.job(s.id)
            if rec.status not in ("SUCCEEDED", "FAILED", "CANCELLED"):
                console.print(f"[bold]stage {i + 1}/{n}[/] {rec.id} {escape(rec.name)}")
                rec = follow(client, rec, console)
            _ended(console, rec)
            final.append(rec)
    except KeyboardInterrupt:
        err.print("\ndetached: the pipeline keeps going while an orch checks it (`orch status` "
                  "launches each stage once the one before succeeded); `orch cancel ID` stops "
                  "a stage, and the ones after it")
        raise typer.Exit(130) from None
    if json_out:
        print_json({"pipeline": name,
                    "stages": [r.model_dump(mode="json", exclude={"warning"}) for r in final]})
    raise typer.Exit(0 if all(r.status == "SUCCEEDED" for r in final) else 1)


def _group(client, sub, console, detach: bool, json_out: bool) -> None:
    """A job group's tasks, launched together: their ids when detached, else each task's
    status as it changes until every one has ended (an auxiliary task is stopped once the
    primary ones have ended, after its termination_delay)."""

    tasks, name = sub.tasks, sub.group
    if _answered(sub, tasks, "group's tasks", [t.id for t in tasks], detach, json_out):
        return
    console.print(f"[bold]job group {escape(name)}[/]: {len(tasks)} tasks, side by side; "
                  "Ctrl-C detaches")
    for t in tasks:
        console.print(f"  {t.id} {escape(t.name)} -> {t.target} ({t.kind}); "
                      f"`orch logs {t.id}` its output")
    final = _watch(client, [t.id for t in tasks], console, "`orch cancel ID` stops one "
                   "(the auxiliary tasks stop once the primary ones end)")
    if json_out:
        print_json({"group": name, "tasks": [r.model_dump(mode="json", exclude={"warning"})
                                             for r in final.values()]})
    ok = all(r.status == "SUCCEEDED" or (r.status == "CANCELLED" and r.run.primary is False)
             for r in final.values())
    raise typer.Exit(0 if ok else 1)


def _sweep(client, sub, console, detach: bool, json_out: bool) -> None:
    """A sweep's runs, launched longest first: their ids when detached, else each run's
    status as it changes until every one has ended, then the best run."""
    runs = sub.runs
    if _answered(sub, runs, "sweep's runs", [sub.sweep], detach, json_out):
        return
    where: dict[str, int] = {}
    for r in runs:
        where[r.target or "-"] = where.get(r.target or "-", 0) + 1
    console.print(f"[bold]sweep {escape(sub.name)}[/] ({sub.sweep}): {len(runs)} runs, "
                  + ", ".join(f"{n} on {t}" for t, n in sorted(where.items()))
                  + f"; Ctrl-C detaches, `orch cancel {sub.sweep}` stops them all")
    final = _watch(client, [r.id for r in runs], console, f"`orch cancel {sub.sweep}` stops them all")
    ended = list(final.values())
    from orchestrator.decision.reconcile import group_status
    from orchestrator.decision.sweeps import best

    run = runs[0].run
    top = best([(r, r.metrics.reported()) for r in ended], run.sweep_metric, run.sweep_mode or "min")
    if top is not None:
        row, value = top
        console.print(f"best {run.sweep_metric} {value:.4g}: {row.id} ({row.run.sweep_values})")
    if json_out:
        print_json({"sweep": sub.sweep, "name": sub.name,
                    "runs": [r.model_dump(mode="json", exclude={"warning"}) for r in ended]})
    state = group_status([(r.status, True) for r in ended])
    raise typer.Exit(0 if state == "SUCCEEDED" else 1)


def _watch(client, ids: list[str], console, hint: str) -> dict:
    """Each job's status printed as it changes until all have ended; their last records."""
    import time

    final = {i: client.job(i) for i in ids}
    seen = {i: r.status for i, r in final.items()}
    done = ("SUCCEEDED", "FAILED", "CANCELLED")
    try:
        while any(r.status not in done for r in final.values()):
            time.sleep(1.0)
            for i, r in final.items():
                if r.status not in done:
                    final[i] = client.job(i)
                if final[i].status != seen[i]:
                    seen[i] = final[i].status
                    if final[i].status in done:
                        _ended(console, final[i])
                    else:
                        console.print(f"{i} {escape(final[i].name)} {status_text(final[i].status)}")
    except KeyboardInterrupt:
        err.print(f"\ndetached: they keep running; `orch status` follows them, {hint}")
        raise typer.Exit(130) from None
    return final
