"""`orch advise`: buy or rent - when a GPU you might buy would pay for itself, from your history."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

import typer
from rich.markup import escape
from rich.table import Table

from orchestrator.base.targets import LOCAL
from orchestrator.cli.render import local_only, out, print_json

if TYPE_CHECKING:
    from orchestrator.records import JobRow


def advise(
    json_out: bool = typer.Option(False, "--json", help="JSON on stdout (money in USD)"),
    days: float = typer.Option(90, "--days", help="history to read, in days"),
    steady_hours: Optional[float] = typer.Option(
        None, "--steady-hours", help="what if: steady work in H100-hours a month, instead of the measured"),
    electricity_price: Optional[float] = typer.Option(
        None, "--electricity-price", help="what if: USD per kWh, instead of the setting"),
    rent_price: Optional[float] = typer.Option(
        None, "--rent-price", help="what if: USD per hour to rent a candidate's GPUs (all of "
                                   "them), instead of the cheapest catalog offer"),
    utilization_cap: Optional[float] = typer.Option(
        None, "--utilization-cap", help="what if: the busiest a bought GPU runs, a fraction of "
                                        "730 h a month (default 1)"),
    price: list[str] = typer.Option(
        [], "--price", help="what if: a candidate's purchase price, GPU=USD (repeatable)"),
) -> None:
    """For each GPU you might buy (`candidates` in the settings), the months until it pays
    back against renting your steady work, with every assumption shown."""
    from orchestrator.decision.advise import WhatIf
    from orchestrator.decision.advise import advise as compute
    from orchestrator.settings import config_path, load_settings

    settings = load_settings()
    local_only("advise", "this machine's store")
    what_if = WhatIf(steady_hours=_at_least(steady_hours, "--steady-hours"),
                     electricity_price=_at_least(electricity_price, "--electricity-price"),
                     rent_price=_at_least(rent_price, "--rent-price"),
                     utilization_cap=_fraction(utilization_cap),
                     prices=_prices(price, settings))
    if days <= 0:
        _bad("--days", f"{days:g}", "give the days of history to read, e.g. --days 90")
    offers, problem = _offers(settings)
    records = _records(settings)
    advice = compute(records, settings, offers, time.time(), days=days,
                     what_if=what_if, catalog_problem=problem, local_gpus=_local_gpus(records))
    if json_out:
        print_json({**advice.to_dict(), "settings_file": str(config_path())})
    else:
        render(advice, str(config_path()))


def _bad(flag: str, value: str, hint: str) -> None:
    from orchestrator.base.errors import InputError

    raise InputError(f"{flag} {value}: not a valid value", hint)


def _at_least(value: Optional[float], flag: str) -> Optional[float]:
    if value is not None and value < 0:
        _bad(flag, f"{value:g}", f"{flag} takes a number of 0 or more")
    return value


def _fraction(value: Optional[float]) -> Optional[float]:
    if value is not None and not 0 < value <= 1:
        _bad("--utilization-cap", f"{value:g}", "give a fraction above 0 and at most 1, e.g. 0.7")
    return value


def _prices(items: list[str], settings) -> dict[str, float]:
    """`--price GPU=USD` for GPUs among the candidates."""
    from orchestrator.decision.gpus import same_gpu

    names = [c.gpu for c in settings.candidates]
    out_: dict[str, float] = {}
    for item in items:
        gpu, sep, value = item.partition("=")
        try:
            usd = float(value) if sep else -1.0
        except ValueError:
            usd = -1.0
        if not gpu.strip() or usd < 0:
            _bad("--price", item, "write GPU=USD, e.g. --price RTX4090=1800")
        if not any(same_gpu(gpu.strip(), n) for n in names):
            _bad("--price", item, f"{gpu.strip()} is not a candidate in the settings; candidates: "
                                  f"{', '.join(names) or 'none'}")
        out_[gpu.strip()] = usd
    return out_


def _records(settings) -> list[JobRow]:
    """Every job in the store; none before the store exists, which this must not create."""
    from orchestrator.store import open_store, store_exists

    if not store_exists(settings):
        return []
    store = open_store(settings)
    try:
        return store.list(limit=1_000_000)
    finally:
        store.close()


def _local_gpus(records: list[JobRow]) -> int:
    """This workstation's GPUs, asked of nvidia-smi only when a job ever ran here."""
    if not any(r.target == LOCAL for r in records):
        return 0
    from orchestrator.offers.local import detect_gpus

    return sum(detect_gpus().values())


