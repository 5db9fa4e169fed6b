"""The placement policy: a table of jobs, offers and settings, each with the choice expected."""

from __future__ import annotations

import os
import random

import pytest

from orchestrator.decision import Capacity, Offer, OfferIndex, PastRun, classify, decide
from orchestrator.decision.cost import local_offer, onprem_offer
from orchestrator.planning import plan_job
from orchestrator.settings import LocalMachine, OwnedGpus, Settings
from orchestrator.spec import load_spec_text

NOW = 1_700_000_000.0
FP = "fp"


@pytest.fixture(autouse=True)
def _no_orch_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("ORCH_"):
            monkeypatch.delenv(k)


LAMBDA = Offer("cloud", "A100", 1, 1.30, cloud="lambda", region="us-east-1", cpus=30,
               memory_gb=200, instance_type="gpu_1x_a100")
RUNPOD = Offer("cloud", "A100", 1, 1.20, cloud="runpod", region="CA", cpus=16, memory_gb=64,
               instance_type="1x_A100")
RUNPOD_SPOT = Offer("cloud", "A100", 1, 0.70, cloud="runpod", region="CA", spot=True, cpus=16,
                    memory_gb=64, instance_type="1x_A100")
OWNED = OwnedGpus(gpu="A100", count=4, purchase_price=40000, watts=400)  # ~0.69 USD/GPU-hour
ONPREM = onprem_offer(OWNED, 0.15)
LOCAL_GPU = local_offer(LocalMachine(purchase_price=3000, watts=450), 0.15, "RTX4090", 1, 16, 64)
LOCAL_CPU = local_offer(LocalMachine(purchase_price=3000, watts=450), 0.15, None, 0, 16, 64)
OFFERS = [LAMBDA, RUNPOD, RUNPOD_SPOT, ONPREM, LOCAL_GPU, LOCAL_CPU]

JOB = "resources: {accelerators: 'A100:1'}\nestimate: {hours: 1}\n"
CKPT = "checkpoint: {storage: 's3://bucket/ckpt'}\n"
HYBRID = dict(clouds=["lambda", "runpod"], onprem=[OWNED])


def runs(n: int) -> list[PastRun]:
    return [PastRun(FP, "SUCCEEDED", NOW - 3600 * (i + 1), duration_s=3600, gpu="A100")
            for i in range(n)]


def plan(extra: str = "", history=(), capacity=None, offers=OFFERS, **settings):
    spec = load_spec_text("name: t\nrun: python train.py\n" + extra)
    s = Settings(**{**HYBRID, **settings})
    return plan_job(spec, s, fingerprint=FP, history=history, capacity=capacity, offers=offers,
                    now=NOW)


BUSY = Capacity(onprem_free={"A100": 0}, wait_minutes=120, source="test")
SOON = Capacity(onprem_free={"A100": 0}, wait_minutes=30, source="test")

# id, job yaml, history, capacity, settings, offers,
#   expected (kind, target, offer or None), reason fragments (refusal text when no target)
CASES = [
    ("brand-new short job that checkpoints: cheapest cloud, spot",
     JOB + CKPT, (), None, {}, OFFERS,
     ("exploratory", "cloud", RUNPOD_SPOT), ["cheapest cloud offer per job", "spot: the job checkpoints"]),
    ("brand-new short job without checkpoints: on-demand",
     JOB, (), None, {}, OFFERS,
     ("exploratory", "cloud", RUNPOD), ["on-demand: spot would cost", "spot needs checkpoint.storage"]),
    ("the same job after K runs: on-prem",
     JOB + CKPT, runs(3), None, {}, OFFERS,
     ("steady", "onprem", ONPREM), ["steady work runs on owned GPUs", "cheapest on full cost"]),
    ("a cron job: on-prem",
     JOB + "schedule: {cron: '0 3 * * *'}\n", (), None, {}, OFFERS,
     ("steady", "onprem", ONPREM), ["steady work runs on owned GPUs"]),
    ("a long one-off job: cloud on-demand, spot not short",
     "resources: {accelerators: 'A100:1'}\nestimate: {hours: 30}\n" + CKPT, (), None, {}, OFFERS,
     ("exploratory", "cloud", RUNPOD), ["on-demand", "spot is for short jobs: 30 h >= 2 h"]),
    ("a budget that excludes every offer",
     JOB + "budget: {max_cost: 0.01}\n", (), None, {}, OFFERS,
     ("exploratory", None, None), ["nothing fits", "raise budget.max_cost to at least"]),
    ("max_hourly rules out on-demand cloud: the cheapest allowed owned GPU",
     JOB + "budget: {max_hourly: 1.0}\n", (), None, {}, OFFERS,
     ("exploratory", "onprem", ONPREM), ["no cloud offer is eligible", "budget.max_hourly"]),
    ("steady with on-prem full beyond the max wait: cloud burst",
     JOB, runs(3), BUSY, {}, OFFERS,
     ("steady", "cloud", RUNPOD), ["cloud burst", "wait 120 min > max 60 min"]),
    ("steady with on-prem full but within the max wait: on-prem",
     JOB, runs(3), SOON, {}, OFFERS,
     ("steady", "onprem", ONPREM), ["can start within 60 min"]),
    ("a longer max wait keeps it on-prem",
     JOB, runs(3), BUSY, {"max_wait_minutes": 180}, OFFERS,
     ("steady", "onprem", ONPREM), ["steady work runs on owned GPUs"]),
    ("local-only mode keeps the job local",
     "resources: {accelerators: {A100: 1, RTX4090: 1}}\nestimate: {hours: 1}\n", (), None,
     {"mode": "local"}, OFFERS,
     ("exploratory", "local", LOCAL_GPU), ["local-only mode keeps every job on this machine"]),
    ("local-only mode with a GPU this machine lacks: refusal",
     JOB, (), None, {"mode": "local"}, OFFERS,
     ("exploratory", None, None), ['set mode = "hybrid"']),
    ("a CPU job in local-only mode",
     "estimate: {hours: 1}\nscaling: {use_gpu: false}\n", (), None, {"mode": "local", "clouds": []},
     OFFERS, ("exploratory", "local", LOCAL_CPU), ["local-only mode"]),
    ("placement.allow without cloud: cheapest allowed owned option",
     JOB + "placement: {allow: [onprem, local]}\n", (), None, {}, OFFERS,
     ("exploratory", "onprem", ONPREM), ["placement.allow excludes cloud"]),
    ("placement.allow cloud only, with no cloud GPU: refusal names the change",
     JOB + "placement: {allow: [cloud]}\n", (), None, {}, [ONPREM, LOCAL_CPU],
     ("exploratory", None, None), ["add 'onprem' to placement.allow"]),
    ("a GPU 3x faster at 2x the price wins on cost per job",
     "resources: {accelerators: {A100: 1, H100: 1}}\nestimate: {hours: 3, gpu: A100}\n", (), None,
     {"gpu_speeds": {"A100": 1 / 3, "H100": 1.0}},
     [Offer("cloud", "A100", 1, 1.0, cloud="c", region="r"),
      Offer("cloud", "H100", 1, 2.0, cloud="c", region="r")],
     ("exploratory", "cloud", Offer("cloud", "H100", 1, 2.0, cloud="c", region="r")), ["H100x1"]),
    ("resources.cloud pins the cloud",
     "resources: {accelerators: 'A100:1', cloud: lambda}\nestimate: {hours: 1}\n", (), None, {},
     OFFERS, ("exploratory", "cloud", LAMBDA), ["lambda/us-east-1"]),
    ("cpus beyond every cloud offer fall back to on-prem",
     "resources: {accelerators: 'A100:1', cpus: 32+}\nestimate: {hours: 1}\n", (), None, {}, OFFERS,
     ("exploratory", "onprem", ONPREM), ["30 CPUs < 32"]),
    ("a GPU nobody offers",
     "resources: {accelerators: 'H200:8'}\n", (), None, {}, OFFERS,
     ("exploratory", None, None), ["no offer has H200:8", "offered: A100x1"]),
    ("a budget in the user's currency",
     JOB + CKPT + "budget: {max_cost: 1000}\n", (), None, {"currency": "KRW", "currency_rate": 1400},
     OFFERS, ("exploratory", "onprem", ONPREM), ["KRW", "budget.max_cost 1,000 KRW"]),
]


