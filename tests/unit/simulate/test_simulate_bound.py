"""The hindsight bound: bucketed capacity with exact window overlaps, and the whole-job MIP."""

from __future__ import annotations

import numpy as np
import pytest

from orchestrator.decision.models import Offer
from orchestrator.decision.pricing import onprem_offer
from orchestrator.settings import OwnedGpus
from orchestrator.simulate import policies as P
from orchestrator.simulate.bound_model import cuts
from orchestrator.simulate.engine import Simulation
from orchestrator.simulate.generate import generate
from orchestrator.simulate.jobs import build_jobs
from orchestrator.simulate.oracle import bound_line, lower_bound
from orchestrator.simulate.scenario import Scenario, policy_settings
from orchestrator.simulate.trace import format_trace, parse_trace

HEADER = "arrival,name,fingerprint,gpu_hours,gpu,gpus,deadline_h,checkpoints,kind\n"
POWER = 0.045  # USD per owned A100-hour: 300 W at the default 0.15 USD/kWh
RENT = 1.29  # lambda's A100 per hour; a run pays 0.1 h of start-up on top


@pytest.fixture
def settings(default_settings):
    return default_settings


def make_sim(settings, text: str, owned=(("A100", 2),)) -> Simulation:
    invs = tuple(OwnedGpus(gpu=g, count=n, purchase_price=10000, watts=300) for g, n in owned)
    offers = [Offer(target="cloud", gpu="A100", count=1, price_per_hour=RENT, cloud="lambda",
                    region="r", instance_type="lambda-A100-1")]
    offers += [onprem_offer(inv, settings.electricity_price) for inv in invs]
    sc = Scenario(owned=invs, clouds=("lambda",), catalog_dir=None, offers=tuple(offers), source="test")
    ps = policy_settings(settings, sc)
    trace = parse_trace(text, "bound.csv")
    return Simulation(trace=trace, jobs=build_jobs(trace, sc.offers, ps), offers=sc.offers,
                      settings=ps, seed=1, ownership_usd=0.0)


# Twelve 1-GPU-hour runs arrive at 10:50 on two owned A100s, due at 12:00.
AT_1050 = HEADER + "".join(f"2025-01-06T10:50:00Z,r{i},fp{i},1,A100,1,{7 / 6!r},false,steady\n"
                           for i in range(12))
# One owned A100 from 0 to 1.6 h: a 1.5 GPU-hour job a and a 1 GPU-hour job b. Split, the
# LP gives b all its hour and a the remaining 0.6; whole, a is owned and b rents.
SPLIT = HEADER + "0,a,fa,1.5,A100,1,1.6,false,steady\n0,b,fb,1,A100,1,1.6,false,steady\n"


def test_grid_cuts_keep_a_bucket_with_an_edge_whole_and_merge_the_rest():
    # Edges at 10:50 (inside the 10:48-10:54 bucket) and at 12:00 (on the grid).
    c = cuts(np.array([65 / 6, 12.0]), 0.1, 24.0)
    assert c == pytest.approx([0.0, 10.8, 10.9, 12.0, 24.0])
    assert cuts(np.array([65 / 6, 12.0]), 0.0, 24.0) == pytest.approx([0.0, 65 / 6, 12.0, 24.0])
    assert cuts(np.array([65 / 6]), 1.0, 24.0) == pytest.approx([0.0, 10.0, 11.0, 24.0])


def test_arrivals_at_1050_hourly_slack_and_the_6_minute_correction(settings):
    sim = make_sim(settings, AT_1050)
    rent = RENT * 1.1  # one run on lambda with its start-up
    by = {m: lower_bound(sim, 24.0, bucket_minutes=m, mip_seconds=None, one_piece=False)
          for m in (60, 6, 0)}
    # Hourly: the 10:00-11:00 hour's 2 GPU-hours all go to the 10 minutes after 10:50
    # (12 runs x 1/6 h), then 2 more from 11:00: 4 runs' work owned.
    assert sum(by[60].owned_fraction) == pytest.approx(4.0)
    assert by[60].power_cloud == pytest.approx(4 * POWER + 8 * rent)
    # 6 minutes: 10:48-10:54 holds 2 x 0.1 = 0.2 GPU-hours, then 2 x 1.1 to 12:00.
    assert sum(by[6].owned_fraction) == pytest.approx(2.4)
    assert by[6].power_cloud == pytest.approx(2.4 * POWER + 9.6 * rent)
    # Only the window edges: the two GPUs' 7/6 h each from 10:50 to 12:00.
    assert by[0].power_cloud == pytest.approx(7 / 3 * POWER + (12 - 7 / 3) * rent)
    # Whole runs: two fit on the owned GPUs, ten rent, and that is a real schedule.
    w = lower_bound(sim, 24.0, mip_seconds=5.0).whole_job
    assert w is not None and w.solved
    assert w.dual_bound == pytest.approx(2 * POWER + 10 * rent, rel=1e-3)
    assert w.dual_bound <= w.incumbent + 1e-9
    assert by[60].power_cloud < by[6].power_cloud < by[0].power_cloud < w.dual_bound


