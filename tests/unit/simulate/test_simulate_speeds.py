"""A job's speed on a GPU it never ran on, learned from its runs on one model alone (issue
49): the simulator's runs record the share of a step spent waiting for data, as the runner's
`data_fraction` does, and orch's estimator turns that share into the job's own gain on a
faster GPU, saying so in the figure's source."""

from __future__ import annotations

import math

import pytest

from orchestrator.decision.estimates import SHRINK
from orchestrator.decision.gpus import SPEED
from orchestrator.decision.pricing import HoursEstimator
from orchestrator.simulate import policies as P
from orchestrator.simulate.engine import Simulation
from orchestrator.simulate.jobs import build_jobs, data_share
from orchestrator.simulate.scenario import policy_settings
from orchestrator.simulate.trace import parse_trace
from tests.unit.simulate.test_simulate import HEADER, scenario, settings  # noqa: F401

FASTER = sorted(m for m, v in SPEED.items() if v > SPEED["A100"] * 1.0005 and m != "CPU")


def _speeds(c: float) -> str:
    """A job's true speeds as generate.py writes them for a compute-bound share c."""
    return ";".join(f"{m}={1 / ((1 - c) + c * SPEED['A100'] / SPEED[m]):.3f}" for m in FASTER)


def _trace(c_by_fp: dict[str, float]):
    """Each job three times, a day apart, on one A100 (the team owns one)."""
    lines = [f"{24 * day + i},{fp},{fp},1,A100,1,,true,auto,1,{_speeds(c)}\n"
             for day in range(3) for i, (fp, c) in enumerate(c_by_fp.items())]
    return parse_trace(HEADER.rstrip("\n") + ",estimate_h,speeds\n" + "".join(lines), "t.csv")


def test_a_run_records_the_data_share_its_speeds_imply():
    job = _trace({"f": 0.6}).jobs[0]
    assert data_share(job, "A100") == pytest.approx(0.4, abs=0.002)
    assert data_share(job, "A100-80GB") == data_share(job, "A100")  # as fast: waits as long
    h100 = dict(job.speeds)["H100"]
    assert data_share(job, "H100") == pytest.approx(0.4 * h100, abs=0.003)  # waits more there
    assert data_share(job, "RTX4090") is None  # slower: its speed is the table's, no share
    mixed = parse_trace(HEADER.rstrip("\n") + ",speeds\n0,a,fa,1,A100,1,,true,auto,"
                                              "H100=1.2;B200=3.9\n", "m.csv").jobs[0]
    assert data_share(mixed, "A100") is None  # no single share explains both figures


def test_runs_on_one_model_alone_give_each_job_its_own_gain_elsewhere(settings):  # noqa: F811
    trace = _trace({"data-bound": 0.1, "compute-bound": 0.9})
    sc = scenario(settings, onprem=("A100:1:10000",))
    ps = policy_settings(settings, sc)
    sim = Simulation(trace=trace, jobs=build_jobs(trace, sc.offers, ps), offers=sc.offers,
                     settings=ps)
    seen = {}

    def spy(a, view):
        seen[a.fingerprint] = (a, [r for runs in view.history.values() for r in runs])
        return P.orch(a, view)

    sim.run("orch", spy)
    gains = {}
    for fp, (a, history) in seen.items():
        mine = [r for r in history if r.fingerprint == fp]
        assert len(mine) == 2 and {r.gpu for r in mine} == {"A100"}  # never ran elsewhere
        est = HoursEstimator(a.spec, fp, history, ps.default_job_hours, ps.gpu_speeds).speed("H100")
        share = mine[0].data_share
        assert f"{share:.0%} of a step waits for data" in est.source, est.source
        # its compute part at the shrunk table, priced at its expected hours for the spread
        peak = SPEED["H100"] / SPEED["A100"]
        f = math.exp((math.log(peak) / 2) ** 2 / 2)
        assert est.ratio == pytest.approx(1 / (share + (1 - share) * f / peak ** SHRINK))
        gains[fp] = est.ratio
    assert gains["compute-bound"] > 1.4 > 1.1 > gains["data-bound"]


def test_a_running_runs_first_report_reaches_later_jobs_and_gives_way_to_its_record(settings):  # noqa: F811
    """As `orch serve` reads a running job's last report: a run's throughput and data share
    count for its job's later runs `FIRST_REPORT_H` after it starts, before it ends; once it
    ends its record replaces the report; a run shorter than that reports only as it ends."""
    from orchestrator.simulate.engine import FIRST_REPORT_H

    speeds = _speeds(0.6)
    rows = [(0.0, "f", 1.0), (FIRST_REPORT_H / 2, "f", 1.0), (FIRST_REPORT_H * 1.5, "f", 1.0),
            (3.0, "f", 1.0), (5.0, "short", FIRST_REPORT_H / 2),
            (5.0 + FIRST_REPORT_H * 0.4, "short", FIRST_REPORT_H / 2)]
    lines = [f"{at},{fp},{fp},{work},A100,1,,true,auto,1,{speeds}\n" for at, fp, work in rows]
    trace = parse_trace(HEADER.rstrip("\n") + ",estimate_h,speeds\n" + "".join(lines), "t.csv")
    sc = scenario(settings, onprem=("A100:2:20000",))
    ps = policy_settings(settings, sc)
    sim = Simulation(trace=trace, jobs=build_jobs(trace, sc.offers, ps), offers=sc.offers,
                     settings=ps)
    seen = []

    def spy(a, view):
        seen.append(sorted((r.status, r.gpu, r.duration_s is None, r.data_share)
                           for r in view.history.get(a.fingerprint, ())))
        return P.orch(a, view)

    sim.run("orch", spy)
    share = pytest.approx(0.4, abs=0.002)
    assert seen[0] == [] and seen[1] == []  # the first run has not reported yet
    assert seen[2] == [("RUNNING", "A100", True, share)]  # its first report, no hours yet
    # The three runs ended (two on the owned A100s, one rented): their records, no report
    # left over.
    assert [(st, hours_unknown, d) for st, _, hours_unknown, d in seen[3]] == \
        [("SUCCEEDED", False, share)] * 3
    assert seen[4] == [] and seen[5] == []  # shorter than that: it never reported while running
    seen.clear()
    Simulation(trace=trace, jobs=sim.jobs, offers=sc.offers, settings=ps,
               first_report_h=0.0).run("orch", spy)  # runs that report only as they end
    assert seen[2] == [] and [st for st, *_ in seen[3]] == ["SUCCEEDED"] * 3


def test_a_running_runs_report_is_not_the_teams_measurement():
    """The team's ratios learn from finished jobs only; a run still running measures its
    own job's later runs (estimates.by_model), with its hours left out."""
    from orchestrator.decision import PastRun
    from orchestrator.decision.estimates import by_model, learn_ratios

    going = PastRun("x", "RUNNING", 2.0, gpu="H100", samples_per_sec=300.0, data_share=0.1)
    done = PastRun("x", "SUCCEEDED", 1.0, duration_s=3600.0, gpu="A100", samples_per_sec=100.0)
    silent = PastRun("x", "RUNNING", 3.0, gpu="B200")  # nothing reported yet
    assert learn_ratios([done, going, silent]).observed == {}
    on = by_model([done, going, silent])
    assert set(on) == {"A100", "H100"}
    assert (on["H100"].runs, on["H100"].running, on["H100"].gpu_hours) == (0, 1, None)
    assert (on["H100"].sps_per_gpu, on["H100"].data_share) == (300.0, 0.1)