@pytest.mark.parametrize("name,job,history,capacity,settings,offers,expected,fragments", CASES,
                         ids=[c[0] for c in CASES])
def test_policy(name, job, history, capacity, settings, offers, expected, fragments):
    d = plan(job, history, capacity, offers, **settings)
    kind, target, offer = expected
    assert (d.kind, d.target) == (kind, target), d.reasons
    if offer is None:
        assert d.choice is None and d.refusal
    else:
        assert d.choice.offer == offer
        assert all(a.est_cost >= d.choice.est_cost for a in d.alternatives
                   if a.excluded is None and a.offer.target == target)
    text = " | ".join(d.reasons + tuple(a.excluded or "" for a in d.alternatives))
    for f in fragments:
        assert f in text, f"{f!r} not in {text!r}"


def test_steady_on_prem_that_costs_more_in_full_is_decided_by_marginal_cost():
    pricey = OwnedGpus(gpu="A100", count=1, purchase_price=60000, watts=400)
    d = plan(JOB, runs(3), offers=[RUNPOD, onprem_offer(pricey, 0.15)], onprem=[pricey])
    assert d.target == "onprem" and d.decided_by == "marginal"
    assert any("already paid for" in r for r in d.reasons)
    assert d.choice.marginal_cost < RUNPOD.price_per_hour < d.choice.est_cost


def test_every_alternative_is_priced_and_ranked():
    d = plan(JOB + CKPT)
    costs = [a.est_cost for a in d.alternatives]
    assert costs == sorted(costs)
    assert {a.offer for a in d.alternatives} == {LAMBDA, RUNPOD, RUNPOD_SPOT, ONPREM}
    assert any("1 offers of other GPU models" in n or "2 offers of other" in n for n in d.notes)
    data = d.to_dict()
    assert set(data) >= {"kind", "target", "reasons", "estimate", "choice", "alternatives"}
    assert set(data["alternatives"][0]) >= {"target", "cloud", "region", "gpu", "count", "spot",
                                            "price_per_hour", "est_hours", "est_cost", "excluded"}


def test_ties_break_the_same_way_whatever_the_offer_order():
    twins = [Offer("cloud", "A100", 1, 1.0, cloud=c, region=r) for c in ("b", "a") for r in ("y", "x")]
    spec = load_spec_text("name: t\nrun: x\n" + JOB)
    s = Settings(clouds=["a", "b"])
    kind = classify(spec, FP, [], NOW, s, False, 1.0)
    picks = set()
    for seed in range(5):
        shuffled = twins[:]
        random.Random(seed).shuffle(shuffled)
        picks.add(decide(spec, kind, shuffled, None, s).choice.offer)
    assert picks == {Offer("cloud", "A100", 1, 1.0, cloud="a", region="x")}


def test_an_index_is_reusable_across_jobs():
    index = OfferIndex(OFFERS)
    s = Settings(**HYBRID)
    for job in (JOB, JOB + CKPT):
        spec = load_spec_text("name: t\nrun: x\n" + job)
        d = decide(spec, classify(spec, FP, [], NOW, s, False, 1.0), index, None, s)
        assert d.target == "cloud"
