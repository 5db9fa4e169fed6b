"""`orch cost`: what jobs really cost, grouped, against what their best alternative would have."""

from __future__ import annotations

import calendar
import time
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer

from orchestrator.cli.render import err, out, print_json, table


def _since(text: Optional[str]) -> Optional[float]:
    from orchestrator.errors import InputError

    if text is None:
        return None
    try:
        d = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(f"--since {text!r}: not a date", "give a date as YYYY-MM-DD (UTC)") from None
    return float(calendar.timegm(d.utctimetuple()))


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
    amortized purchase and power), and what the best option it passed over would have."""
    from orchestrator import ledger
    from orchestrator.decision.cost import fmt_money
    from orchestrator.errors import InputError, OrchError
    from orchestrator.service import Orch
    from orchestrator.settings import load_settings

    if by not in ledger.GROUPS:
        raise InputError(f"--by {by!r}: not a grouping", f"use one of: {', '.join(ledger.GROUPS)}")
    if plot is not None and plot.suffix.lower() != ".png":
        raise InputError(f"--plot {plot}: orch draws PNG files", "give a file name ending in .png")
    start = _since(since)
    settings = load_settings()
    cur, rate = settings.currency, settings.currency_rate
    money = lambda usd: fmt_money(usd, cur, rate)  # noqa: E731
    entries: list[dict] = []
    now = time.time()
    if (settings.home / "orch.db").exists():  # never create the store just to say it is empty
        orch = Orch(settings)
        for rec in orch.store.list(limit=1_000_000, since=start):
            try:
                rec = orch.refresh(rec)  # a job that ended meanwhile is priced as ended
            except OrchError:
                pass  # priced as last known
            saved = (rec["info"] or {}).get("cost")
            e = saved if saved and rec["status"] in ("SUCCEEDED", "FAILED", "CANCELLED") \
                else ledger.entry(rec, now)
            entries.append(e)
    if start is not None:
        entries = [e for e in entries if (e["finished_at"] or now) >= start]
    groups = ledger.group(entries, by)
    total = ledger.group(entries, "kind")
    total_usd = sum(g["cost_usd"] for g in total)
    alt_usd = sum(g["alternative_usd"] for g in total)
    month = None
    if settings.monthly_budget:
        month = {"spent": ledger.month_spend(entries, now) * rate, "budget": settings.monthly_budget,
                 "month": time.strftime("%Y-%m", time.gmtime(now))}
    if csv_file is not None:
        csv_file.write_text(ledger.to_csv(entries))
    if plot is not None:
        from orchestrator.plots import plot_spend

        plot_spend(ledger.daily_by_target(entries), plot, currency=cur, rate=rate)
    if json_out:
        conv = lambda r: {**r, **{k[:-4]: r[k] * rate for k in list(r)  # noqa: E731
                                  if k.endswith("_usd") and isinstance(r[k], (int, float))}}
        print_json({"currency": cur, "by": by, "since": since, "groups": [conv(g) for g in groups],
                    "total": {"jobs": len(entries), "cost": total_usd * rate, "cost_usd": total_usd,
                              "alternative": alt_usd * rate, "alternative_usd": alt_usd,
                              "saved": (alt_usd - total_usd) * rate},
                    "month": month, "jobs": entries})
        return
    if not entries:
        out.print("no jobs to price yet" + (f" since {since}" if since else "") +
                  ": `orch submit examples/quickstart.yaml` runs one")
        return
    out.print(table([by.upper(), "JOBS", "HOURS", "GPU-HOURS", "COST", "BEST ALTERNATIVE", "SAVED"],
                    [(g[by], g["jobs"], f"{g['hours']:.2f}", f"{g['gpu_hours']:.2f}",
                      money(g["cost_usd"]), money(g["alternative_usd"]), money(g["saved_usd"]))
                     for g in groups]))
    out.print(f"total: {money(total_usd)} for {len(entries)} jobs; their best alternatives would "
              f"have cost {money(alt_usd)}")
    if month:
        share = month["spent"] / month["budget"]
        out.print(f"{month['month']}: {money(month['spent'] / rate)} of the monthly budget "
                  f"{money(month['budget'] / rate)} ({share:.0%})")
    if jobs:
        out.print(table(["ID", "NAME", "STATUS", "WHERE", "HOURS", "COST", "ALTERNATIVE"],
                        [(e["id"], e["name"], e["status"], e["where"], f"{e['hours']:.3f}",
                          money(e["cost_usd"]),
                          f"{e['alternative']['where']} {money(e['alternative']['cost_usd'])}"
                          if e["alternative"] else "-") for e in entries]))
    for path, what in ((csv_file, "one line per job"), (plot, "spend over time by target")):
        if path is not None:
            err.print(f"wrote {path} ({what})")
