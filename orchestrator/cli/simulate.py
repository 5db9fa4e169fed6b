"""`orch simulate TRACE`: replay a workload through orch's planner and simple baselines, priced."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape
from rich.table import Table

from orchestrator.base.targets import CLOUD, ONPREM
from orchestrator.cli.render import err, out, print_json

if TYPE_CHECKING:
    from orchestrator.records.simulation import SimulationResult


def simulate(trace: Optional[Path] = typer.Argument(None, help="workload trace (CSV; see docs/simulate.md)"),
             json_out: bool = typer.Option(False, "--json", help="print the result as JSON"),
             plot: Optional[Path] = typer.Option(None, "--plot", help="write cost against wait "
                                                 "per policy to this PNG file"),
             generate: Optional[Path] = typer.Option(None, "--generate", help="write a synthetic "
                                                     "small-team trace to this file and stop"),
             days: int = typer.Option(90, "--days", min=1, max=3660, help="days to --generate"),
             seed: int = typer.Option(1, "--seed", help="seed of --generate and of spot preemptions"),
             onprem: Optional[list[str]] = typer.Option(None, "--onprem", help="owned GPUs, "
                                                        "GPU:COUNT:PRICE_USD[:WATTS] (repeatable); "
                                                        "default: the onprem setting"),
             clouds: Optional[str] = typer.Option(None, "--clouds", help="clouds to rent from, "
                                                  "comma-separated; default: the clouds setting"),
             catalog_dir: Optional[Path] = typer.Option(None, "--catalog-dir", help="price "
                                                        "catalogs (<cloud>/vms.csv)"),
             spot_rate: float = typer.Option(0.05, "--spot-preemptions", min=0.0, max=10.0,
                                             help="the true spot preemptions per running hour "
                                             "(policies believe the spot_preemptions_per_hour "
                                             "setting)"),
             first_report: float = typer.Option(1.25, "--first-report-minutes", min=0.0, max=1440.0,
                                                help="minutes from a run's start until its first "
                                                "measured throughput and data share reach orch, "
                                                "which later jobs of its kind are placed by (1.25: "
                                                "the runner's first minute, then orch serve's "
                                                "pass); 0: runs report only as they end"),
             mip_nodes: int = typer.Option(300, "--mip-nodes", min=1, max=10_000_000,
                                           help="branch-and-bound nodes after which the "
                                           "whole-job bound (a MIP) stops: a limit that does "
                                           "not move with the machine's load"),
             mip_seconds: float = typer.Option(600.0, "--mip-seconds", min=0.0, max=3600.0,
                                               help="the whole-job bound's safety time limit; "
                                               "0: the linear program's bound alone"),
             beliefs: str = typer.Option("learned", "--beliefs", help="what orch's policy is "
                                         "told of each job: learned (its job file and its own "
                                         "runs), truth (the true hours and speeds), or both "
                                         "(adds the row 'orch (true beliefs)' and what learning "
                                         "costs)"),
             owned: Optional[str] = typer.Option(None, "--owned", help="--generate: the team's "
                                                 "GPU model and owned count, GPU:COUNT (default "
                                                 "A100:4); the steady work is sized for them"),
             steady: float = typer.Option(1.0, "--steady", help="--generate: steady load "
                                          "multiplier (2: twice the nightly and weekly work)"),
             burst: Optional[str] = typer.Option(None, "--burst", help="--generate: runs per "
                                                 "sweep, LO:HI (default 4:12)"),
             noise: Optional[float] = typer.Option(None, "--estimate-noise", help="--generate: "
                                                   "write estimate_h, the true wall hours x "
                                                   "exp(N(0, SIGMA))"),
             bias: float = typer.Option(1.0, "--estimate-bias", help="--generate: every "
                                        "estimate_h this many times the truth besides its "
                                        "noise (3: 3x too long; 0.333: 3x too short)"),
             compute: Optional[str] = typer.Option(None, "--compute-share", help="--generate: "
                                                   "write per-job speeds from a compute-bound "
                                                   "share drawn in LO:HI per fingerprint")) -> None:
    """Replay a trace: the team's cash, waits by kind, deadline misses and on-prem use per policy."""
    from orchestrator.base.errors import InputError

    if generate is not None:
        if trace is not None:
            raise InputError("give either a TRACE to simulate or --generate FILE, not both")
        from orchestrator.simulate.generate import parse_shape

        _generate(generate, days, seed, parse_shape(owned, steady, burst, noise, compute, bias))
        return
    if beliefs not in ("learned", "truth", "both"):
        raise InputError(f"--beliefs {beliefs}: write learned, truth or both")
    if trace is None:
        raise InputError("give a TRACE file to simulate",
                         "`orch simulate --generate trace.csv` writes a 90-day example")
    from orchestrator.cli.plots import check_png_path
    from orchestrator.settings import load_settings
    from orchestrator.simulate.run import simulate as run
    from orchestrator.simulate.scenario import load_scenario
    from orchestrator.simulate.trace import load_trace

    if plot is not None:
        check_png_path(plot)
    settings = load_settings()
    t = load_trace(trace, settings.gpu_speeds)
    started = time.perf_counter()
    err.print(f"[dim]{len(t.jobs)} jobs over {t.days} days; reading the price catalogs ...[/]")
    scenario = load_scenario(settings, onprem or (), clouds, catalog_dir, spot_rate=spot_rate)
    result = run(t, scenario, settings, seed=seed, spot_rate=spot_rate, beliefs=beliefs,
                 mip_seconds=mip_seconds, mip_nodes=mip_nodes, first_report_h=first_report / 60.0,
                 progress=lambda msg: err.print(f"[dim]{escape(msg)}[/]"))
    result["wall_s"] = round(time.perf_counter() - started, 2)
    if plot is not None:
        from orchestrator.cli.plots import plot_policies

        plot_policies(result, plot)
        err.print(f"wrote {escape(str(plot))}")
    if json_out:
        print_json(result)
    else:
        render(result)


