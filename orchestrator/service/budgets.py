"""Budgets: what a job may still spend (its budget.max_cost, the monthly budget), what its
runner needs to stop itself there, and stopping a job that went past."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Optional

from orchestrator.base.targets import rented
from orchestrator.records import JobRow, with_info
from orchestrator.records.placement import PlacedOffer
from orchestrator.service.core import Core
from orchestrator.spec import JobSpec

if TYPE_CHECKING:
    from jobs.request import Budget


class BudgetLimit(NamedTuple):
    """What a job may still spend (USD), and which limit says so."""
    usd: float
    what: str


def budget_limit(core: Core, max_cost: Optional[float],
                 job_id: Optional[str] = None) -> Optional[BudgetLimit]:
    """(USD, what) the job may still spend: its budget.max_cost, or what is left of
    the monthly budget after every other job this month, whichever is smaller; both
    counted as settings.budget_basis says (cash by default)."""
    from orchestrator.decision.pricing import fmt_money

    settings = core.settings
    rate, cur = settings.currency_rate, settings.currency
    spent = "spent in cash" if settings.budget_basis == "cash" else "spent (full cost)"
    limits = []
    if max_cost:
        limits.append(BudgetLimit(max_cost / rate,
                                  f"budget.max_cost {fmt_money(max_cost / rate, cur, rate)}"))
    if settings.monthly_budget:
        monthly = settings.monthly_budget / rate
        others = _others_spent(core, job_id)
        limits.append(BudgetLimit(max(0.0, monthly - others),
                                  f"monthly_budget {fmt_money(monthly, cur, rate)} "
                                  f"({fmt_money(others, cur, rate)} {spent} by other jobs)"))
    return min(limits) if limits else None


def _others_spent(core: Core, exclude: Optional[str]) -> float:
    """What every job but `exclude` spent this calendar month, on the budget's basis."""
    from orchestrator.service.spending import spent_this_month

    store = core.store_if_exists()
    if store is None:
        return 0.0
    return spent_this_month(store, core.clock(), core.settings.budget_basis, exclude)


def run_budget(core: Core, spec: JobSpec, choice: Optional[PlacedOffer],
               job_id: str) -> Optional[Budget]:
    """What the runner needs to stop itself at its budget, after a checkpoint: its
    price per hour on the budget's basis (owned hardware's power alone for cash)."""
    from jobs.request import Budget
    from orchestrator.decision import job_ledger as ledger

    limit = budget_limit(core, spec.budget.max_cost, job_id)
    price = ledger.hourly(choice, core.settings.budget_basis) if choice else None
    if limit is None or price is None:
        return None
    target = choice.target if choice else None  # None for a choice no plan placed
    startup = core.settings.cloud_startup_minutes / 60.0 * price if rented(target) else 0.0
    # Owned hardware is held from submission on, as the ledger counts it; a cloud VM bills
    # from its start-up, which `spent_usd` covers, so its clock starts there (t0 None).
    return Budget(limit_usd=round(limit.usd, 6), what=limit.what, spent_usd=round(startup, 6),
                  price_per_hour_usd=price, t0=None if rented(target) else core.clock())


def enforce_budget(core: Core, rec: JobRow, provider) -> JobRow:
    """Stop a running job whose cost reached its budget. A `train:` job stops itself at
    its next checkpoint once over (the runner watches the same figures); orch stops it
    outright only past a grace for that checkpoint: 10% of the limit or 5 minutes of its
    price, whichever is more. Any other job is stopped at the limit."""
    from orchestrator.decision import job_ledger as ledger

    limit = budget_limit(core, rec.stored.budget.max_cost, rec.id)
    if limit is None or rec.cancel_requested:
        return rec
    settings = core.settings
    basis = settings.budget_basis
    spent = ledger.spend(ledger.entry(rec), basis)
    grace = 0.0
    if rec.stored.train:
        price = (ledger.hourly(rec.choice, basis) if rec.choice else None) or 0.0
        grace = max(0.10 * limit.usd, price * 5 / 60)
    if spent < limit.usd + grace:
        return rec
    from orchestrator.decision.pricing import fmt_money

    msg = (f"stopped by orch: {limit.what} reached ({fmt_money(spent, settings.currency, settings.currency_rate)} "
           f"spent); raise the budget to let it run longer")
    store, backend_id = core.store, rec.backend_id
    if backend_id is None:  # not launched: nothing runs to spend
        return rec
    rec = store.update(rec.id, cancel_requested=1, info=with_info(rec, budget_stop=msg))
    store.set_status(rec.id, "RUNNING", msg)
    core.retrying(provider).cancel(backend_id)
    return store.get(rec.id)
