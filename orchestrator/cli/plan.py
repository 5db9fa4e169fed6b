"""`orch plan FILE`: where the job would run, what it would cost, and why."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from orchestrator.cli.render import out, print_json


def plan(file: Path = typer.Argument(..., help="job file (YAML)"),
         json_out: bool = typer.Option(False, "--json", help="print the decision as JSON"),
         show_all: bool = typer.Option(False, "--all", help="list every alternative"),
         emit: Optional[str] = typer.Option(None, "--emit", help="sky: print the SkyPilot task "
                                            "YAML orch would launch (valid for `sky launch`)")) -> None:
    """Show every place the job could run, ranked by cost per job, and the choice."""
    from orchestrator import planning
    from orchestrator.fingerprint import fingerprint
    from orchestrator.settings import load_settings
    from orchestrator.spec import load_spec

    spec = load_spec(file)
    settings = load_settings()
    fp, dirty = fingerprint(spec)
    history = planning.history_for(fp, settings)
    decision = planning.plan_job(spec, settings, fingerprint=fp, history=history, code_dirty=dirty)
    if emit is not None:
        _emit(emit, spec, settings, decision)
    elif json_out:
        print_json({**decision.to_dict(), "fingerprint": fp})
    else:
        render(decision, spec.name or str(file), limit=None if show_all else 40)


def _emit(kind: str, spec, settings, decision) -> None:
    """The SkyPilot task for the cloud offers of this plan, chosen one first."""
    import yaml

    from orchestrator.errors import InputError
    from orchestrator.service import Orch
    from providers.cloud import task_yaml

    if kind != "sky":
        raise InputError(f"--emit {kind}: the only format is 'sky'")
    d = decision.to_dict()
    clouds = [a for a in d["alternatives"] if a["target"] == "cloud" and a["excluded"] is None]
    if d["target"] != "cloud":
        if not clouds:
            raise InputError(f"no cloud offer is eligible for this job, so there is no SkyPilot "
                             f"task to emit ({d['refusal'] or 'target: ' + str(d['target'])})",
                             "enable clouds with ORCH_CLOUDS and allow cloud in placement.allow")
        d["choice"] = clouds[0]
    orch = Orch(settings)
    # Secret values are not needed to print the task: it names them for `sky launch --secret`.
    launch = orch.launch_for("orch-plan", spec, "cloud", d, secrets={k: "" for k in spec.secrets})
    config = task_yaml(orch.for_cloud(launch, spec, d))
    config = {k: v for k, v in config.items() if not k.startswith("_")}
    out.print(yaml.safe_dump(config, sort_keys=False), markup=False, highlight=False, end="")


def render(d, name: str, limit: int | None = 40) -> None:
    from orchestrator.decision.cost import fmt_money

    money = lambda usd: fmt_money(usd, d.currency, d.currency_rate)  # noqa: E731
    out.print(f"[bold]{escape(name)}[/]: [cyan]{d.kind}[/]")
    for r in d.classification.reasons:
        out.print(f"  - {escape(r)}")
    t = Table(title="alternatives, cheapest per job first", title_justify="left")
    for col in ("", "target", "cloud", "region", "GPU", "spot", "price/h", "est. hours",
                "est. cost", "excluded"):
        t.add_column(col, no_wrap=col not in ("excluded",),
                     justify="right" if col in ("price/h", "est. hours", "est. cost") else "left")
    rows = list(d.alternatives[:limit])
    if d.choice is not None and d.choice not in rows:
        rows.append(d.choice)
    for a in rows:
        o = a.offer
        dev = "CPU" if o.gpu is None else f"{o.gpu} x{a.used:g}" + (
            f" (of {o.count:g})" if o.owned and o.count != a.used else "")
        cost = money(a.est_cost)
        if a.marginal_cost is not None:
            cost += f" ({money(a.marginal_cost)} power)"
        t.add_row("[green]>[/]" if a is d.choice else "", o.target, o.cloud or "-",
                  o.region or "-", dev, "yes" if o.spot else "", money(a.price_per_hour),
                  "-" if a.est_hours is None else f"{a.est_hours:.3g}", cost,
                  escape(a.excluded or ""))
    out.print(t)
    hidden = len(d.alternatives) - len(rows)
    for note in d.notes + ((f"{hidden} more alternatives not shown (--all lists them)",)
                           if hidden > 0 else ()):
        out.print(f"[dim]{escape(note)}[/]")
    if d.choice is None:
        out.print(f"[red]no placement:[/] {escape(d.refusal or '')}")
        return
    out.print(f"[bold green]choice:[/] {d.target}, est. {d.est_hours:.3g} h, "
              f"{money(d.est_cost)} per job (decided on {d.decided_by} cost)")
    for r in d.reasons:
        out.print(f"  - {escape(r)}")