def _offers(settings) -> tuple[list, Optional[str]]:
    """Cloud offers from the price catalogs, and why there are none when there are none."""
    if not settings.clouds:
        return [], "no clouds are configured"
    from orchestrator.base.errors import BackendError
    from orchestrator.offers.catalog import cloud_offers

    try:
        return cloud_offers(settings.clouds, settings.catalog_dir), None
    except BackendError as e:
        return [], e.message


def _months(months: Optional[float], verdict: str) -> str:
    if verdict == "unknown":
        return "-"
    return "never" if months is None else f"{months:,.1f} mo"


def _render_owned(u, money) -> None:
    """Each owned pool: the time jobs held it and the real cost per held GPU-hour it implies."""
    pct = lambda f: "-" if f is None else f"{f:.1%}"  # noqa: E731
    title = (f"what owned GPUs really cost per hour jobs held them, over {u.window_basis}" if u.history
             else "what owned GPUs cost per held hour (no job history: the settings' figure)")
    t = Table(title=title, title_justify="left")
    for col in ("pool", "held GPU-hours", "held", "assumed held", "ownership", "power",
                "real/held hour", "assumed/held hour"):
        t.add_column(col, justify="left" if col == "pool" else "right")
    for p in u.pools:
        unit = "" if p.unit == "GPU" else " (machine-hours)"
        held = "-" if not u.history else f"{p.busy_gpu_hours:,.1f} of {p.capacity_gpu_hours:,.0f}"
        t.add_row(escape(p.pool) + unit, held, pct(p.utilization), f"{p.assumed_utilization:.0%}",
                  money(p.ownership_usd), money(p.power_usd), money(p.real_per_gpu_hour_usd),
                  money(p.assumed_per_gpu_hour_usd))
    out.print(t)
    for p in u.pools:
        window = f" ({p.window_basis})" if p.window_basis != u.window_basis else ""
        out.print(f"  {escape(p.pool)}: {escape(p.verdict)}{escape(window)}")
    for n in u.notes:
        out.print(f"  [dim]{escape(n)}[/]")


def _render_busy(m, money) -> None:
    """Each owned pool: the hours jobs held it, how busy its GPUs were over them (NVML, as
    orch's runs measured it), and so the cost of a held and of a useful GPU-hour."""
    pct = lambda f: "-" if f is None else f"{f:.0%}"  # noqa: E731
    t = Table(title="how busy owned GPUs were while jobs held them (NVML telemetry of orch's runs)",
              title_justify="left")
    for col in ("pool", "held GPU-hours", "busy while held", "measured over", "cost/held GPU-hour",
                "cost/useful GPU-hour"):
        t.add_column(col, justify="left" if col == "pool" else "right")
    for p in m.pools:
        busy = "unmeasured" if p.measured_busy_share is None else pct(p.measured_busy_share)
        t.add_row(escape(p.pool), f"{p.held_gpu_hours:,.1f}", busy,
                  f"{pct(p.coverage)} of held", money(p.cost_per_held_gpu_hour_usd),
                  money(p.cost_per_useful_gpu_hour_usd))
    out.print(t)
    for p in m.pools:
        style = "yellow" if p.fix_jobs_first else "default"
        out.print(f"  [{style}]{escape(p.pool)}: {escape(p.verdict)}[/]")
        for line in p.advice:
            out.print(f"    - {escape(line)}")


