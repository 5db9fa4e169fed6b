"""Estimates that learn: each job's speed per GPU model from its own runs, the team's, the shrunk peak table."""

from __future__ import annotations

import math

import pytest

from orchestrator.decision import HoursEstimator, PastRun
from orchestrator.decision.estimates import (
    by_model,
    compute_ratio,
    gain,
    learn_ratios,
    speed_estimate,
    user_bias,
)
from orchestrator.records import JobRow
from orchestrator.spec import load_spec_text

PEAK = 989 / 312  # the table's H100 over A100


def UNSURE(w: float, peak: float = PEAK) -> float:  # noqa: N802
    """The expected hours over the point's of a lognormal belief whose variance is the
    prior's, (ln peak / 2)^2, less what `w` of measurement took away."""
    return math.exp((math.log(peak) / 2) ** 2 * (1 - w) / 2)


def spec(extra: str = "resources: {accelerators: {A100: 1, H100: 1}}\n") -> object:
    return load_spec_text("name: t\nrun: python train.py\n" + extra)


def run(gpu, hours=1.0, sps=None, data=None, fp="fp", at=0.0, count=1, owner=None, est=None):
    return PastRun(fp, "SUCCEEDED", at, duration_s=hours * 3600, gpu=gpu, gpu_count=count,
                   samples_per_sec=sps, data_share=data, owner=owner, estimate_hours=est)


def team(ratio=2.0, jobs=12, data=0.0, name="other"):
    """Other jobs that ran on both models: their H100 runs `ratio` times the A100's throughput
    (as observed; each waits for data `data` of its A100 step)."""
    out = []
    for j in range(jobs):
        out += [run("A100", 2.0, sps=100, data=data, fp=f"{name}{j}"),
                run("H100", 2.0 / ratio, sps=100 * ratio, fp=f"{name}{j}")]
    return out


