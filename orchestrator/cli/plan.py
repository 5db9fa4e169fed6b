"""`orch plan FILE`: where the job would run, what it would cost, and why."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape
from rich.table import Table

from orchestrator.base.targets import CLOUD, rented
from orchestrator.cli.given import ENV, ENV_FILE, SECRET, given
from orchestrator.cli.render import out, print_json

if TYPE_CHECKING:
    from orchestrator.records.placement import GroupPlan, PipelinePlan, PlacedOffer, Placement


def plan(file: Path = typer.Argument(..., help="job file (YAML)"),
         json_out: bool = typer.Option(False, "--json", help="print the decision as JSON"),
         show_all: bool = typer.Option(False, "--all", help="list every alternative"),
         emit: Optional[str] = typer.Option(None, "--emit", help="sky: print the SkyPilot task "
                                            "YAML orch would launch (valid for `sky launch`)"),
         env: list[str] = ENV, env_file: Optional[Path] = ENV_FILE,
         secret: list[str] = SECRET) -> None:
    """Show every place the job could run, ranked by cost per job, and the choice."""
    from orchestrator.cli.render import note, slow
    from orchestrator.client import connect
    from orchestrator.records.placement import GroupPlan, PipelinePlan, SweepPlan

    values = given(env, env_file, secret)
    client = connect(on_note=note)
    with slow("planning: reading offers and prices"):
        d = client.plan(file, values)
    if isinstance(d, GroupPlan):  # a job group: each task's plan
        _plan_group(d, json_out, show_all)
        return
    if isinstance(d, SweepPlan):  # a sweep: each run's plan, in a line
        _plan_sweep(d, json_out)
        return
    if isinstance(d, PipelinePlan):  # a pipeline: each stage's plan, in order
        _plan_pipeline(d, file, values, emit, json_out, show_all)
        return
    if emit is not None:
        from orchestrator.settings import load_settings
        from orchestrator.spec import load_spec

        _emit(emit, load_spec(file, values), load_settings(), d)
    elif json_out:
        print_json(d.to_json())
    else:
        from orchestrator.spec import load_spec

        render(d, load_spec(file, values).name or str(file), limit=None if show_all else 40)


def _plan_sweep(d, json_out: bool) -> None:
    from orchestrator.cli.render import table
    from orchestrator.decision.pricing import fmt_money

    if json_out:
        print_json(d.model_dump(mode="json"))
        return
    rows = []
    for i, (label, p) in enumerate(zip(d.values, d.runs), 1):
        est = p.estimate
        rows.append((i, label, p.target or "-", p.kind or "-",
                     f"{est.hours:.2f}" if est and est.hours is not None else "-",
                     fmt_money(est.cost_usd or 0.0, "USD", 1.0) if est else "-"))
    out.print(f"[bold]sweep {escape(d.sweep)}[/]: {len(d.runs)} runs, planned at "
              f"{fmt_money(d.total_cost_usd, 'USD', 1.0)} in all; each placed alone here: "
              "`orch submit` gives owned GPUs to the longest runs first")
    out.print(table(["RUN", "VALUES", "TARGET", "KIND", "EST. HOURS", "EST. COST"], rows))


def _plan_group(d: GroupPlan, json_out: bool, show_all: bool) -> None:
    if json_out:
        print_json(d.model_dump(mode="json"))
        return
    for i, (name, task) in enumerate(zip(d.task_names, d.tasks)):
        out.print(f"[bold]task {escape(name)}[/] ({i + 1} of {len(d.tasks)}) of job group "
                  f"{escape(d.group)}")
        render(task, name, limit=None if show_all else 40)


def _plan_pipeline(d: PipelinePlan, file: Path, values, emit: Optional[str], json_out: bool,
                   show_all: bool) -> None:
    from orchestrator.spec.pipeline import Pipeline, load_job

    if json_out and emit is None:
        print_json(d.model_dump(mode="json"))
        return
    pipeline = load_job(file, values)
    assert isinstance(pipeline, Pipeline)  # the client planned it as one
    if emit is not None:  # SkyPilot's own pipeline form: its header, then a task a stage
        from orchestrator.settings import load_settings

        settings = load_settings()
        out.print(f"name: {pipeline.name}", markup=False, highlight=False)
        for spec, stage in zip(pipeline.stages, d.stages):
            out.print("---", markup=False, highlight=False)
            _emit(emit, spec, settings, stage)
        return
    for i, (spec, stage) in enumerate(zip(pipeline.stages, d.stages)):
        out.print(f"[bold]stage {i + 1} of {len(d.stages)}[/] of pipeline {escape(d.pipeline)}")
        render(stage, spec.name or str(file), limit=None if show_all else 40)


def _emit(kind: str, spec, settings, plan: Placement) -> None:
    """The SkyPilot task for the cloud offers of this plan (the `--json` shape), chosen one first."""
    import yaml

    from orchestrator.base.errors import InputError
    from orchestrator.service.orch import Orch
    from providers.cloud import task_yaml

    if kind != "sky":
        raise InputError(f"--emit {kind}: the only format is 'sky'")
    d = plan.model_copy()
    clouds = [a for a in d.alternatives if not a.owned and a.excluded is None]
    if not rented(d.target):
        if not clouds:
            raise InputError(f"no cloud offer is eligible for this job, so there is no SkyPilot "
                             f"task to emit ({d.refusal or 'target: ' + str(d.target)})",
                             "enable clouds with ORCH_CLOUDS and allow cloud in placement.allow")
        d.choice = clouds[0]
    orch = Orch(settings)
    orch.pin(spec)  # the commit a submit would launch
    # Secret values are not needed to print the task: it names them for `sky launch --secret`.
    launch = orch.launch_for("orch-plan", spec, CLOUD, d, secrets={k: "" for k in spec.secrets})
    config = task_yaml(orch.for_cloud(launch, spec, d))
    config = {k: v for k, v in config.items() if not k.startswith("_")}
    out.print(yaml.safe_dump(config, sort_keys=False), markup=False, highlight=False, end="")


WIDTH = 100  # the most columns a plan takes, whatever the terminal: reasons wrap, not cut


def _width() -> int:
    return max(60, min(out.width, WIDTH))


def _say(text: str, first: str = "", rest: str = "", style: str = "") -> None:
    """`text` wrapped to the plan's width with a hanging indent, every word kept (a
    SkyPilot credential hint is a sentence to read whole)."""
    import textwrap

    lines = textwrap.wrap(text, _width(), initial_indent=first, subsequent_indent=rest,
                          break_long_words=False, break_on_hyphens=False) or [first]
    for line in lines:
        out.print(f"[{style}]{escape(line)}[/]" if style else escape(line), highlight=False)


def render(d: Placement, name: str, limit: int | None = 40) -> None:
    """The plan's table and reasons (money already in its currency), in 100 columns: why an
    alternative is excluded is a numbered line under the table, said once for every row
    it excludes."""
    from orchestrator.decision.pricing import fmt_money

    cur = d.estimate.currency or "USD"
    money = lambda v: fmt_money(v, cur)  # noqa: E731
    own = d.classification.reasons
    out.print(f"[bold]{escape(name)}[/]: [cyan]{d.kind}[/]")
    for r in own:
        _say(r, "  - ", "    ")
    _say("alternatives, best first: ranked by marginal cost (rent, or owned GPUs' power + what "
         "they displace); full cost for the record")
    t = Table(show_edge=False, pad_edge=False, header_style="bold")
    for col in ("", "target", "where", "GPU", "spot", "price/h", "hours", "marginal",
                "full cost", "excl."):
        t.add_column(col, no_wrap=col in ("", "target", "GPU", "price/h", "hours", "excl."),
                     justify="right" if col in ("price/h", "hours", "marginal",
                                                "full cost") else "left")
    alts, choice = d.alternatives, d.choice
    rows = list(alts[:limit])
    if choice is not None and choice not in rows:
        rows.append(choice)
    chosen = next((i for i, a in enumerate(rows) if a == choice), None)
    excluded: dict[str, int] = {}  # each reason once, numbered as first met
    for i, a in enumerate(rows):
        owned = not rented(a.target)
        dev = "CPU" if a.gpu is None else f"{a.gpu} x{a.count:g}" + (
            f" (of {a.offer_count:g})" if owned and a.offer_count is not None
            and a.offer_count != a.count else "") + (
            f" on {a.nodes} nodes" if a.nodes > 1 else "")
        marginal = money(a.marginal_cost)
        if owned and a.marginal_cost is not None:
            marginal += " power" + (" + displaced" if a.congestion_cost else "")
        full = money(a.est_cost) + ("" if a.full_cost_known else " (power only)")
        where = " ".join(x for x in (a.cloud, a.region) if x) or "-"
        mark = ""
        if a.excluded:
            mark = f"[{excluded.setdefault(a.excluded, len(excluded) + 1)}]"
        t.add_row("[green]>[/]" if i == chosen else "", a.target, escape(where), escape(dev),
                  "yes" if a.spot else "", money(a.price_per_hour),
                  "-" if a.est_hours is None else f"{a.est_hours:.3g}", marginal, full,
                  escape(mark))
    out.print(t, width=_width(), soft_wrap=False)
    if excluded:
        out.print("excluded:")
    for reason, n in excluded.items():
        _say(reason, f"  [{n}] ", " " * (len(str(n)) + 5))
    _hours_sources(rows)
    hidden = len(alts) - len(rows)
    notes = [n for n in d.notes if n not in (d.refusal or "")]  # said once, below
    for note in notes + ([f"{hidden} more alternatives not shown (--all lists them)"]
                         if hidden > 0 else []):
        _say(note, style="dim")
    if choice is None:
        out.print("[red]no placement:[/]")
        _say(d.refusal or "", "  ", "  ")
        return
    est = d.estimate
    what = ("to rent" if rented(d.target) else "of power")
    decided = est.marginal if "marginal" in est.model_fields_set else est.cost
    out.print("[bold green]choice:[/]")
    _say(f"{d.target}, est. {est.hours:.3g} h, {money(decided)} {what} decided (marginal cost); "
         f"{money(est.cost)} per job in full", "  ", "  ")
    warnings = d.warnings  # first among the reasons, then the classification's
    for r in warnings + d.reasons[len(warnings) + len(own):]:
        _say(r, "  - ", "    ")


def _hours_sources(rows: list[PlacedOffer]) -> None:
    """Where each device's hours came from (its measured runs, the team's, the peak table),
    once per device shown."""
    seen: dict[str, str] = {}
    for a in rows:
        dev = "CPU" if a.gpu is None else f"{a.gpu}x{a.count:g}"
        if a.hours_basis and a.est_hours is not None:
            seen.setdefault(dev, f"{dev}: {a.est_hours:.3g} h from {a.hours_basis}")
    if seen:
        out.print("hours per device:")
    for line in seen.values():
        _say(line, "  - ", "    ")
