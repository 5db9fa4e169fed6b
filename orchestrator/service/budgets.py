"""Budgets: what a job may still spend (its budget.max_cost, the monthly budget), what its
runner needs to stop itself there, and stopping a job that went past."""

from __future__ import annotations

import time
from typing import Optional

from orchestrator.base.targets import rented
from orchestrator.records import JobRow, with_info
from orchestrator.records.placement import PlacedOffer
from orchestrator.service.core import OrchCore
from orchestrator.spec import JobSpec
from orchestrator.store import store_exists


class Budgets(OrchCore):
    def budget_limit(self, spec_budget: dict, job_id: Optional[str] = None) -> Optional[tuple]:
        """(USD, what) the job may still spend: its budget.max_cost, or what is left of
        the monthly budget after every other job this month, whichever is smaller; both
        counted as settings.budget_basis says (cash by default)."""
        from orchestrator.decision.pricing import fmt_money

        rate, cur = self.settings.currency_rate, self.settings.currency
        spent = "spent in cash" if self.settings.budget_basis == "cash" else "spent (full cost)"
        limits = []
        if spec_budget.get("max_cost"):
            limits.append((spec_budget["max_cost"] / rate,
                           f"budget.max_cost {fmt_money(spec_budget['max_cost'] / rate, cur, rate)}"))
        if self.settings.monthly_budget:
            monthly = self.settings.monthly_budget / rate
            others = self._month_spend(exclude=job_id)
            limits.append((max(0.0, monthly - others),
                           f"monthly_budget {fmt_money(monthly, cur, rate)} "
                           f"({fmt_money(others, cur, rate)} {spent} by other jobs)"))
        return min(limits) if limits else None

    def _month_spend(self, exclude: Optional[str] = None) -> float:
        from orchestrator.decision import job_ledger as ledger

        if not store_exists(self.settings):
            return 0.0
        now = time.time()
        recs = self.store.list(limit=1_000_000, since=ledger.month_start(now))
        return ledger.month_spend((ledger.entry(r, now) for r in recs if r.id != exclude), now,
                                  self.settings.budget_basis)

    def run_budget(self, spec: JobSpec, choice: Optional[PlacedOffer], job_id: str) -> Optional[dict]:
        """What the runner needs to stop itself at its budget, after a checkpoint: its
        price per hour on the budget's basis (owned hardware's power alone for cash)."""
        from orchestrator.decision import job_ledger as ledger

        limit = self.budget_limit(spec.budget.model_dump(), job_id)
        price = ledger.hourly(choice, self.settings.budget_basis) if choice else None
        if limit is None or price is None:
            return None
        target = choice.target if choice else None  # None for a choice no plan placed
        startup = self.settings.cloud_startup_minutes / 60.0 * price if rented(target) else 0.0
        budget = {"limit_usd": round(limit[0], 6), "what": limit[1], "spent_usd": round(startup, 6),
                  "price_per_hour_usd": price}
        if not rented(target):
            # Owned hardware is held from submission on, as the ledger counts it; a cloud
            # VM bills from its start-up, which `spent_usd` covers, so its clock starts there.
            budget["t0"] = time.time()
        return budget

    def _enforce_budget(self, rec: JobRow, provider) -> JobRow:
        """Stop a running job whose cost reached its budget. A `train:` job stops itself at
        its next checkpoint once over (the runner watches the same figures); orch stops it
        outright only past a grace for that checkpoint: 10% of the limit or 5 minutes of its
        price, whichever is more. Any other job is stopped at the limit."""
        from orchestrator.decision import job_ledger as ledger

        limit = self.budget_limit(rec.spec.get("budget") or {}, rec.id)
        if limit is None or rec.cancel_requested:
            return rec
        basis = self.settings.budget_basis
        spent = ledger.spend(ledger.entry(rec), basis)
        grace = 0.0
        if rec.spec.get("train"):
            price = (ledger.hourly(rec.choice, basis) if rec.choice else None) or 0.0
            grace = max(0.10 * limit[0], price * 5 / 60)
        if spent < limit[0] + grace:
            return rec
        from orchestrator.decision.pricing import fmt_money

        msg = (f"stopped by orch: {limit[1]} reached ({fmt_money(spent, self.settings.currency, self.settings.currency_rate)} "
               f"spent); raise the budget to let it run longer")
        rec = self.store.update(rec.id, cancel_requested=1,
                                info=with_info(rec, budget_stop=msg))
        self.store.set_status(rec.id, "RUNNING", msg)
        self._retry(provider, "cancel", rec.backend_id)
        return self.store.get(rec.id)
