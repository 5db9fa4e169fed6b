"""PNG pictures of money: spend over time by target, and the simulator's cost against wait.

matplotlib is imported only here, inside the functions, with the Agg backend (no display).
Each function writes the file and returns the matplotlib Figure (not attached to pyplot,
so nothing needs closing) for tests to inspect.
"""

from __future__ import annotations

from datetime import date, timedelta
from pathlib import Path
from typing import Iterable, Mapping

from orchestrator.base.errors import InputError
from orchestrator.base.targets import TARGETS


def check_png_path(path: str | Path) -> Path:
    """The path a plot goes to: a .png file in a folder that exists."""
    p = Path(path)
    if p.suffix.lower() != ".png":
        raise InputError(f"--plot {path}: plots are written as PNG",
                         "give a file name ending in .png")
    if not p.parent.is_dir():
        raise InputError(f"--plot {path}: no folder {p.parent}", "create it, or write the plot elsewhere")
    return p


def _figure(width: float, height: float, ncols: int = 1):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    return fig, fig.subplots(1, ncols)


def _save(fig, path: Path) -> None:
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        raise InputError(f"--plot {path}: cannot write the file: {e}") from None


def plot_spend(rows: Iterable[Mapping], path: str | Path, currency: str = "USD",
               rate: float = 1.0):
    """Cumulative spend per target over days: one line per target.

    `rows` are {"day": "YYYY-MM-DD", "target": "local|onprem|cloud", "cost": USD};
    costs are multiplied by `rate` (units of `currency` per USD) for display."""
    p = check_png_path(path)
    by: dict[str, dict[date, float]] = {}
    for r in rows:
        try:
            day = date.fromisoformat(str(r["day"])[:10])
        except ValueError:
            raise InputError(f"spend row {dict(r)}: day must be YYYY-MM-DD") from None
        t = str(r.get("target") or "unknown")
        by.setdefault(t, {})
        by[t][day] = by[t].get(day, 0.0) + float(r["cost"] or 0.0) * rate
    fig, ax = _figure(8, 4.5)
    if by:
        first = min(d for v in by.values() for d in v)
        last = max(d for v in by.values() for d in v)
        days = [first + timedelta(n) for n in range((last - first).days + 1)]
        order = [t for t in TARGETS if t in by] + sorted(t for t in by if t not in TARGETS)
        for t in order:
            total, ys = 0.0, []
            for d in days:
                total += by[t].get(d, 0.0)
                ys.append(total)
            # Markers too: a line of one day is otherwise a single invisible point.
            ax.plot(days, ys, drawstyle="steps-post", label=t, linewidth=2,
                    marker="o" if len(days) < 32 else None)
        ax.legend(title="target")
        if len(days) == 1:  # a range around the one day, not matplotlib's default years
            ax.set_xlim(first - timedelta(1), first + timedelta(1))
        ax.set_ylim(bottom=0)
    ax.set_xlabel("day")
    ax.set_ylabel(f"cumulative spend ({currency})")
    ax.set_title("spend over time by target")
    ax.grid(alpha=0.3)
    fig.autofmt_xdate()
    _save(fig, p)
    return fig


def plot_policies(result: Mapping, path: str | Path):
    """The simulator's picture. Left: the team's cumulative cash over simulated days
    (ownership + power + cloud), one line per policy (the lower bound dashed). Right: cash
    against exploratory work's p95 wait, one labelled marker per policy, the lower bound
    as a horizontal line (it has no schedule, so no wait).

    `result` is what `orch simulate --json` prints."""
    from orchestrator.records.simulation import SimulationResult

    p = check_png_path(path)
    answer = SimulationResult.model_validate(result)
    rate, cur = answer.currency_rate, answer.currency
    fig, (left, right) = _figure(13, 5, ncols=2)
    colors = {}
    for row in answer.policies:
        total, ys = 0.0, [0.0]
        for c in row.daily_cash:
            total += c * rate
            ys.append(total)
        bound = row.name == "oracle"
        line, = left.plot(range(len(ys)), ys, label=row.name, linewidth=2,
                          linestyle="--" if bound else "-", color="black" if bound else None)
        colors[row.name] = line.get_color()
    left.set_xlabel("simulated day")
    left.set_ylabel(f"cumulative cash ({cur})")
    left.set_title("the team's cash over the trace")
    left.legend(title="policy")
    left.grid(alpha=0.3)
    rank = {r.name: i for i, r in enumerate(sorted(answer.policies, key=lambda r: r.cash_total))}
    for row in answer.policies:
        cost = row.cash_total * rate
        if row.name == "oracle":
            right.axhline(cost, color="black", linestyle="--", linewidth=1)
            right.annotate("oracle (lower bound)", (0, cost), xycoords=("axes fraction", "data"),
                           xytext=(4, 4), textcoords="offset points", fontsize=9)
            continue
        wait = row.exploratory_p95_wait_h or 0.0
        right.scatter([wait], [cost], s=60, color=colors[row.name], zorder=3)
        # Alternate label sides by cost: policies often land close together.
        right.annotate(row.name, (wait, cost), xytext=(6, 4 if rank[row.name] % 2 else -12),
                       textcoords="offset points", fontsize=9)
    right.set_xlabel("exploratory p95 wait (hours)")
    right.set_ylabel(f"cash total ({cur}, log scale)")
    right.set_yscale("log")
    from matplotlib.ticker import FuncFormatter

    plain = FuncFormatter(lambda v, _: f"{v:,.0f}")
    right.yaxis.set_major_formatter(plain)
    right.yaxis.set_minor_formatter(plain)
    right.set_title("cash against wait")
    right.grid(alpha=0.3)
    right.set_xlim(left=min(0.0, right.get_xlim()[0]))
    _save(fig, p)
    return fig
