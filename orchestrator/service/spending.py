"""The month's spend: what the store's jobs spent this month as the monthly budget counts it
(`spent_this_month`: the one rule, decision/job_ledger.month_spend, over the store's rows),
and the status page's money view of it (`spending_page`): per day, cash split into owned
power and cloud rental, against `monthly_budget`; by target and by owner; the biggest jobs.
Each job counts on the day it ended (a running one today), as the monthly budget counts it,
so the days add up to the month's spend."""

from __future__ import annotations

import calendar
import time
from typing import Optional

from orchestrator.base.targets import rented
from orchestrator.decision import job_ledger as ledger
from orchestrator.records import JobRow
from orchestrator.records.page import DaySpend, GroupSpend, SpendingPage, SpentJob
from orchestrator.service.core import Core
from orchestrator.store import iso

TOP = 10


def spent_this_month(store, now: float, basis: str, exclude: Optional[str] = None) -> float:
    """USD every job in `store` but `exclude` spent in `now`'s calendar month (running ones
    so far), counted on `basis` (settings.budget_basis)."""
    recs = month_rows(store, now)
    return ledger.month_spend((ledger.entry(r, now) for r in recs if r.id != exclude), now, basis)


def month_rows(store, now: float) -> list[JobRow]:
    """The jobs that may count in `now`'s calendar month, in one query: those created or
    ended in it, and every unfinished one (job_ledger.month_spend picks from their entries)."""
    return store.list(limit=1_000_000, since=ledger.month_start(now))


def spending_page(core: Core, now: Optional[float] = None) -> SpendingPage:
    settings = core.settings
    rate, basis = settings.currency_rate, settings.budget_basis
    now = time.time() if now is None else now
    start = ledger.month_start(now)
    t = time.gmtime(now)
    days = {d: DaySpend(day=d, owned=0.0, cloud=0.0, spend=0.0)
            for d in (f"{t.tm_year:04d}-{t.tm_mon:02d}-{n:02d}"
                      for n in range(1, calendar.monthrange(t.tm_year, t.tm_mon)[1] + 1))}
    by_target: dict[str, GroupSpend] = {}
    by_owner: dict[str, GroupSpend] = {}
    jobs: list[SpentJob] = []
    for rec in month_rows(core.store, now):
        e = ledger.current(rec, now)
        if not (e.running or (e.finished_at or 0.0) >= start):
            continue  # ended before this month: last month's
        cash, spend = ledger.cash(e) * rate, ledger.spend(e, basis) * rate
        day = days.get(time.strftime("%Y-%m-%d", time.gmtime(e.finished_at or now)))
        if day is not None:
            if rented(e.target):
                day.cloud += cash
            else:
                day.owned += cash
            day.spend += spend
        for group in (by_target.setdefault(e.target or "-", GroupSpend(target=e.target or "-", jobs=0, cash=0, cost=0)),
                      by_owner.setdefault(rec.owner or "-", GroupSpend(owner=rec.owner or "-", jobs=0, cash=0, cost=0))):
            group.jobs += 1
            group.cash += cash
            group.cost += e.cost_usd * rate
        jobs.append(SpentJob(id=rec.id, name=rec.name, owner=rec.owner, target=e.target, status=rec.status,
                             hours=e.hours, cash=cash, cost=e.cost_usd * rate, ended_at=iso(e.finished_at)))
    return SpendingPage(month=time.strftime("%Y-%m", t), today=time.strftime("%Y-%m-%d", t),
                      currency=settings.currency, basis=basis, budget=settings.monthly_budget,
                      spent=sum(d.spend for d in days.values()), days=list(days.values()),
                      by_target=sorted(by_target.values(), key=lambda g: -g.cash),
                      by_owner=sorted(by_owner.values(), key=lambda g: -g.cash),
                      biggest=sorted(jobs, key=lambda j: -j.cash)[:TOP])