def _generate(path: Path, days: int, seed: int, shape) -> None:
    from orchestrator.base.errors import InputError
    from orchestrator.simulate.generate import generate
    from orchestrator.simulate.trace import format_trace

    jobs = generate(days, seed, shape)
    try:
        path.write_text(format_trace(jobs))
    except OSError as e:
        raise InputError(f"--generate {path}: cannot write the file: {e}") from None
    out.print(f"wrote {len(jobs)} jobs over {days} days to {escape(str(path))} (seed {seed})")


def _money(usd, result: SimulationResult) -> str:
    from orchestrator.decision.pricing import fmt_money

    return fmt_money(usd, result.currency, result.currency_rate)


def _h(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def render(answer: dict) -> None:
    from orchestrator.records.simulation import SimulationResult

    result = SimulationResult.model_validate(answer)
    out.print(f"trace {escape(result.trace)}: {result.jobs} jobs over {result.days} days")
    out.print(f"scenario: {escape(result.scenario)}")
    t = Table(show_edge=False, header_style="bold")
    for col in ("POLICY", "CASH TOTAL", "OWNERSHIP", "POWER", "CLOUD", "CHARGEBACK",
                "EXPL P95 WAIT H", "STEADY P95 WAIT H", "DEADLINE MISSES", "ON-PREM UTIL",
                "JOBS ON-PREM / CLOUD"):
        t.add_column(col, justify="left" if col == "POLICY" else "right", no_wrap=True)
    for r in result.policies:
        jobs = r.jobs_by_target
        placed = f"{jobs.get(ONPREM, 0):g} / {jobs.get(CLOUD, 0):g}"
        if r.unplaced:
            placed += f" ({r.unplaced} unplaced)"
        util = r.onprem_utilization
        name = r.name + {"oracle": " (lower bound)", "online-truth": " (reference)"}.get(r.name, "")
        if r.name == "orch" and result.beliefs == "truth":
            name = "orch (true beliefs)"
        t.add_row(name, _money(r.cash_total, result), _money(r.ownership, result),
                  _money(r.power, result), _money(r.cloud_spend, result),
                  _money(r.chargeback_total, result), _h(r.exploratory_p95_wait_h),
                  _h(r.steady_p95_wait_h), f"{r.deadline_misses} ({r.deadline_miss_rate:.1%})",
                  "-" if util is None else f"{util:.1%}", placed)
    out.print(t)
    out.print("[dim]cash total = ownership (purchase over the period, the same for every policy) "
              "+ power + cloud; chargeback = the old per-use figure (owned hours at amortized + "
              "power, idle ones free), for comparison only[/]")
    if result.learning_cost is not None:
        out.print(f"what learning costs: orch's power + cloud with learned beliefs is "
                  f"{result.learning_cost:.3f}x its spend when told the truth")
    true, believed = result.spot_preemptions_per_hour, result.believed_spot_preemptions_per_hour
    if believed is not None and true != believed:
        out.print(f"spot preemptions: {true:g} per running hour in truth; orch believes {believed:g} "
                  "(the spot_preemptions_per_hour setting)")
    for note in result.notes:
        out.print(f"[dim]{escape(note)}[/]")
    c = result.checks
    if c is None:
        return
    ok = lambda met: "[green]met[/]" if met else "[red]not met[/]"  # noqa: E731
    oracle = result.policy("oracle")
    if oracle is not None and oracle.bound:
        from orchestrator.simulate.oracle import bound_line

        rate, cur = result.currency_rate, result.currency
        out.print(escape(bound_line(oracle.bound)) + (
            "" if cur == "USD" else f" [dim](USD; x{rate:g} for {cur})[/]"))
    if c.orch_power_cloud_over_bound is not None:
        out.print(f"checks (what placement controls): orch's power + cloud / the best bound = "
                  f"{c.orch_power_cloud_over_bound:.3f} (goal <= {c.power_cloud_goal:g}: "
                  f"{ok(c.power_cloud_met)})")
    if c.orch_power_cloud_over_online is not None:
        out.print(f"checks (what placement controls): orch's power + cloud / online-truth's "
                  f"(the greedy told each job's truth on arrival) = "
                  f"{c.orch_power_cloud_over_online:.3f} (goal <= {c.online_goal:g}: "
                  f"{ok(c.online_met)})")
    ratio = "-" if c.orch_over_oracle is None else f"{c.orch_over_oracle:.3f}"
    if c.cheaper_than_every_baseline:
        cheaper = "[green]yes[/]"
    else:
        cheaper = "[red]no[/]: " + ", ".join(
            f"{n} costs {_money(p.cash_total if p else 0.0, result)}"
            for n, p in ((n, result.policy(n)) for n in c.baselines_not_beaten))
    apart = "; ".join(f"{n} {why}" for n, why in c.not_comparable.items())
    out.print(f"checks (cash): orch / the best bound = {ratio} (goal <= {c.ratio_goal:g}: "
              f"{ok(c.ratio_met)}); orch cheaper than every comparable baseline: {cheaper}; "
              f"orch deadline misses {c.orch_miss_rate:.1%} (goal <= {c.miss_goal:.0%}: "
              f"{ok(c.miss_met)}); orch exploratory p95 wait {_h(c.orch_exploratory_p95_wait_h)} h "
              f"(goal <= the cloud's start-up {c.wait_goal_h:.2f} h: {ok(c.wait_met)})")
    if apart:
        out.print(f"[dim]not comparable: {escape(apart)}[/]")
    out.print(f"[dim]simulated in {result.wall_s or 0.0:.1f} s[/]")