def render(a, settings_file: str) -> None:
    from orchestrator.decision.pricing import fmt_money

    money = lambda usd: fmt_money(usd, a.currency, a.currency_rate)  # noqa: E731
    m = a.months
    out.print(f"[bold]buy or rent[/]: {a.history_days:.1f} days of history "
              f"({m:.2f} months), {a.steady.jobs + a.exploratory.jobs} finished jobs")
    for label, w in (("steady", a.steady), ("exploratory", a.exploratory)):
        out.print(f"  {label:<12} {w.ref_gpu_hours / m:,.1f} H100-hours a month "
                  f"({w.wall_hours / m:,.1f} wall hours, {w.jobs} jobs), "
                  f"{money(w.cost_usd / m)} a month")
    if a.by_target:
        t = Table(title="what it cost where it ran", title_justify="left")
        for col in ("target", "jobs", "wall hours", "H100-hours", "cost", "of it steady",
                    "cost/month"):
            t.add_column(col, justify="left" if col == "target" else "right")
        for target, r in sorted(a.by_target.items()):
            t.add_row(target, str(r["jobs"]), f"{r['wall_hours']:,.1f}",
                      f"{r['ref_gpu_hours']:,.1f}", money(r["cost_usd"]),
                      money(r["steady_cost_usd"]), money(r["cost_per_month_usd"]))
        out.print(t)
    if a.owned_use and a.owned_use.pools:
        _render_owned(a.owned_use, money)
    if a.measured_use and a.owned_use and a.owned_use.history and a.measured_use.pools:
        _render_busy(a.measured_use, money)
    if a.candidates:
        t = Table(title=f"GPUs you might buy, against renting "
                        f"{a.steady_ref_hours_per_month:,.1f} H100-hours of steady work a month",
                  title_justify="left")
        for col in ("GPU", "price", "hours/month", "rent avoided/month", "power/month",
                    "payback", "vs cheapest rent", "verdict"):
            t.add_column(col, justify="right" if col not in ("GPU", "verdict") else "left",
                         no_wrap=col != "verdict")
        for c in a.candidates:
            hours = "-" if c.hours_per_month is None else (
                f"{c.hours_per_month:,.0f}" + (" (cap)" if c.capped else ""))
            payback = _months(c.payback_months, c.verdict)
            alt = _months(c.cheapest_rent["payback_months"], c.verdict) if c.cheapest_rent else "-"
            style = {"buy": "green", "rent": "yellow"}.get(c.verdict, "red")
            t.add_row(f"{c.gpu} x{c.count}", money(c.purchase_price_usd), hours,
                      money(c.rent_avoided_usd), money(c.power_usd), payback, alt,
                      f"[{style}]{c.verdict}[/]: {escape(c.reason)}"
                      + (f"; [yellow]{escape(c.condition)}[/]" if c.condition else ""))
        out.print(t)
        for c in a.candidates:
            if c.rent_basis:
                out.print(f"  [dim]{c.gpu} x{c.count} rent {money(c.rent_price_per_hour_usd)}/h: "
                          f"{escape(c.rent_basis)}[/]")
            if c.cheapest_rent:
                r = c.cheapest_rent
                out.print(f"  [dim]{c.gpu} x{c.count}'s work rents cheapest on {escape(r['offer'])} "
                          f"at {money(r['per_ref_hour_usd'])} per H100-hour: "
                          f"{money(r['rent_avoided_usd'])} a month[/]")
    out.print("assumptions")
    for s in a.assumptions:
        out.print(f"  - {escape(s)}")
    if a.what_if:
        parts = []
        for k, v in a.what_if.items():
            shown = ", ".join(f"{g}={p:g}" for g, p in v.items()) if k == "prices" else f"{v:g}"
            parts.append(f"{k.replace('_', ' ')} {shown}")
        out.print(f"what if (given, instead of measured or configured): {escape('; '.join(parts))}")
    if a.missing:
        out.print("[bold]missing[/]")
        for s in a.missing:
            out.print(f"  - {escape(s)}")
        if not a.candidates:
            out.print(f"  [dim]settings file: {escape(settings_file)}, for example:[/]")
            out.print("    [[candidates]]\n    gpu = \"RTX4090\"\n    count = 4\n"
                      "    purchase_price = 14000\n    watts = 450", markup=False)
