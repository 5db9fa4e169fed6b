"""The simulator keeps truth and belief apart: the estimate_h and speeds columns, what a
policy may read, --beliefs, and the generator's family flags."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from orchestrator.base.errors import InputError
from orchestrator.decision.gpus import SPEED
from orchestrator.simulate import policies as P
from orchestrator.simulate.engine import Simulation, View
from orchestrator.simulate.generate import Shape, generate, parse_shape
from orchestrator.simulate.jobs import Ask, build_jobs, true_hours
from orchestrator.simulate.run import TRUE_BELIEFS, simulate
from orchestrator.simulate.scenario import policy_settings
from orchestrator.simulate.trace import format_trace, parse_trace
from tests.conftest import run_orch
from tests.unit.simulate.test_simulate import HEADER, cloud, scenario, settings  # noqa: F401

BELIEF_HEADER = HEADER.rstrip("\n") + ",estimate_h,speeds\n"
# A100s only, owned and rented: a job's speed beliefs cannot matter, its hours can.
A100_ONLY = [cloud("A100", 1, 1.29, "lambda"), cloud("A100", 8, 32.77, "aws"),
             cloud("A100", 8, 12.5, "aws", True)]


# --- the two columns -----------------------------------------------------------------------

def test_estimate_and_speeds_columns_are_read():
    t = parse_trace(BELIEF_HEADER + "0,a,fa,4,A100,2,,true,auto,1.5,h100=1.61;RTX4090=0.71\n"
                    "1,b,fb,3,A100,1,,false,auto,,\n", "t.csv")
    a, b = t.jobs
    assert (a.estimate_h, a.estimated, a.file_estimate_h, a.wall_hours) == (1.5, True, 1.5, 2.0)
    assert a.speeds == (("H100", 1.61), ("RTX4090", 0.71))
    assert (b.estimate_h, b.estimated, b.file_estimate_h, b.speeds) == (None, True, None, ())
    # The job's own speed is the factor given, else the table's ratio; its own GPU is 1.
    assert true_hours(a, "H100", 2, None) == pytest.approx(4 / (1.61 * 2))
    assert true_hours(a, "A100", 1, None) == pytest.approx(4.0)
    assert true_hours(a, "H200", 2, None) == pytest.approx(4 * SPEED["A100"] / (SPEED["H200"] * 2))
    # Written back and read again, the same jobs.
    again = parse_trace(format_trace(t.jobs, t.start), "again.csv")
    assert [(j.estimate_h, j.estimated, j.speeds) for j in again.jobs] == [
        (j.estimate_h, j.estimated, j.speeds) for j in t.jobs]


def test_without_the_columns_the_file_estimate_is_the_truth():
    (j,) = parse_trace(HEADER + "0,a,fa,4,A100,2,,true,auto\n", "t.csv").jobs
    assert (j.estimated, j.estimate_h, j.file_estimate_h, j.speeds) == (False, None, 2.0, ())
    assert format_trace([j]).splitlines()[0] == HEADER.strip()


@pytest.mark.parametrize("estimate,speeds,where,words", [
    ("abc", "", "estimate_h", "'abc' is not a number"),
    ("-1", "", "estimate_h", "must be above zero"),
    ("0", "", "estimate_h", "must be above zero"),
    ("1", "H100", "speeds", "write MODEL=FACTOR"),
    ("1", "=2", "speeds", "write MODEL=FACTOR"),
    ("1", "H100=fast", "speeds", "'fast' is not a number"),
    ("1", "H100=0", "speeds", "must be above zero"),
    ("1", "WARP9=2", "speeds", "no speed figure for 'WARP9'"),
    ("1", "A100=2", "speeds", "the job's own gpu A100 is 1"),
    ("1", "H100=2;h100=3", "speeds", "H100 is given twice"),
])
def test_bad_belief_values_name_file_line_and_column(estimate, speeds, where, words):
    text = BELIEF_HEADER + "0,a,fa,1,A100,1,,true,auto,1,\n" + f"1,b,fb,1,A100,1,,true,auto,{estimate},{speeds}\n"
    with pytest.raises(InputError) as e:
        parse_trace(text, "bad.csv")
    assert str(e.value).startswith(f"bad.csv:3: {where}: ") and words in str(e.value)


# --- the policy never reads the truth ----------------------------------------------------

def test_a_policy_is_handed_no_field_of_the_truth():
    names = {f.name for f in dataclasses.fields(Ask)}
    assert not names & {"gpu_hours", "wall_hours", "job", "true_speeds"}
    view = View.__init__.__code__.co_varnames
    assert "sim" not in view and not any("simulation" in v.lower() for v in view)


def _spaced(work: tuple[float, ...]) -> str:
    """One job a day, each its own fingerprint, every estimate 1 h: no job ever meets
    another, so what a policy is shown depends on the job file alone."""
    return BELIEF_HEADER + "".join(f"{24 * i},j{i},f{i},{w},A100,1,,true,auto,1,\n"
                                   for i, w in enumerate(work))


def _recorded(settings, text: str):  # noqa: F811
    sc = scenario(settings, onprem=("A100:2:20000",))
    ps = policy_settings(settings, sc)
    trace = parse_trace(text, "t.csv")
    sim = Simulation(trace=trace, jobs=build_jobs(trace, sc.offers, ps), offers=sc.offers,
                     settings=ps)
    seen = []

    def spy(a, view):
        seen.append((a, view.capacity(a.gpus), tuple(view.history.get(a.fingerprint, ()))))
        return P.orch(a, view)

    return seen, sim.run("orch", spy)


def test_true_work_changes_the_bill_not_what_the_policy_sees(settings):  # noqa: F811
    short, run_short = _recorded(settings, _spaced((1.0, 1.0, 1.0)))
    long, run_long = _recorded(settings, _spaced((9.0, 0.2, 30.0)))
    assert short == long  # the same asks, capacity and history: same beliefs, same inputs
    assert [o.where for o in run_short.outcomes] == [o.where for o in run_long.outcomes]
    assert run_short.cash_total != pytest.approx(run_long.cash_total)
    assert [o.finish_h - o.start_h for o in run_long.outcomes] != [
        o.finish_h - o.start_h for o in run_short.outcomes]


def test_the_job_file_carries_estimate_h_or_no_estimate(settings):  # noqa: F811
    sc = scenario(settings)
    ps = policy_settings(settings, sc)
    t = parse_trace(BELIEF_HEADER + "0,a,fa,4,A100,2,,true,auto,3,\n1,b,fb,4,A100,1,,true,auto,,\n")
    a, b = (sj.ask for sj in build_jobs(t, sc.offers, ps))
    assert (a.estimate_h, a.spec.estimate.hours, b.estimate_h, b.spec.estimate) == (3.0, 3.0, None, None)
    a, b = (sj.ask for sj in build_jobs(t, sc.offers, ps, "truth"))
    assert (a.estimate_h, a.spec.estimate.hours, b.estimate_h, a.told_truth) == (2.0, 2.0, 4.0, True)


def test_a_cron_slot_carries_the_schedules_estimate_not_the_future_runs_work(settings):  # noqa: F811
    sc = scenario(settings)
    ps = policy_settings(settings, sc)
    text = BELIEF_HEADER + "0,a,fa,1,A100,1,,true,auto,1,\n5,cron,fc,{w},A100,4,24,true,steady,2,\n"
    views = []
    for w in (8, 80):
        t = parse_trace(text.format(w=w))
        sim = Simulation(trace=t, jobs=build_jobs(t, sc.offers, ps), offers=sc.offers, settings=ps)
        view = View(ps, sim.index, t.start, [], sim.scheduled)
        views.append(view.reservations())
    assert views[0] == views[1] and views[0][0].slack_hours == 22.0


# --- --beliefs --------------------------------------------------------------------------

def _distinct(noise: float, seed: int = 3) -> str:
    """Three days of distinct jobs (no repeats: learning from history cannot help), on
    two owned A100s with a cron job; estimates off by exp(N(0, noise))."""
    import random

    rng = random.Random(seed)
    lines = []
    for i in range(60):
        at, work = round(rng.uniform(0, 72), 2), round(rng.uniform(0.2, 6), 2)
        est = round(work * math.exp(rng.gauss(0, noise)), 3)
        lines.append(f"{at},j{i},f{i},{work},A100,1,{rng.choice((12, 24, ''))},true,auto,{est},\n")
    lines += [f"{d * 24 + 2},cron,fc{d},6,A100,2,12,true,steady,3,\n" for d in range(3)]
    return BELIEF_HEADER + "".join(lines)


def _orch(settings, text: str, beliefs: str):  # noqa: F811
    sc = scenario(settings, onprem=("A100:2:20000",), offers=A100_ONLY)
    ps = policy_settings(settings, sc)
    trace = parse_trace(text, "t.csv")
    sim = Simulation(trace=trace, jobs=build_jobs(trace, sc.offers, ps, beliefs), offers=sc.offers,
                     settings=ps)
    run = sim.run("orch", P.orch)
    return [o.where for o in run.outcomes], run.summary()


def test_true_beliefs_match_exact_estimates_and_differ_from_noisy_ones(settings):  # noqa: F811
    exact = _distinct(0.0)
    assert _orch(settings, exact, "learned") == _orch(settings, exact, "truth")
    noisy = _distinct(1.0)
    learned, truth = _orch(settings, noisy, "learned"), _orch(settings, noisy, "truth")
    assert learned[0] != truth[0]
    assert truth[1] == _orch(settings, exact, "truth")[1]  # the truth is the same trace


def test_beliefs_both_adds_the_true_row_and_what_learning_costs(settings):  # noqa: F811
    trace = parse_trace(_distinct(1.0), "t.csv")
    sc = scenario(settings, onprem=("A100:2:20000",), offers=A100_ONLY)
    r = simulate(trace, sc, settings, policies=["orch", "owned-first"], beliefs="both")
    by = {p["name"]: p for p in r["policies"]}
    assert list(by)[:3] == ["orch", TRUE_BELIEFS, "owned-first"]
    spend = lambda p: p["power"] + p["cloud_spend"]  # noqa: E731
    assert r["learning_cost"] == pytest.approx(spend(by["orch"]) / spend(by[TRUE_BELIEFS]), abs=1e-3)
    assert TRUE_BELIEFS not in r["checks"]["comparable_baselines"]
    assert TRUE_BELIEFS not in r["checks"]["not_comparable"]
    one = simulate(trace, sc, settings, policies=["orch"], beliefs="truth")
    assert one["policies"][0]["cash_total"] == by[TRUE_BELIEFS]["cash_total"]
    assert one["learning_cost"] is None
    with pytest.raises(ValueError):
        simulate(trace, sc, settings, beliefs="hope")


# --- the generator's families ---------------------------------------------------------

def test_default_generation_writes_no_belief_columns():
    text = format_trace(generate(7, 2))
    assert text == format_trace(generate(7, 2, Shape()))
    assert "estimate_h" not in text.splitlines()[0]


def test_generate_flags_shape_the_trace_deterministically():
    base = generate(14, 4)
    shape = Shape(noise=0.5, compute=(0.0, 1.0))
    a, b = format_trace(generate(14, 4, shape)), format_trace(generate(14, 4, shape))
    assert a == b and a != format_trace(generate(14, 5, shape))
    noisy = generate(14, 4, shape)
    # Beliefs come from their own generator: the workload is the same.
    assert [(j.arrival_h, j.fingerprint, j.gpu_hours) for j in noisy] == [
        (j.arrival_h, j.fingerprint, j.gpu_hours) for j in base]
    ratios = [math.log(j.estimate_h / j.wall_hours) for j in noisy]
    assert 0.3 < (sum(r * r for r in ratios) / len(ratios)) ** 0.5 < 0.7
    by_fp = {}
    for j in noisy:
        assert by_fp.setdefault(j.fingerprint, j.speeds) == j.speeds  # one draw per fingerprint
        h100 = dict(j.speeds)["H100"]
        assert 1.0 <= h100 <= SPEED["H100"] / SPEED["A100"] + 1e-3
    assert len({dict(s)["H100"] for s in by_fp.values()}) > 3


@pytest.mark.parametrize("shape,check", [
    (Shape(compute=(1.0, 1.0)),
     lambda js: dict(js[0].speeds)["H100"] == round(SPEED["H100"] / SPEED["A100"], 3)),
    (Shape(compute=(0.0, 0.0)), lambda js: all(f == 1.0 for j in js for _, f in j.speeds)),
    (Shape(owned=8), lambda js: {j.name for j in js if j.kind == "steady"}
     == {"weekly-finetune", "weekly-finetune-2"}),
    (Shape(steady=2.0), lambda js: sum(j.name.startswith("nightly") for j in js) == 2 * 14),
    (Shape(owned=2, steady=1.0), lambda js: sum(j.name.startswith("nightly") for j in js) == 14),
    (Shape(gpu="H100", owned=4), lambda js: {j.gpu for j in js} == {"H100"}),
    (Shape(burst=(2, 2)), lambda js: all(n == 2 for n in _sweep_sizes(js))),
])
def test_generate_families(shape, check):
    assert check(generate(14, 6, shape))


def _sweep_sizes(jobs) -> list[int]:
    sizes: dict[tuple, int] = {}
    for j in jobs:
        if j.name.startswith("sweep-"):
            key = (j.fingerprint, int(j.arrival_h // 24))
            sizes[key] = sizes.get(key, 0) + 1
    assert sizes, "no sweep in the trace"
    return list(sizes.values())


@pytest.mark.parametrize("kwargs,words", [
    (dict(owned="A100"), "--owned A100: expected GPU:COUNT"),
    (dict(owned="WARP9:4"), "--owned WARP9:4"),
    (dict(owned="A100:0"), "--owned A100:0"),
    (dict(steady=0.0), "--steady 0: must be above zero"),
    (dict(burst="5:2"), "--burst 5:2: need 1 <= LO <= HI"),
    (dict(burst="a:b"), "--burst a:b: expected LO:HI numbers"),
    (dict(noise=-1.0), "--estimate-noise -1: must be 0 or more"),
    (dict(compute="0.5:2"), "--compute-share 0.5:2: need 0 <= LO <= HI <= 1"),
])
def test_bad_generate_flags(kwargs, words):
    with pytest.raises(InputError) as e:
        parse_shape(**kwargs)
    assert words in str(e.value)


def test_cli_generate_flags_and_beliefs(orch_home):
    path = orch_home / "t.csv"
    proc = run_orch(orch_home, "simulate", "--generate", str(path), "--days", "3", "--seed", "2",
                    "--owned", "A100:8", "--burst", "2:3", "--estimate-noise", "0.5",
                    "--compute-share", "0.2:0.9")
    assert proc.returncode == 0, proc.stderr
    shape = Shape(owned=8, burst=(2, 3), noise=0.5, compute=(0.2, 0.9))
    assert path.read_text() == format_trace(generate(3, 2, shape))
    proc = run_orch(orch_home, "simulate", str(path), "--onprem", "A100:8:80000", "--beliefs", "both")
    assert proc.returncode == 0, proc.stderr
    assert "orch (true beliefs)" in proc.stdout and "what learning costs: orch's power + cloud" in proc.stdout
    for minutes, hours in (("0", 0.0), ("12", 0.2)):  # when a run's first report reaches them
        proc = run_orch(orch_home, "simulate", str(path), "--onprem", "A100:8:80000", "--json",
                        "--mip-seconds", "0", "--first-report-minutes", minutes)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["first_report_h"] == hours
    proc = run_orch(orch_home, "simulate", str(path), "--first-report-minutes", "-1")
    assert proc.returncode == 2 and "--first-report-minutes" in proc.stderr
    proc = run_orch(orch_home, "simulate", str(path), "--beliefs", "sure")
    assert proc.returncode == 2 and "--beliefs sure: write learned, truth or both" in proc.stderr
