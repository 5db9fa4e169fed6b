"""`orch cost`: what jobs really cost, grouped, against what their best alternative would have."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.render import err, out, print_json, slow, table


def cost(
    since: Optional[str] = typer.Option(None, "--since", help="only jobs that ran on or after "
                                        "this date (YYYY-MM-DD, UTC)"),
    by: str = typer.Option("target", "--by", help="group by name, target, kind, month or day"),
    json_out: bool = typer.Option(False, "--json", help="JSON on stdout"),
    csv_file: Optional[Path] = typer.Option(None, "--csv", help="also write one line per job to FILE"),
    plot: Optional[Path] = typer.Option(None, "--plot", help="also draw spend over time by target "
                                        "to FILE (.png)"),
    jobs: bool = typer.Option(False, "--jobs", help="list each job's line too"),
) -> None:
    """What each job cost where it ran (cloud launches and recoveries, owned hardware's
    amortized purchase and power), what was paid out for it (cloud rental, owned hardware's
    power), and what the best option it passed over would have cost."""
    from orchestrator.base.errors import InputError
    from orchestrator.client import connect
    from orchestrator.decision import job_ledger as ledger
    from orchestrator.decision.pricing import fmt_money

    if plot is not None and plot.suffix.lower() != ".png":
        raise InputError(f"--plot {plot}: orch draws PNG files", "give a file name ending in .png")
    with slow("adding up what jobs cost"):
        report = connect().cost(by, since)
    cur, rate = report.currency, report.rate
    money = lambda usd: fmt_money(usd, cur, rate)  # noqa: E731
    entries, groups, month = report.jobs, report.groups, report.month
    total_usd, alt_usd = report.total.cost_usd, report.total.alternative_usd
    cash_usd = report.total.cash_usd  # None from an older `orch serve`
    if csv_file is not None:
        csv_file.write_text(ledger.to_csv(entries))
    if plot is not None:
        from orchestrator.cli.plots import plot_spend

        plot_spend(ledger.daily_by_target(entries), plot, currency=cur, rate=rate)
    if json_out:
        print_json(report.to_json())
        return
    if not entries:
        out.print("no jobs to price yet" + (f" since {since}" if since else "") +
                  ": `orch submit examples/quickstart.yaml` runs one")
        return
    cash = lambda r: money(r.cash_usd) if r.cash_usd is not None else "-"  # noqa: E731
    out.print(table([by.upper(), "JOBS", "HOURS", "GPU-HOURS", "COST", "CASH", "BEST ALTERNATIVE",
                     "SAVED"],
                    [(g.key, g.jobs, f"{g.hours:.2f}", f"{g.gpu_hours:.2f}",
                      money(g.cost_usd), cash(g), money(g.alternative_usd),
                      money(g.saved_usd)) for g in groups]))
    paid = "" if cash_usd is None else f" ({money(cash_usd)} in cash: cloud rental and power)"
    out.print(f"total: {money(total_usd)} for {len(entries)} jobs at full cost{paid}; their best "
              f"alternatives would have cost {money(alt_usd)}")
    measured = [e for e in entries if e.power_basis == "measured"]
    if measured:
        got = sum(e.power_usd or 0.0 for e in measured)
        rated = sum(e.power_rated_usd or 0.0 for e in measured)
        out.print(f"power of {len(measured)} owned job{'s' if len(measured) > 1 else ''}: "
                  f"{money(got)} from the energy their GPUs drew (NVML), where rated watts x "
                  f"hours says {money(rated)}")
    unpriced = sum(not e.full_cost_known for e in entries)
    if unpriced:
        from rich.markup import escape

        line = (f"{unpriced} job{'s' if unpriced > 1 else ''} ran on-prem where the full cost is "
                "unknown (no [[onprem]] inventory): counted at power only; add [[onprem]] gpu, "
                "count, purchase_price and watts to the settings to price them in full")
        out.print(f"[dim]{escape(line)}[/]")
    if month:
        share = month.spent / month.budget
        basis = month.basis  # "full" from an older `orch serve`, which counted the full cost
        what = ("in cash (cloud rental and power)" if basis == "cash"
                else "at full cost (owned hardware's purchase included)")
        out.print(f"{month.month}: {money(month.spent / rate)} spent {what} of the monthly "
                  f"budget {money(month.budget / rate)} ({share:.0%}; budget_basis = {basis})")
    if jobs:
        out.print(table(["ID", "NAME", "STATUS", "WHERE", "HOURS", "COST", "CASH", "ALTERNATIVE"],
                        [(e.id, e.name, e.status, e.where, f"{e.hours:.3f}",
                          money(e.cost_usd), cash(e),
                          f"{e.alternative.where} {money(e.alternative.cost_usd)}"
                          if e.alternative else "-") for e in entries]))
    for path, what in ((csv_file, "one line per job"), (plot, "spend over time by target")):
        if path is not None:
            err.print(f"wrote {path} ({what})")
