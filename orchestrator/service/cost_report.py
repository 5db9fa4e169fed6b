"""What jobs really cost, against their best alternatives: the `orch cost --json` report,
the same for `Local` and for `orch serve`."""

from __future__ import annotations

import calendar
import time
from datetime import datetime
from typing import Optional

from orchestrator.base.errors import InputError, OrchError
from orchestrator.records.cost import BudgetMonth, CostReport, CostTotal, PricedJob
from orchestrator.service import following
from orchestrator.service.core import Core
from orchestrator.service.spending import spent_this_month
from orchestrator.store import store_exists


def parse_since(text: Optional[str]) -> Optional[float]:
    """`--since` as a UTC timestamp (a date means its midnight); None when not given."""
    if text is None:
        return None
    try:
        d = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(f"--since {text!r}: not a date", "give a date as YYYY-MM-DD (UTC)") from None
    return float(calendar.timegm(d.utctimetuple()))


def cost_report(core: Core, by: str = "target", since: Optional[str] = None) -> CostReport:
    """What jobs really cost, grouped `by`, against their best alternatives: the
    `orch cost --json` shape. Money in settings.currency, with the USD figures beside; full
    cost and cash side by side, the month's spend on the monthly budget's basis."""
    from orchestrator.decision import job_ledger as ledger
    from orchestrator.decision.cluster_offers import ran_unpriced

    if by not in ledger.GROUPS:
        raise InputError(f"--by {by!r}: not a grouping", f"use one of: {', '.join(ledger.GROUPS)}")
    start = parse_since(since)
    settings = core.settings
    rate = settings.currency_rate
    entries: list[PricedJob] = []
    now = time.time()
    if store_exists(settings):  # never create the store just to say it is empty
        for rec in core.store.list(limit=1_000_000, since=start):
            try:
                rec = following.refresh(core, rec)  # a job that ended meanwhile is priced as ended
            except OrchError:
                pass  # priced as last known
            e = ledger.current(rec, now)
            # Its cash also for one saved without it; owned hardware priced at power only (a
            # cluster with no [[onprem]] inventory) is not known at full cost.
            entries.append(PricedJob(**{**e.model_dump(), "cash_usd": ledger.cash(e),
                                        "full_cost_known": not ran_unpriced(rec)}))
    if start is not None:
        entries = [e for e in entries if (e.finished_at or now) >= start]
    groups = ledger.group(entries, by)
    total = ledger.group(entries, "kind")
    total_usd = sum(g.cost_usd for g in total)
    cash_usd = sum(g.cash_usd for g in total)
    alt_usd = sum(g.alternative_usd for g in total)
    month = None
    if settings.monthly_budget:
        # The month as the budget counts it: every job of this month, whatever `since` kept
        # for the lines above (with --since D, the jobs since D alone were once counted).
        basis = settings.budget_basis
        if start is None or core.opened_store() is None:
            spent = ledger.month_spend(entries, now, basis)
        else:
            spent = spent_this_month(core.store, now, basis)
        month = BudgetMonth(spent=spent * rate,
                           budget=settings.monthly_budget, basis=basis,
                           month=time.strftime("%Y-%m", time.gmtime(now)))
    for g in groups:  # in the report's currency too
        g.cost, g.cash = g.cost_usd * rate, g.cash_usd * rate
        g.alternative, g.saved = g.alternative_usd * rate, g.saved_usd * rate
    return CostReport(
        currency=settings.currency, rate=rate, by=by, since=since, groups=groups,
        total=CostTotal(jobs=len(entries), cost=total_usd * rate, cost_usd=total_usd,
                        cash=cash_usd * rate, cash_usd=cash_usd, alternative=alt_usd * rate,
                        alternative_usd=alt_usd, saved=(alt_usd - total_usd) * rate),
        month=month, jobs=entries)