CASES = [
    # id, history, spec, (gpu, count) asked, hours expected, source fragments
    ("no runs: the peak table, shrunk", [], "estimate: {hours: 3, gpu: A100}\n", ("H100", 1),
     3 / PEAK ** 0.5 * UNSURE(0), ["H100: 1.5x A100 (peak table 3.17x, shrunk; no runs measured on "
                                   "H100: 1.8x, priced at its expected hours for the belief's spread)",
                                   "estimate.hours 3 h on A100x1"]),
    ("the job's own A100 and H100 runs give its own ratio",
     [run("A100", 1.6, sps=100, at=3), run("A100", 1.6, sps=100, at=2), run("A100", 1.6, sps=100, at=1),
      run("H100", 1.0, sps=160), run("H100", 1.0, sps=160), run("H100", 1.0, sps=160)],
     None, ("H100", 2), 1.6 / 1.6 / 2, ["H100: 1.6x this job's A100 speed (3 runs on each"]),
    ("a model measured itself is taken as measured, and names the ratio",
     [run("A100", 1.6, sps=100, at=3), run("A100", 1.6, sps=100, at=2), run("A100", 1.6, sps=100, at=1),
      run("H100", 1.0, sps=160), run("H100", 1.0, sps=160), run("H100", 1.0, sps=160)],
     None, ("H100", 1), 1.0, ["measured: median of 3 runs on H100x1: H100: 1.6x this job's A100 speed "
                              "(3 runs on each, by throughput)"]),
    ("a run of this job still running gives its speed by throughput, not its hours",
     [run("A100", 1.6, sps=100, at=1), PastRun("fp", "RUNNING", 2, gpu="H100", samples_per_sec=160)],
     None, ("H100", 1), 1.6 / 1.6,
     ["H100: 1.6x this job's A100 speed (1 run on A100, 1 running on H100, by throughput)"]),
    ("a compute-bound new job gains the team's ratio", [run("A100", 2.0, data=0.0, at=1)] + team(),
     None, ("H100", 1), 2.0 / 2.0, ["the team's median over 12 jobs on both, 2x on compute",
                                    "waits for data 0% of a step"]),
    ("a job waiting 40% of its step for data gains less", [run("A100", 2.0, data=0.4, at=1)] + team(),
     None, ("H100", 1), 2.0 * (0.4 + 0.6 / 2.0), ["2x on compute", "waits for data 40% of a step"]),
    ("no share measured: the team's observed median, weighed against the prior as 3 jobs",
     [run("A100", 2.0, at=1)] + team(ratio=1.5, jobs=3),
     None, ("H100", 1), 2.0 / (1.5 * PEAK ** 0.5) ** 0.5 * UNSURE(0.5),
     ["H100: 1.5x A100 (the team's median over 3 jobs on both, 1.5x, weighed against the peak "
      "table, shrunk, 1.8x, as 3 jobs: 1.6x, priced at its expected hours for the belief's "
      "spread)"]),
    ("the team's data-bound jobs teach the compute ratio, not their own gain",
     [run("A100", 2.0, data=0.0, at=1)] + team(ratio=1 / (0.4 + 0.6 / 2.5), jobs=5, data=0.4),
     None, ("H100", 1), 2.0 / 2.5, ["2.5x on compute"]),
    ("a job measured at 2x its estimate is planned at what it measured",
     [run("A100", 4.0, est=2.0), run("A100", 4.0, est=2.0)], "estimate: {hours: 2, gpu: A100}\n",
     ("A100", 1), 4.0, ["measured: median of 2 runs on A100x1"]),
    ("a user whose runs take 2x the estimate: a new job is planned at 2x its estimate",
     [run("A100", 2.0, est=1.0, fp=f"old{j}") for j in range(3)], "estimate: {hours: 3, gpu: A100}\n",
     ("A100", 1), 6.0, ["estimate.hours 3 h on A100x1 x 2", "took 2x their estimates, median over 3 jobs"]),
    ("the bias and the shrunk table together", [run("A100", 2.0, est=1.0, fp="old")],
     "estimate: {hours: 3, gpu: A100}\n", ("H100", 1), 6.0 / PEAK ** 0.5 * UNSURE(0),
     ["x 2", "peak table 3.17x"]),
    ("the user's gpu_speeds setting is taken as given", [], "estimate: {hours: 3, gpu: A100}\n",
     ("NewGPU", 1), 3.0 / 3.0, ["NewGPU: 3x A100 (gpu_speeds setting)"]),
    ("a CPU-only job scales to a GPU by the table, unshrunk", [], "estimate: {hours: 10}\n", ("T4", 1),
     10 * 2 / 65, ["T4: 32.5x CPU (peak table; no runs measured)"]),
    ("unknown model: no figure, says how to give one", [], None, ("NoSuchGPU", 1), None,
     ["no speed figure for NoSuchGPU"]),
]


@pytest.mark.parametrize("name,history,extra,dev,hours,fragments", CASES, ids=[c[0] for c in CASES])
def test_estimates(name, history, extra, dev, hours, fragments):
    est = HoursEstimator(spec(extra) if extra else spec(), "fp", history,
                         speeds={"NewGPU": 3 * 312 / 989} if "gpu_speeds" in name else None)
    got, source = est.hours(*dev)
    assert (got is None) if hours is None else got == pytest.approx(hours, rel=1e-3)
    for f in fragments:
        assert f in source, (f, source)


def test_every_estimate_names_its_source():
    # Whatever the history, each device's figure says where it came from, and names the models.
    histories = [[], team(), [run("A100", 1.0, sps=10, data=0.2)] + team(jobs=2),
                 [run("A100", 1.0), run("H100", 0.5)]]
    for history in histories:
        est = HoursEstimator(spec("estimate: {hours: 1, gpu: A100}\n"), "fp", history)
        for gpu in ("A100", "H100", "L4", "RTX4090"):
            hours, source = est.hours(gpu, 1)
            assert hours and hours > 0 and gpu in source
            if gpu != "A100":
                s = est.speed(gpu)
                assert s.ratio and s.source.startswith(f"{gpu}: ")


