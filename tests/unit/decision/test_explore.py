"""Exploration: one run on a GPU model whose speed for a job family is only a prior, when
what measuring it may save the family's work to come beats the run's extra cost."""

from __future__ import annotations

import math
import random

import pytest

from orchestrator.decision import Offer, PastRun
from orchestrator.decision.explore import in_flight, put_value
from orchestrator.decision.facts import Facts, decide_on
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text

NOW = 1_700_000_000.0
A100 = Offer("cloud", "A100", 1, 1.0, cloud="c", region="r")
H100 = Offer("cloud", "H100", 1, 2.0, cloud="c", region="r")  # the shrunk peak says 1.78x
JOB = "resources: {accelerators: {A100: 1, H100: 1}}\nestimate: {hours: 2, gpu: A100}\n"


pytestmark = pytest.mark.usefixtures("no_orch_env")  # placement reads the defaults


def rented(jobs: int, hours: float = 4.0, days: float = 10.0, gpu: str = "A100") -> list[PastRun]:
    """The team's other jobs, each rented on `gpu` for `hours`, over `days`: the family's work."""
    return [PastRun(f"other{j}", "SUCCEEDED", NOW - days * 86400 * j / jobs, duration_s=hours * 3600,
                    target="cloud", gpu=gpu, estimate_hours=hours, estimate_gpu="A100")
            for j in range(jobs)]


def measured(jobs: int, ratio: float = 1.78) -> list[PastRun]:
    """Other jobs that ran on both models, the H100 `ratio` times faster."""
    out = []
    for j in range(jobs):
        out += [PastRun(f"both{j}", "SUCCEEDED", NOW - 3600, duration_s=7200, target="cloud",
                        gpu="A100", samples_per_sec=100.0),
                PastRun(f"both{j}", "SUCCEEDED", NOW - 3600, duration_s=7200 / ratio, target="cloud",
                        gpu="H100", samples_per_sec=100.0 * ratio)]
    return out


# This job's own run on the reference model: what its run on the explored one is measured
# against (a run there alone would give the job's H100 hours, but no ratio).
OWN = [PastRun("fp", "SUCCEEDED", NOW - 86400, duration_s=7200, target="cloud", gpu="A100",
               estimate_hours=2.0, estimate_gpu="A100")]


def plan(history=(), exploring=frozenset(), **settings):
    spec = load_spec_text("name: t\nrun: python train.py\n" + JOB)
    s = Settings(clouds=["c"], **settings)
    facts = Facts(offers=[A100, H100], capacity=None, history=list(history), spent_this_month=0.0,
                  exploring=exploring)
    return decide_on(spec, s, facts, fingerprint="fp", now=NOW)


def test_put_value_is_the_expectation_it_names():
    rng = random.Random(7)
    for k, m, s in ((1.0, 0.5, 0.4), (0.3, 0.0, 1.0), (2.0, 1.2, 0.1)):
        ys = [math.exp(-rng.gauss(m, s)) for _ in range(50_000)]
        mc = sum(max(0.0, k - y) for y in ys) / len(ys)
        assert put_value(k, m, s) == pytest.approx(mc, rel=0.05, abs=2e-3)
    assert put_value(0.0, 0.5, 0.4) == 0.0


def test_a_large_family_rents_the_unmeasured_gpu_once_to_measure_it():
    """80 GPU-hours of A100 work rented in 10 days: 240 in the 30-day horizon. The H100 at
    2x the price is believed 1.78x as fast (the peak table, shrunk), so it costs more in
    expectation, but it may be 3x: one 2-hour run there costs ~0.1 USD more and is worth it."""
    d = plan(rented(20) + OWN)
    assert d.choice.offer.gpu == "H100"
    assert d.explores == ("A100", "H100")
    assert d.reasons[0].startswith("measuring H100 for this job family (A100 jobs): no run measured it")
    assert d.to_dict()["explores"] == ["A100", "H100"]


@pytest.mark.parametrize("why, history, exploring, settings", [
    ("no family: nothing rented to save on", OWN, frozenset(), {}),
    ("one exploring run of the pair is in flight", rented(20) + OWN, frozenset({("A100", "H100")}), {}),
    ("off by the setting", rented(20) + OWN, frozenset(), {"exploration_horizon_days": 0}),
    ("above the budget share of the family's rent", rented(20) + OWN, frozenset(),
     {"exploration_budget_share": 0.0001}),
    ("the team measured it on 30 jobs: one more teaches little", rented(20) + measured(30) + OWN,
     frozenset(), {}),
    ("this job never ran on A100: its H100 run would measure no ratio", rented(20), frozenset(), {}),
])
def test_no_exploring_run(why, history, exploring, settings):
    d = plan(history, exploring, **settings)
    assert d.choice.offer.gpu == "A100", why
    assert d.explores is None
    assert not any(r.startswith("measuring") for r in d.reasons)


def test_a_small_family_is_not_worth_the_extra_cost():
    """2 GPU-hours rented in 10 days: 6 in the horizon, less than the run's extra cost buys."""
    d = plan(rented(2, hours=1.0) + OWN)
    assert d.explores is None and d.choice.offer.gpu == "A100"


def test_an_unfinished_rented_run_on_another_model_is_in_flight():
    active = [PastRun("x", "RUNNING", NOW, target="cloud", gpu="H100", estimate_gpu="A100"),
              PastRun("y", "RUNNING", NOW, target="onprem", gpu="RTX4090", estimate_gpu="A100"),
              PastRun("z", "PENDING", NOW, target="cloud", gpu="A100", estimate_gpu="A100")]
    assert in_flight(active) == frozenset({("A100", "H100")})



def test_a_sweeps_run_still_running_on_the_reference_model_is_enough():
    """A sweep's first run on the A100, still running but measured (its first minute): the
    next run of the sweep may explore the H100, the two together measuring the ratio."""
    going = [PastRun("fp", "RUNNING", NOW - 600, target="cloud", gpu="A100", samples_per_sec=100.0,
                     estimate_hours=2.0, estimate_gpu="A100")]
    assert plan(rented(20) + going).explores == ("A100", "H100")