def test_runs_in_one_piece_cannot_share_two_gpus_as_more_than_two_runs(settings):
    """Each 1-hour run due 70 minutes after 10:50 covers 11:00-11:50 wherever it starts:
    two GPUs hold two such runs, not the 2.33 runs' work the window's capacity gives."""
    sim = make_sim(settings, AT_1050)
    split = lower_bound(sim, 24.0, bucket_minutes=0, mip_seconds=None, one_piece=False)
    whole = lower_bound(sim, 24.0, bucket_minutes=0, mip_seconds=None)
    assert sum(split.owned_fraction) == pytest.approx(7 / 3)
    assert sum(whole.owned_fraction) == pytest.approx(2.0)
    assert whole.power_cloud == pytest.approx(2 * POWER + 10 * RENT * 1.1)
    six = lower_bound(sim, 24.0, mip_seconds=None)
    # On the 6-minute grid the bucket holding 11:50 stays whole: the runs' sure part is
    # counted over 11:00-11:54, whose 1.8 GPU-hours hold 1.8 / (5/6) = 2.16 runs.
    assert sum(six.owned_fraction) == pytest.approx(2.16)
    # The same rows with a job that waits: one run on one GPU, due 3 h after it arrives,
    # covers nothing for sure; its window's capacity is all it is limited by.
    loose = make_sim(settings, HEADER + "0,a,fa,1,A100,1,3,false,steady\n", owned=(("A100", 1),))
    assert lower_bound(loose, 24.0, mip_seconds=None).owned_fraction == pytest.approx([1.0])


def test_split_job_lp_against_the_whole_job_optimum(settings):
    sim = make_sim(settings, SPLIT, owned=(("A100", 1),))
    res = lower_bound(sim, 24.0, mip_seconds=5.0)
    cloud_a, cloud_b = RENT * 1.6, RENT * 1.1
    assert res.owned_fraction == pytest.approx([0.4, 1.0])
    assert res.power_cloud == pytest.approx(1.6 * POWER + 0.6 * cloud_a)
    w = res.whole_job
    assert w is not None and not w.hit_limit
    assert w.dual_bound == pytest.approx(1.5 * POWER + cloud_b, rel=1e-3)
    assert res.best_power_cloud == pytest.approx(w.dual_bound)
    assert res.bound()["whole_job"]["hit_limit"] is False


@pytest.mark.parametrize("text, owned", [
    (AT_1050, (("A100", 2),)),
    (SPLIT, (("A100", 1),)),
    # Two pools: a run fits the owned H100 (faster) as well as the owned A100.
    (HEADER + "".join(f"0.{i},s{i},fs{i},{0.5 + 0.2 * i:.1f},A100,1,2,true,steady\n" for i in range(6)),
     (("A100", 1), ("H100", 1))),
    (HEADER + "0,w,fw,6,A100,2,3.5,true,steady\n0.5,x,fx,2,A100,1,4,false,steady\n"
     "1.25,y,fy,1,A100,1,2,false,steady\n", (("A100", 2),)),
])
def test_bounds_ordered_below_orchs_own_schedule(settings, text, owned):
    sim = make_sim(settings, text, owned)
    hourly = lower_bound(sim, 48.0, bucket_minutes=60, mip_seconds=None).power_cloud
    res = lower_bound(sim, 48.0, bucket_minutes=6, mip_seconds=5.0)
    w = res.whole_job
    assert w is not None and w.dual_bound is not None and w.incumbent is not None
    run = sim.run("orch", P.orch)
    assert not any(o.missed for o in run.outcomes)
    orch = sum(o.power + o.cloud for o in run.outcomes)
    assert hourly <= res.power_cloud + 1e-9 <= w.dual_bound + 2e-9
    assert w.dual_bound <= w.incumbent + 1e-9 and w.dual_bound <= orch + 1e-6
    assert res.bucket_minutes == 6 and res.lp_seconds >= 0 and res.segments > 0


def test_a_tiny_time_limit_says_the_mip_did_not_finish(settings):
    text = format_trace(generate(21, 3))
    sim = make_sim(settings, text, owned=(("A100", 1),))
    res = lower_bound(sim, sim.span_h + 72.0, mip_seconds=0.01)
    w = res.whole_job
    assert w is not None and w.hit_limit and not w.solved
    assert w.dual_bound is None or w.incumbent is None or w.dual_bound <= w.incumbent + 1e-9
    # The LP still stands; the best bound never falls below it.
    assert res.best_power_cloud >= res.power_cloud > 0
    assert res.bound()["whole_job"]["hit_limit"] is True


def test_the_mip_stops_at_a_node_count_the_same_whatever_the_load(settings):
    sim = make_sim(settings, format_trace(generate(14, 1)), owned=(("A100", 2),))
    runs = [lower_bound(sim, sim.span_h + 72.0, mip_nodes=1).whole_job for _ in range(2)]
    for w in runs:
        assert w is not None and w.hit_limit and w.nodes == 1 and w.node_limit == 1
        assert w.message == "node limit reached (1 node)" and w.time_limit_s == 600
    assert runs[0].dual_bound == runs[1].dual_bound and runs[0].incumbent == runs[1].incumbent


