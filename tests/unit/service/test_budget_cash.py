"""Budgets count cash by default: the month's cloud rental and owned hardware's power, never
the amortized purchase of GPUs already paid for (settings.budget_basis = "full" counts it)."""

from __future__ import annotations

import json
import time

import pytest

from orchestrator.decision.facts import decide_on
from orchestrator.records.placement import PlacedOffer
from orchestrator.service.budgets import budget_limit, run_budget
from orchestrator.service.orch import Orch
from orchestrator.service.planning import gather
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from tests.conftest import run_orch, store_at
from tests.unit.decision.test_job_ledger import CLOUD, LOCAL, STEP

# A cloud job of 10 h at 0.40 USD/h, plus 6 billed start-up minutes: 4.04 USD, cash or full.
CLOUD_JOB = 4.04


def onprem_decision(amortized: float, power: float) -> dict:
    """The plan of a job on one owned on-prem GPU, priced per hour."""
    price = amortized + power
    choice = {"target": "onprem", "gpu": "A100", "count": 1, "price_per_hour": price,
              "price_per_hour_usd": price, "amortized_per_hour_usd": amortized,
              "power_per_hour_usd": power, "est_hours": 2.0, "est_cost": 2 * price}
    return {"choice": choice, "alternatives": [choice],
            "estimate": {"hours": 2.0, "cost": 2 * price, "cost_usd": 2 * price}}


def cloud_decision() -> dict:
    choice = {"target": "cloud", "cloud": "runpod", "region": "CA", "gpu": "RTX4090", "count": 1,
              "price_per_hour": 0.4, "price_per_hour_usd": 0.4, "est_hours": 10.0, "est_cost": 4.04}
    return {"choice": choice, "alternatives": [choice],
            "estimate": {"hours": 10.0, "cost": 4.04, "cost_usd": 4.04}}


def month_of(home, onprem_jobs: int = 0, cloud_bill: float = 0.0) -> None:
    """This month's jobs in the real store: on-prem ones of 2 h each at 4.00 USD/h amortized
    + 0.05 USD/h power (8.10 USD full, 0.10 USD cash each), and a cloud job billed `cloud_bill`."""
    now = time.time()
    store = store_at(home)
    try:
        jobs = [("onprem", onprem_decision(4.0, 0.05), {"backend_start": now - 7200,
                                                       "backend_end": now})] * onprem_jobs
        if cloud_bill:
            jobs.append(("cloud", cloud_decision(), {"ledger": {"cost_usd": cloud_bill,
                                                                "billed_hours": 3.0}}))
        for target, decision, info in jobs:
            job = store.create_job(name="past", spec={}, kind="steady", target=target,
                                   fingerprint="past", decision=decision)
            store.update(job.id, info=info)
            store.set_status(job.id, "SUCCEEDED")  # finished now: this month
    finally:
        store.close()


def settings(home, basis: str, budget: float = 10.0) -> Settings:
    return Settings(home=home, mode="hybrid", clouds=["runpod"], monthly_budget=budget,
                    budget_basis=basis)


def plan(s: Settings, offers=(CLOUD,), extra: str = ""):
    # spent_this_month is left out: gather reads the month from the store, as submit does.
    spec, now = load_spec_text(STEP + extra), time.time()
    facts = gather(spec, s, now, fingerprint="f", history=(), offers=list(offers))
    return decide_on(spec, s, facts, fingerprint="f", now=now)


@pytest.mark.parametrize("basis, target, spent", [
    ("cash", "cloud", None),      # 0.20 cash spent + 4.04 <= 10: the owned GPUs are paid for
    ("full", None, "16.20 USD"),  # 16.20 amortized + power + 4.04 > 10
])
def test_owned_hours_already_paid_for_do_not_use_up_the_cash_budget(tmp_path, basis, target, spent):
    month_of(tmp_path, onprem_jobs=2)
    d = plan(settings(tmp_path, basis))
    assert d.target == target
    if spent is not None:
        assert f"{spent} spent this month" in d.refusal and "monthly_budget 10.00 USD" in d.refusal


