"""The month's spend as the status page's money view shows it: per day, cash split into owned
power and cloud rental, against `monthly_budget`; by target and by owner; the biggest jobs.
Each job counts on the day it ended (a running one today), as the monthly budget counts it
(decision/job_ledger.month_spend), so the days add up to the month's spend."""

from __future__ import annotations

import calendar
import time
from typing import Any, Optional

from orchestrator.base.targets import rented
from orchestrator.decision import job_ledger as ledger
from orchestrator.service.core import Core
from orchestrator.service.dashboard import cost_so_far
from orchestrator.store import iso

TOP = 10


def month_spend(core: Core, now: Optional[float] = None) -> dict[str, Any]:
    settings = core.settings
    rate, basis = settings.currency_rate, settings.budget_basis
    now = time.time() if now is None else now
    start = ledger.month_start(now)
    t = time.gmtime(now)
    days = [f"{t.tm_year:04d}-{t.tm_mon:02d}-{d:02d}"
            for d in range(1, calendar.monthrange(t.tm_year, t.tm_mon)[1] + 1)]
    per_day: dict[str, dict[str, Any]] = {d: {"day": d, "owned": 0.0, "cloud": 0.0, "spend": 0.0}
                                          for d in days}
    by_target: dict[str, dict[str, float]] = {}
    by_owner: dict[str, dict[str, float]] = {}
    jobs: list[dict[str, Any]] = []
    for rec in core.store.list(limit=1_000_000, since=start):
        e = cost_so_far(rec, now)
        if not (e.running or (e.finished_at or 0.0) >= start):
            continue  # ended before this month: last month's
        cash, spend = ledger.cash(e) * rate, ledger.spend(e, basis) * rate
        day = per_day.get(time.strftime("%Y-%m-%d", time.gmtime(e.finished_at or now)))
        if day is not None:
            day["cloud" if rented(e.target) else "owned"] += cash
            day["spend"] += spend
        for groups, key in ((by_target, e.target or "-"), (by_owner, rec.owner or "-")):
            g = groups.setdefault(key, {"jobs": 0, "cash": 0.0, "cost": 0.0})
            g["jobs"] += 1
            g["cash"] += cash
            g["cost"] += e.cost_usd * rate
        jobs.append({"id": rec.id, "name": rec.name, "owner": rec.owner, "target": e.target,
                     "status": rec.status, "hours": e.hours, "cash": cash, "cost": e.cost_usd * rate,
                     "ended_at": iso(e.finished_at)})
    jobs.sort(key=lambda j: -j["cash"])
    total = sum(d["spend"] for d in per_day.values())

    def rows(groups: dict[str, dict[str, float]], name: str) -> list[dict[str, Any]]:
        return [{name: k, **v} for k, v in sorted(groups.items(), key=lambda kv: -kv[1]["cash"])]

    return {"month": time.strftime("%Y-%m", t), "today": time.strftime("%Y-%m-%d", t),
            "currency": settings.currency, "basis": basis, "budget": settings.monthly_budget,
            "spent": total, "days": list(per_day.values()), "by_target": rows(by_target, "target"),
            "by_owner": rows(by_owner, "owner"), "biggest": jobs[:TOP]}