def test_the_gain_of_a_faster_gpu_shrinks_with_the_data_wait():
    assert gain(1.0, 2.0) == pytest.approx(2.0) and gain(0.6, 2.0) == pytest.approx(1 / 0.7)
    assert gain(0.0, 2.0) == pytest.approx(1.0)
    # compute_ratio undoes gain; a job that gained more than its compute share allows is taken as seen
    assert compute_ratio(gain(0.6, 2.5), 0.4) == pytest.approx(2.5)
    assert compute_ratio(3.0, 0.5) == pytest.approx(3.0) and compute_ratio(1.4, None) == 1.4


def test_team_ratios_are_medians_over_jobs_not_runs():
    # One job with many runs counts once; the job being planned does not count at all.
    history = team(ratio=2.0, jobs=3) + [run("A100", 1.0, sps=100, fp="busy", at=i) for i in range(5)] + \
        [run("H100", 1.0, sps=500, fp="busy", at=i) for i in range(5)] + team(ratio=9.0, jobs=1, name="x")
    learned = learn_ratios([*history, *[run("A100", sps=1, fp="me"), run("H100", sps=50, fp="me")]],
                           exclude="me")
    assert learned.observed["A100", "H100"] == (pytest.approx(2.0), 5)
    assert learned.observed["H100", "A100"][0] == pytest.approx(0.5)
    assert learned.observed["A100", "H100"][0] != pytest.approx(5.0)  # not the busy job's 5 runs


def test_own_runs_by_model_take_the_recent_five_and_per_gpu_figures():
    rs = [run("A100", 1.0, sps=400, count=4, at=i) for i in range(5)] + [run("A100", 9.0, sps=1, at=-1)]
    on = by_model(rs)["A100"]
    assert (on.runs, on.sps_per_gpu, on.gpu_hours) == (5, 100, 4.0)


def test_user_bias_counts_the_owners_runs_on_the_estimates_model():
    rs = [run("A100", 2.0, est=1.0, fp="a", owner="ann"), run("A100", 1.0, est=1.0, fp="b", owner="bob"),
          PastRun("c", "SUCCEEDED", 0, duration_s=3 * 3600, gpu="H100", owner="ann",
                  estimate_hours=1.0, estimate_gpu="A100")]  # ran elsewhere: says nothing of her estimate
    assert user_bias(rs, "ann") == (pytest.approx(2.0), 1)
    assert user_bias(rs, "bob") == (pytest.approx(1.0), 1) and user_bias(rs, "cy") is None
    assert user_bias(rs, "ann", exclude="a") is None


@pytest.mark.parametrize("settings,gpu", [({"gpu_name": "NVIDIA H100 80GB HBM3"}, "H100"),
                                          ({"gpu_name": "cpu"}, None),
                                          ({"gpu_name": "cuda"}, "A100"), ({}, "A100")])
def test_a_stored_run_yields_what_it_measured(settings, gpu):
    row = JobRow(id="j1", name="t", status="SUCCEEDED", fingerprint="fp", owner="ann",
                 spec={"estimate": {"hours": 2.0, "gpu": "A100"}},
                 decision={"choice": {"target": "cloud", "gpu": "A100", "count": 2}},
                 metrics={"samples_per_sec": 120.0, "data_fraction": 0.4, "wall_s": 5400.0,
                          "run_settings": settings},
                 created_at=1.0, started_at=10.0, finished_at=9999.0)
    r = PastRun.from_row(row)
    assert (r.fingerprint, r.gpu, r.gpu_count, r.duration_s) == ("fp", gpu, 2, 5400.0)
    assert (r.samples_per_sec, r.data_share, r.owner, r.estimate_hours, r.estimate_gpu) == \
        (120.0, 0.4, "ann", 2.0, "A100")


def test_speed_estimate_is_pure_and_says_one_to_itself():
    e = speed_estimate("A100", "A100", {}, learn_ratios([]))
    assert (e.ratio, e.source) == (1.0, "")


