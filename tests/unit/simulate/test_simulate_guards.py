"""Issue 49 in the simulator, as it runs orch's planner (the decision core `orch plan` and
`orch serve` share): the cron guard by slack, honest waits and re-placement, the team's
estimate bias learned, the true spot rate apart from the believed one, biased estimates."""

from __future__ import annotations

import pytest

from orchestrator.simulate import policies as P
from orchestrator.simulate.engine import Simulation
from orchestrator.simulate.jobs import build_jobs
from orchestrator.simulate.scenario import policy_settings
from orchestrator.simulate.trace import parse_trace
from tests.unit.simulate.test_simulate import scenario, settings  # noqa: F401
from tests.unit.simulate.test_simulate_beliefs import A100_ONLY, BELIEF_HEADER


def _orch(settings, text):  # noqa: F811
    sc = scenario(settings, onprem=("A100:1:10000",), offers=A100_ONLY)
    ps = policy_settings(settings, sc)
    trace = parse_trace(text, "t.csv")
    sim = Simulation(trace=trace, jobs=build_jobs(trace, sc.offers, ps), offers=sc.offers,
                     settings=ps)
    return sim.run("orch", P.orch).outcomes


# A 2-hour exploratory run at 0 on one owned A100, a cron run at 1 ({w} h, due in {d} h).
CRON = (BELIEF_HEADER + "0,explore,fe,2,A100,1,,false,auto,2,\n"
        "1,cron,fc,{w},A100,1,{d},false,steady,{w},\n")


def test_a_cron_run_with_hours_of_slack_leaves_the_idle_gpu_to_exploratory_work(settings):  # noqa: F811
    explore, cron = _orch(settings, CRON.format(w=1, d=8))
    assert explore.target == "onprem" and cron.target == "onprem"
    assert cron.wait_h == 1.0 and not cron.missed  # it waits an hour of its 7 h of slack


def test_a_cron_run_it_would_make_late_rents_when_that_costs_the_team_less(settings):  # noqa: F811
    # Half an hour of slack: the exploratory run (2 h, up to 4 h by its uncertainty) would
    # make it late. Renting the 1-hour cron run costs less than renting the 2-hour one.
    explore, cron = _orch(settings, CRON.format(w=1, d=1.5))
    assert explore.target == "onprem" and cron.target == "cloud" and not cron.missed
    # A 4-hour cron run costs more to rent: the exploratory run rents instead.
    explore, cron = _orch(settings, CRON.format(w=4, d=4.5))
    assert explore.target == "cloud" and cron.target == "onprem" and not cron.missed


def test_the_estimator_learns_the_teams_estimate_bias_in_simulation(settings, monkeypatch):  # noqa: F811
    # Distinct jobs whose files all say a third of their true hours: after three of them
    # have run, orch's estimates read the team's bias (3x), as `orch serve`'s do.
    lines = [f"{i * 3},j{i},f{i},3,A100,1,,false,auto,1,\n" for i in range(8)]
    bases: list[str] = []

    class Recording(P.HoursEstimator):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            bases.append(self.reference.basis)

    monkeypatch.setattr(P, "HoursEstimator", Recording)
    _orch(settings, BELIEF_HEADER + "".join(lines))
    learned = [b for b in bases if "x 3 (the owner's runs took 3x their estimates" in b]
    assert bases[0] == "estimate.hours 1 h on A100x1" and len(learned) >= 4


def test_the_true_spot_rate_is_the_scenarios_and_the_policy_believes_the_setting(settings):  # noqa: F811
    import dataclasses

    from orchestrator.simulate.run import simulate
    from tests.unit.simulate.test_simulate import EXAMPLE
    from tests.unit.simulate.test_simulate_beliefs import _distinct

    trace = parse_trace(_distinct(0.0), "t.csv")
    base = scenario(settings, onprem=("A100:1:10000",), offers=EXAMPLE)
    rows = {}
    for rate in (0.0, 2.0):
        r = simulate(trace, dataclasses.replace(base, spot_rate=rate), settings, policies=["orch"],
                     mip_seconds=0)
        assert (r["spot_preemptions_per_hour"], r["believed_spot_preemptions_per_hour"]) == (rate, 0.05)
        rows[rate] = r["policies"][0]
    # The same decisions (the policy does not know the truth), other preemptions and bills.
    assert rows[0.0]["jobs_by_target"] == rows[2.0]["jobs_by_target"]
    assert rows[0.0]["spot_preemptions"] == 0 < rows[2.0]["spot_preemptions"]


def test_exploratory_work_does_not_queue_behind_a_run_that_outlived_its_estimate(settings):  # noqa: F811
    # The first run says 1 h and takes 3; at 1.5 h it has outlived its estimate by half an
    # hour. A second run (due in 4 h) arriving then is told a wait of about 15 min, not
    # "any moment now": it rents, and starts within the cloud's start-up.
    text = BELIEF_HEADER + "0,a,fa,3,A100,1,,false,auto,1,\n1.5,b,fb,1,A100,1,4,false,auto,1,\n"
    first, second = _orch(settings, text)
    assert first.target == "onprem" and second.target == "cloud"
    assert second.wait_h == 0.1 and not second.missed


def test_generate_writes_estimates_biased_as_asked():
    from orchestrator.base.errors import InputError
    from orchestrator.simulate.generate import generate, parse_shape

    exact = generate(7, 2, parse_shape(noise=0.0))
    long = generate(7, 2, parse_shape(bias=3.0))  # a bias alone writes the column, no noise
    assert [j.estimate_h for j in long] == pytest.approx([3 * j.estimate_h for j in exact], abs=2e-3)
    with pytest.raises(InputError, match="--estimate-bias 0: must be above zero"):
        parse_shape(bias=0.0)


def test_a_queued_exploratory_job_is_re_placed_once_its_expected_start_passed(settings):  # noqa: F811
    # The first run says 1 h and takes 3. A second (due in 4 h) arrives at 0.97 h, told the
    # GPU frees in about 2 minutes, and queues for it; a minute after that start passed
    # with the first run still going, it is placed again, and rents.
    text = BELIEF_HEADER + "0,a,fa,3,A100,1,,false,auto,1,\n0.97,b,fb,1,A100,1,4,false,auto,1,\n"
    first, second = _orch(settings, text)
    assert first.target == "onprem" and second.target == "cloud" and not second.missed
    assert second.start_h == pytest.approx(1.0 + 1 / 60)
    assert second.wait_h == pytest.approx(1.0 + 1 / 60 - 0.97 + 0.1)
