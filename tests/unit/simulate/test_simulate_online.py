"""`online-truth`: the greedy told each job's truth on arrival, orch's reference."""

from __future__ import annotations

import pytest

from orchestrator.simulate import policies as P
from orchestrator.simulate.engine import Simulation
from orchestrator.simulate.jobs import build_jobs
from orchestrator.simulate.online import online_truth
from orchestrator.simulate.run import checks, simulate
from orchestrator.simulate.scenario import policy_settings
from orchestrator.simulate.trace import parse_trace
from tests.unit.simulate.test_simulate import scenario, settings  # noqa: F401
from tests.unit.simulate.test_simulate_beliefs import A100_ONLY, BELIEF_HEADER, _distinct


def _run(settings, text, beliefs="truth"):  # noqa: F811
    sc = scenario(settings, onprem=("A100:1:10000",), offers=A100_ONLY)
    ps = policy_settings(settings, sc)
    trace = parse_trace(text, "t.csv")
    sim = Simulation(trace=trace, jobs=build_jobs(trace, sc.offers, ps, beliefs),
                     offers=sc.offers, settings=ps)
    return sim.run("online-truth", online_truth)


# An exploratory run whose file says 0.5 h (it takes 3 h) at 0, a cron run due at 1 with
# 0.5 h of slack: its true length decides which of the two the owned A100 is worth more to.
TWO = BELIEF_HEADER + "0,explore,fe,3,A100,1,,false,auto,0.5,\n1,cron,fc,{w},A100,1,{d},false,steady,{w},\n"


def test_it_keeps_the_owned_gpu_for_the_long_cron_run_by_the_true_lengths(settings):  # noqa: F811
    run = _run(settings, TWO.format(w=4, d=4.5))
    explore, cron = run.outcomes
    # By its file (0.5 h) the exploratory run would end before the cron run is due.
    assert explore.target == "cloud" and cron.target == "onprem"
    assert not explore.missed and not cron.missed and cron.wait_h == 0.0


def test_it_takes_the_owned_gpu_when_renting_the_short_cron_run_costs_less(settings):  # noqa: F811
    run = _run(settings, TWO.format(w=1, d=1.5))
    explore, cron = run.outcomes
    assert explore.target == "onprem" and cron.target == "cloud"
    assert not cron.missed and explore.finish_h == pytest.approx(3.0)


def test_it_is_reported_beside_the_baselines_and_judges_orch(settings):  # noqa: F811
    sc = scenario(settings, onprem=("A100:2:20000",), offers=A100_ONLY)
    trace = parse_trace(_distinct(1.0), "t.csv")
    r = simulate(trace, sc, settings, policies=["orch", "online-truth", "owned-first"],
                 mip_seconds=0)
    by = {p["name"]: p for p in r["policies"]}
    assert list(by) == ["orch", "online-truth", "owned-first", "oracle"]
    assert set(by["online-truth"]) == set(by["owned-first"])  # the same fields
    assert by["online-truth"]["deadline_misses"] == 0
    # Never below the bound, no cheaper than it should be: the bound holds it too.
    spend = lambda p: p["power"] + p["cloud_spend"]  # noqa: E731
    assert spend(by["online-truth"]) >= by["oracle"]["bound"]["best_power_cloud"] - 1e-6
    c = r["checks"]
    assert "online-truth" not in c["comparable_baselines"] + list(c["not_comparable"])
    assert c["orch_power_cloud_over_online"] == pytest.approx(
        spend(by["orch"]) / spend(by["online-truth"]), abs=1e-3)
    assert c["online_goal"] == 1.05 and c["online_met"] == (c["orch_power_cloud_over_online"] <= 1.05)


def test_the_checks_without_online_truth_say_nothing_of_it():
    rows = [{"name": "orch", "cash_total": 10.0, "power": 1.0, "cloud_spend": 2.0,
             "deadline_misses": 0, "deadline_miss_rate": 0.0, "exploratory_p95_wait_h": 0.0}]
    c = checks(rows, 0.1)
    assert (c["orch_power_cloud_over_online"], c["online_met"]) == (None, False)
    assert "online-truth" in P.POLICIES


def test_the_simulators_cron_look_ahead_is_the_servers_setting(settings):  # noqa: F811
    from orchestrator.simulate.engine import View

    sc = scenario(settings, onprem=("A100:1:10000",), offers=A100_ONLY)
    text = BELIEF_HEADER + "".join(f"{h},cron,fc{h},1,A100,1,4,false,steady,1,\n" for h in (20, 30))
    trace = parse_trace(text, "t.csv")
    seen = []
    for ahead in (24, 48):
        ps = policy_settings(settings.model_copy(update={"cron_lookahead_hours": ahead}), sc)
        sim = Simulation(trace=trace, jobs=build_jobs(trace, sc.offers, ps), offers=sc.offers,
                         settings=ps)
        seen.append(len(View(ps, sim.index, trace.start, [], sim.scheduled).reservations()))
    assert seen == [1, 2] and settings.cron_lookahead_hours == 24