def test_a_plan_reads_this_jobs_runs_and_the_teams_successes(tmp_path):
    import time

    from orchestrator.service.planning import gather
    from orchestrator.settings import Settings
    from orchestrator.spec import load_spec_text
    from tests.conftest import store_at, store_url

    store = store_at(tmp_path)
    for fp, status, seen in (("me", "FAILED", "cpu"), ("me", "SUCCEEDED", "NVIDIA A100-SXM4-40GB"),
                             ("other", "SUCCEEDED", "NVIDIA H100 80GB HBM3"), ("other", "FAILED", "cpu")):
        rec = store.create_job(name="j", spec={"run": "x", "estimate": {"hours": 2.0}}, kind="exploratory",
                               target="cloud", fingerprint=fp, decision={"choice": {"gpu": "L4", "count": 1}})
        store.set_status(rec.id, "RUNNING", "started")
        store.set_status(rec.id, status, "done", metrics={"run_settings": {"gpu_name": seen}})
    store.close()
    settings = Settings(home=tmp_path, database_url=store_url(tmp_path))
    got = gather(load_spec_text("name: j\nrun: x\n"), settings, time.time(), fingerprint="me",
                 offers=[]).history
    assert sorted((r.fingerprint, r.status, r.gpu) for r in got) == [
        ("me", "FAILED", None), ("me", "SUCCEEDED", "A100"), ("other", "SUCCEEDED", "H100")]
    assert all(r.estimate_hours == 2.0 and r.duration_s is not None for r in got)


def test_a_plan_reads_what_a_running_run_of_this_job_reported(tmp_path):
    """A sweep's later runs are planned with its first runs' reports: a running run's last
    report (its throughput, on the device its runner saw) counts for this job's speed."""
    import time

    from orchestrator.service.planning import gather
    from orchestrator.settings import Settings
    from tests.conftest import store_at, store_url

    store = store_at(tmp_path)
    for status, sps, seen in (("SUCCEEDED", 100.0, "NVIDIA A100-SXM4-40GB"),
                              ("RUNNING", 250.0, "NVIDIA H100 80GB HBM3")):
        rec = store.create_job(name="j", spec={"run": "x"}, kind="exploratory", target="cloud",
                               fingerprint="me", decision={"choice": {"gpu": "A100", "count": 1}})
        store.set_status(rec.id, "RUNNING", "started")
        store.set_status(rec.id, status, "reported", metrics={
            "samples_per_sec": sps, "wall_s": 3600.0, "run_settings": {"gpu_name": seen}})
    store.close()
    settings = Settings(home=tmp_path, database_url=store_url(tmp_path))
    job = load_spec_text("name: j\nrun: x\nresources: {accelerators: {A100: 1, H100: 1}}\n")
    history = gather(job, settings, time.time(), fingerprint="me", offers=[]).history
    est = HoursEstimator(job, "me", history)
    speed = est.speed("H100")
    assert (speed.kind, speed.ratio) == ("own", pytest.approx(2.5))
    assert "1 run on A100, 1 running on H100, by throughput" in speed.source
    assert est.hours("H100", 1)[0] == pytest.approx(1.0 / 2.5)  # not the running run's hours


def test_a_plan_learns_the_bias_of_the_user_it_plans_for():
    """`planning.plan(owner=...)`, as `orch serve` calls it for each caller: ann's runs took
    2x her estimates, bob's what he wrote; the same 1 h file is planned at 2 h for ann,
    1 h for bob, and at the team's median (1.5 h) when nobody is named."""
    from orchestrator.service.planning import plan
    from orchestrator.settings import OwnedGpus, Settings

    history = [run("A100", 2.0, est=1.0, fp="a", owner="ann"),
               run("A100", 1.0, est=1.0, fp="b", owner="bob")]
    job = spec("resources: {accelerators: A100:1}\nestimate: {hours: 1, gpu: A100}\n")
    s = Settings(onprem=[OwnedGpus(gpu="A100", count=1, purchase_price=10000)], mode="hybrid")

    def planned(owner):
        d, _ = plan(job, s, fingerprint="new", history=history, owner=owner)
        return d.choice.est_hours, d.choice.hours_basis

    assert planned("ann") == (pytest.approx(2.0), "estimate.hours 1 h on A100x1 x 2 (the owner's "
                              "runs took 2x their estimates, median over 1 job)")
    assert planned("bob") == (pytest.approx(1.0), "estimate.hours 1 h on A100x1")
    assert planned(None)[0] == pytest.approx(1.5)