def test_a_whole_job_takes_one_pool_where_the_lp_splits_it_over_two(settings):
    # 4 A100 GPU-hours due in 1.2 h: the owned H100 (3.17x) does 95 % of it in time and the
    # owned A100 the rest, at their power; whole, neither pool alone finishes it: it rents.
    sim = make_sim(settings, HEADER + "0,big,fb,4,A100,1,1.2,true,steady\n",
                   owned=(("A100", 1), ("H100", 1)))
    res = lower_bound(sim, 24.0, mip_seconds=5.0)
    assert res.owned_fraction == pytest.approx([1.0])
    assert res.power_cloud == pytest.approx(POWER * (1.2 + 4 * (1 - 1.2 * 989 / (4 * 312))))
    w = res.whole_job
    assert w is not None and w.solved
    assert w.dual_bound == pytest.approx(RENT * 4.1, rel=1e-3)


def test_the_bound_line_says_what_the_mip_proved():
    lp = {"lp_power_cloud": 92.46, "bucket_minutes": 6.0, "lp_seconds": 0.03}
    done = {"dual_bound": 101.66, "incumbent": 101.76, "gap": 0.001, "seconds": 10.4,
            "time_limit_s": 20.0, "hit_limit": False}
    assert bound_line({**lp, "whole_job": done}) == (
        "bound on power + cloud: LP 92.46 USD (6-minute buckets, 0.03 s); whole jobs at least "
        "101.66 USD, best whole-job point 101.76, gap 0.1 % (10.4 s, finished)")
    none = {**done, "dual_bound": None, "incumbent": None, "gap": None, "hit_limit": True}
    assert bound_line({**lp, "whole_job": none}).endswith(
        "whole-job MIP: no bound within its 20 s time limit")
    at_nodes = {**done, "hit_limit": True, "node_limit": 1000, "nodes": 1000}
    assert bound_line({**lp, "whole_job": at_nodes}).endswith("(10.4 s, stopped at its 1,000 node limit)")
    assert bound_line({**lp, "whole_job": None}).endswith("whole-job MIP not run")


def test_a_window_of_weeks_gets_one_variable_per_day(settings):
    # One owned A100 until 400 h: a 395 GPU-hour job with no deadline, and twelve 1-hour
    # runs due within 1.2 h, one a day. 407 GPU-hours for 400: the LP rents 7 of the long
    # job's (its cloud hour is the cheaper), wherever the short runs fall.
    text = HEADER + "0,long,fl,395,A100,1,,true,steady\n" + "".join(
        f"{24 * k + 1},s{k},fs{k},1,A100,1,1.2,false,steady\n" for k in range(12))
    sim = make_sim(settings, text, owned=(("A100", 1),))
    res = lower_bound(sim, 400.0, mip_seconds=None)
    assert res.power_cloud == pytest.approx(400 * POWER + 7 / 395 * RENT * 395.1)
    # 13 cloud shares, 12 short runs' segments, and the long job's 12 blocks (the last one
    # runs from day 11 to 400 h: no segment starts after it), not its 25 segments.
    split = lower_bound(sim, 400.0, mip_seconds=None, one_piece=False)
    assert (split.variables, split.segments) == (13 + 12 + 12, 25)
    # Run in one piece, each short run surely covers 0.2-1.0 h after it arrives: those
    # edges cut its window into three segments; the long job's blocks get no such row.
    assert split.power_cloud == pytest.approx(res.power_cloud)
    assert (res.variables, res.segments) == (13 + 3 * 12 + 12, 25 + 2 * 12)


def test_the_checks_judge_orch_against_the_best_bound_in_both_accountings():
    """What placement controls (power + cloud) over the larger of the LP's and the MIP's
    bound, and the cash over that bound plus ownership (issue 33, part 3)."""
    from orchestrator.simulate.run import GOAL_CONTROLLED, checks

    orch = {"name": "orch", "cash_total": 1120.0, "power": 40.0, "cloud_spend": 80.0,
            "deadline_misses": 0, "deadline_miss_rate": 0.0, "exploratory_p95_wait_h": 0.1}
    oracle = {"name": "oracle", "cash_total": 1090.0,
              "bound": {"best_power_cloud": 100.0, "best_cash_total": 1100.0}}
    c = checks([orch, oracle], 0.1)
    assert c["orch_power_cloud_over_bound"] == 1.2 and c["power_cloud_goal"] == GOAL_CONTROLLED
    assert not c["power_cloud_met"]
    assert c["orch_over_oracle"] == round(1120 / 1100, 4) and c["ratio_met"]
    lp_only = checks([orch, {**oracle, "bound": {}}], 0.1)  # an older result: the LP's cash
    assert lp_only["orch_over_oracle"] == round(1120 / 1090, 4)
    assert lp_only["orch_power_cloud_over_bound"] is None and not lp_only["power_cloud_met"]
