"""A job's forged device lines against the team's money (issue 47): an owned job is never
charged more than its hardware's rated power for the time it held it, a `run:` job's power is
its rated figure, and no figure a job prints makes the month's spend not a finite amount."""

from __future__ import annotations

import pytest

from orchestrator.decision import job_ledger as ledger
from orchestrator.service.run_metrics import from_log
from tests.conftest import job_row
from tests.unit.decision.test_job_ledger import T0, owned_record

RUN = {"run": "python train.py"}
TRAIN = {"train": {"entrypoint": "m:f"}}


def _forged(energy: str) -> str:
    return ('::orch::{"event":"telemetry","rank":0,"summary":{"source":"nvml","samples":9,'
            '"mean_util":99,"p10_util":99,"peak_mem_gb":1,"seconds":7200,"energy_wh":'
            f'{energy}}}}}')


def _month(energy: str, spec: dict) -> tuple[float, object]:
    rec = owned_record(metrics=from_log("epoch 1\n" + _forged(energy)), spec=spec)
    rec["decision"]["choice"]["kwh_price_usd"] = 0.15
    e = ledger.entry(job_row(rec))
    return ledger.month_spend([e], T0 + 8000), e


@pytest.mark.parametrize("spec", [RUN, TRAIN], ids=["run", "train"])
def test_a_forged_energy_line_never_spends_past_the_rated_power(spec):
    # The job held one GPU for 2 h, rated 0.1 USD/h of power: 0.2 USD. Before issue 47 the
    # line made it 1e9 Wh at 0.15 USD/kWh: 150,000 USD, and the month read so for everyone.
    spent, e = _month("1e9", spec)
    assert spent == pytest.approx(0.2)
    assert e.cash_usd == pytest.approx(0.2) and e.cost_usd == pytest.approx(1.0)


@pytest.mark.parametrize("energy", ["1e999", "-5", "NaN", '"lots"', "true"])
def test_a_figure_that_is_no_amount_is_the_rated_figure(energy):
    spent, e = _month(energy, TRAIN)
    assert spent == pytest.approx(0.2) and e.power_basis == "rated"


def test_a_run_jobs_power_is_rated_and_a_train_jobs_measured_one_lowers_only_what_it_shows():
    _, run = _month("0", RUN)
    assert (run.power_basis, run.power_usd) == ("rated", pytest.approx(0.2))
    spent, train = _month("0", TRAIN)  # its workers measured no energy at all
    assert (train.power_basis, train.power_usd) == ("measured", pytest.approx(0.0))
    assert spent == pytest.approx(0.2)  # the budget still counts the rated figure