def test_the_estimates_uncertainty_by_where_it_came_from():
    from orchestrator.decision.estimates import user_error
    from orchestrator.decision.pricing import DEFAULT_SPREAD, ESTIMATE_SPREAD, MEASURED_SPREAD

    job = spec("resources: {accelerators: 'A100:1'}\nestimate: {hours: 1}\n")
    bare = spec("resources: {accelerators: 'A100:1'}\n")
    assert HoursEstimator(bare, "fp", ()).spread == DEFAULT_SPREAD == 3.0
    assert HoursEstimator(job, "fp", ()).spread == ESTIMATE_SPREAD == 2.0
    # Measured on the device itself: the runs' own spread, max over median, at least 1.15.
    steady = [run("A100", 1.0, at=i) for i in range(3)]
    assert HoursEstimator(job, "fp", steady).spread == MEASURED_SPREAD
    ragged = [run("A100", h, at=i) for i, h in enumerate((1.0, 1.0, 2.5))]
    assert HoursEstimator(job, "fp", ragged).spread == pytest.approx(2.5)
    # The owner's estimates, once three of their jobs measured them: p90 over the median.
    mine = [run("A100", h, est=1.0, fp=f"j{i}", owner="ann") for i, h in enumerate((1, 1.2, 1.4, 3))]
    assert user_error(mine, "ann") == pytest.approx(3 / 1.3)
    assert user_error(mine[:2], "ann") is None
    assert HoursEstimator(job, "fp", mine, owner="ann").spread == pytest.approx(3 / 1.3)


def test_a_job_of_unknown_gain_is_priced_at_the_teams_expected_hours_not_its_median():
    # Three team jobs gain 3x on an H100, two gain 1.1x: the median says 3x, but a job that
    # may be either takes, in expectation, the hours of the harmonic mean (about 1.8x).
    history = team(ratio=3.0, jobs=3) + team(ratio=1.1, jobs=2, name="slow")
    learned = learn_ratios(history)
    assert learned.observed["A100", "H100"] == (pytest.approx(3.0), 5)
    assert learned.expected["A100", "H100"] == pytest.approx(5 / (3 / 3.0 + 2 / 1.1))
    est = HoursEstimator(spec("resources: {accelerators: {A100: 1, H100: 1}}\n"
                              "estimate: {hours: 2, gpu: A100}\n"), "new", history)
    hours, basis = est.hours("H100", 1)
    w = 5 / 8  # five jobs against the prior's three
    assert hours == pytest.approx(2.0 / (learned.expected["A100", "H100"] ** w * PEAK ** (0.5 * (1 - w)))
                                  * UNSURE(w))
    assert "priced at their expected hours: median 3x" in basis


def test_a_gpu_speeds_setting_is_a_prior_that_the_teams_runs_overrule():
    # The setting says an H100 is 6x an A100; the team's runs measure 1.3x. With no runs the
    # setting stands; as jobs on both add up, the measurement takes over.
    job = spec("resources: {accelerators: {A100: 1, H100: 1}}\nestimate: {hours: 6, gpu: A100}\n")
    told = {"A100": 1.0, "H100": 6.0}
    ratio = {n: 6.0 / HoursEstimator(job, "new", team(ratio=1.3, jobs=n), speeds=told).hours("H100", 1)[0]
             for n in (0, 3, 12, 60)}
    assert ratio[0] == pytest.approx(6.0)
    assert ratio[3] == pytest.approx((6.0 * 1.3) ** 0.5 / UNSURE(0.5))
    assert ratio[0] > ratio[3] > ratio[12] > ratio[60] > 1.3
    assert ratio[60] < 1.4
    basis = HoursEstimator(job, "new", team(ratio=1.3, jobs=3), speeds=told).hours("H100", 1)[1]
    assert "weighed against the gpu_speeds setting, 6x, as 3 jobs" in basis
