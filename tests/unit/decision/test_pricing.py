"""Cost per job: hours on each GPU, cloud and owned prices, money display."""

from __future__ import annotations

import math

import pytest

from orchestrator.decision import HoursEstimator, Offer, PastRun, job_cost
from orchestrator.decision.gpus import canonical_gpu, relative_speed
from orchestrator.decision.pricing import fmt_money, local_offer, onprem_offer, owned_hourly, reference_device
from orchestrator.settings import LocalMachine, OwnedGpus
from orchestrator.spec import load_spec_text


def spec(extra: str = "") -> object:
    return load_spec_text("name: t\nrun: python train.py\n" + extra)


A100_H100 = "resources: {accelerators: {A100: 1, H100: 1}}\n"


def run(gpu, count=1, duration_s=3600.0, at=0.0, sps=None, status="SUCCEEDED", fp="fp"):
    return PastRun(fp, status, at, duration_s=duration_s, gpu=gpu, gpu_count=count,
                   samples_per_sec=sps)


def test_cloud_job_cost_bills_hours_plus_startup():
    o = Offer("cloud", "A100", 1, 2.0, cloud="lambda", region="r")
    full, marginal = job_cost(o, hours=3.0, used=1, startup_minutes=6)
    assert full == pytest.approx(2.0 * 3.1) and marginal is None


def test_owned_hardware_is_never_free():
    am, pw = owned_hourly(30000, 3, 0.5, 1000, 0.2)
    assert am == pytest.approx(30000 / (3 * 8766 * 0.5))
    assert pw == pytest.approx(0.2)
    o = onprem_offer(OwnedGpus(gpu="A100", count=4, purchase_price=40000, watts=400), 0.15)
    assert o.power_per_hour == pytest.approx(4 * 0.4 * 0.15)
    assert o.amortized_per_hour > 0
    assert o.price_per_hour == pytest.approx(o.amortized_per_hour + o.power_per_hour)
    full, marginal = job_cost(o, hours=2.0, used=1, startup_minutes=6)  # a quarter of the pool
    assert full == pytest.approx(o.price_per_hour / 4 * 2)
    assert marginal == pytest.approx(o.power_per_hour / 4 * 2)
    assert marginal < full


def test_free_hardware_still_costs_power():
    o = local_offer(LocalMachine(purchase_price=0, watts=200), 0.3, None, 0, 8, 32)
    full, marginal = job_cost(o, hours=10, used=0, startup_minutes=6)
    assert full == marginal == pytest.approx(0.2 * 0.3 * 10)


def test_three_times_faster_at_twice_the_price_is_cheaper_per_job():
    est = HoursEstimator(spec(A100_H100 + "estimate: {hours: 3, gpu: A100}\n"), "fp", [],
                         speeds={"A100": 1 / 3, "H100": 1.0})
    slow, fast = Offer("cloud", "A100", 1, 1.0), Offer("cloud", "H100", 1, 2.0)
    h_slow, _ = est.hours("A100", 1)
    h_fast, basis = est.hours("H100", 1)
    assert (h_slow, h_fast) == pytest.approx((3.0, 1.0)) and "gpu_speeds setting" in basis
    assert job_cost(fast, h_fast, 1, 6)[0] < job_cost(slow, h_slow, 1, 6)[0]


ESTIMATES = [
    # id, spec extra, history, (gpu, count) asked, hours expected, basis fragment
    ("measured on that device", A100_H100, [run("A100", duration_s=7200), run("A100", duration_s=3600),
                                            run("A100", duration_s=5400)],
     ("A100", 1), 1.5, "median of 3 runs on A100x1"),
    ("scaled from a measured run", A100_H100, [run("H100", duration_s=3600)], ("A100", 1),
     # the shrunk table's ratio, priced at its expected hours for the prior's spread
     (989 / 312) ** 0.5 * math.exp((math.log(989 / 312) / 2) ** 2 / 2),
     "measured: median of 1 run on H100x1, scaled"),
    ("two GPUs halve the time", A100_H100, [run("A100", duration_s=3600)], ("A100", 2), 0.5, "scaled"),
    ("a measurement on that device beats a more recent one elsewhere", A100_H100,
     [run("A100", duration_s=3600, sps=100, at=2), run("H100", duration_s=3000, sps=200, at=1)],
     ("H100", 1), 3000 / 3600, "median of 1 run on H100x1"),
    ("spec hint", A100_H100 + "estimate: {hours: 4}\n", [], ("A100", 1), 4.0, "estimate.hours 4 h"),
    ("spec hint on another GPU", A100_H100 + "estimate: {hours: 1, gpu: H100}\n", [], ("A100", 1),
     (989 / 312) ** 0.5 * math.exp((math.log(989 / 312) / 2) ** 2 / 2), "on H100x1, scaled"),
    ("nothing known: default hours", A100_H100, [], ("A100", 1), 1.0, "assumed 1 h on A100x1"),
    ("failed and foreign runs ignored", A100_H100,
     [run("A100", duration_s=99, status="FAILED"), run("A100", duration_s=99, fp="x")],
     ("A100", 1), 1.0, "assumed 1 h"),
    ("CPU-only job scaled to a GPU", "estimate: {hours: 10}\n", [], ("T4", 1), 10 * 2 / 65, "on CPU"),
    ("unknown GPU", A100_H100, [], ("NoSuchGPU", 1), None, "no speed figure for NoSuchGPU"),
]


@pytest.mark.parametrize("name,extra,history,dev,hours,basis", ESTIMATES, ids=[e[0] for e in ESTIMATES])
def test_hours_estimates(name, extra, history, dev, hours, basis):
    got, why = HoursEstimator(spec(extra), "fp", history).hours(*dev)
    assert (got is None) if hours is None else got == pytest.approx(hours)
    assert basis in why


def test_measured_throughput_scales_to_a_device_without_duration():
    # Durations on A100 only; throughput measured on both, e.g. from a benchmark step.
    history = [run("A100", duration_s=7200, sps=100, at=2), run("H100", duration_s=None, sps=400, at=1)]
    got, why = HoursEstimator(spec(A100_H100), "fp", history).hours("H100", 1)
    assert got == pytest.approx(0.5) and "throughput" in why


def test_gpu_speed_overrides():
    est = HoursEstimator(spec(A100_H100), "fp", [], speeds={"NewGPU": 0.5, "A100": 0.25})
    assert est.hours("NewGPU", 1)[0] == pytest.approx(0.5)
    assert relative_speed("a100-80gb") == pytest.approx(312 / 989)


def test_reference_device():
    assert reference_device(spec("resources: {accelerators: 'H100:8'}\n")) == ("H100", 8)
    assert reference_device(spec()) == (None, 0)


@pytest.mark.parametrize("raw,name", [("NVIDIA H200", "H200"), ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
                                      ("NVIDIA GeForce RTX 4090", "RTX4090"), ("Tesla T4", "T4"),
                                      ("NVIDIA RTX A6000", "A6000"), ("a10g", "A10G"),
                                      ("Mystery-9000", "Mystery-9000")])
def test_gpu_names(raw, name):
    assert canonical_gpu(raw) == name


def test_money_in_the_users_currency():
    assert fmt_money(2.5) == "2.50 USD"
    assert fmt_money(2.5, "KRW", 1400) == "3,500 KRW"
    assert fmt_money(None) == "-"