def test_the_months_cloud_rental_refuses_a_cloud_job_over_the_cash_budget(tmp_path):
    month_of(tmp_path, onprem_jobs=2, cloud_bill=7.0)
    d = plan(settings(tmp_path, "cash"))  # 7.00 + 0.20 cash spent + 4.04 > 10
    assert d.target is None
    assert "7.20 USD spent this month" in d.refusal and "monthly_budget 10.00 USD" in d.refusal
    under = plan(settings(tmp_path, "cash", budget=7.2 + CLOUD_JOB + 0.01))
    assert under.target == "cloud"


@pytest.mark.parametrize("basis, target", [("cash", "local"), ("full", None)])
def test_an_owned_job_counts_its_power_against_the_cash_budget(tmp_path, basis, target):
    # 10 h on the workstation: 0.68 USD of power, 4.48 USD in full; the budget is 2.
    d = plan(settings(tmp_path, basis, budget=2.0), offers=[LOCAL], extra="budget: {max_cost: 2}\n")
    assert d.target == target


@pytest.mark.parametrize("basis, left, spent", [
    ("cash", 10.0 - 7.2, "7.20 USD spent in cash by other jobs"),
    ("full", 0.0, "23.20 USD spent (full cost) by other jobs"),
])
def test_a_running_job_may_spend_what_the_months_cash_leaves(tmp_path, basis, left, spent):
    month_of(tmp_path, onprem_jobs=2, cloud_bill=7.0)
    orch = Orch(settings(tmp_path, basis))
    usd, what = budget_limit(orch.core, None, job_id="another")
    assert usd == pytest.approx(left) and spent in what


@pytest.mark.parametrize("basis, rate", [("cash", 0.05), ("full", 4.05)])
def test_an_owned_jobs_runner_counts_its_power_on_the_cash_basis(tmp_path, basis, rate):
    spec = load_spec_text(STEP + "budget: {max_cost: 1}\n")
    budget = run_budget(Orch(Settings(home=tmp_path, budget_basis=basis)).core,
        spec, PlacedOffer(**onprem_decision(4.0, 0.05)["choice"]), "orch-x")
    assert budget is not None
    assert budget.price_per_hour_usd == pytest.approx(rate) and budget.limit_usd == 1.0


def test_orch_cost_shows_cash_beside_the_full_cost_and_the_month_on_the_budgets_basis(tmp_path):
    home = tmp_path / "home"
    month_of(home, onprem_jobs=2, cloud_bill=7.0)
    d = json.loads(run_orch(home, "cost", "--json", ORCH_MONTHLY_BUDGET="10").stdout)
    assert (d["total"]["cost_usd"], d["total"]["cash_usd"]) == (pytest.approx(23.2),
                                                                pytest.approx(7.2))
    by = {g["target"]: g for g in d["groups"]}
    assert (by["onprem"]["cost_usd"], by["onprem"]["cash_usd"]) == (pytest.approx(16.2),
                                                                    pytest.approx(0.2))
    assert d["month"]["basis"] == "cash" and d["month"]["spent"] == pytest.approx(7.2)
    assert all("cash_usd" in e for e in d["jobs"])
    table = run_orch(home, "cost", "--jobs", ORCH_MONTHLY_BUDGET="10")
    assert table.returncode == 0, table.stderr
    assert "CASH" in table.stdout and "16.20 USD" in table.stdout and "0.10 USD" in table.stdout
    assert "7.20 USD spent in cash (cloud rental and power) of the monthly budget 10.00 USD " \
           "(72%; budget_basis = cash)" in table.stdout
    full = run_orch(home, "cost", ORCH_MONTHLY_BUDGET="10", ORCH_BUDGET_BASIS="full")
    assert "23.20 USD spent at full cost" in full.stdout and "budget_basis = full" in full.stdout
