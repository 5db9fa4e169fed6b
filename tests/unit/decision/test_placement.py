"""The placement policy: a table of jobs, offers and settings, each with the choice expected."""

from __future__ import annotations

import math
import random

import pytest

from orchestrator.decision import Capacity, Offer, OfferIndex, PastRun, classify, decide
from orchestrator.decision.facts import Facts, decide_on
from orchestrator.decision.models import Reservation
from orchestrator.decision.pricing import local_offer, onprem_offer
from orchestrator.settings import LocalMachine, OwnedGpus, Settings
from orchestrator.spec import load_spec_text

NOW = 1_700_000_000.0
FP = "fp"


pytestmark = pytest.mark.usefixtures("no_orch_env")  # placement reads the defaults


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
    """`n` successful one-hour runs, one a day: a recurring, steady job."""
    return [PastRun(FP, "SUCCEEDED", NOW - 86400 * (i + 1), duration_s=3600, gpu="A100")
            for i in range(n)]


def plan(extra: str = "", history=(), capacity=None, offers=OFFERS, **settings):
    spec = load_spec_text("name: t\nrun: python train.py\n" + extra)
    s = Settings(**{**HYBRID, **settings})
    facts = Facts(offers=list(offers), capacity=capacity, history=list(history), spent_this_month=0.0)
    return decide_on(spec, s, facts, fingerprint=FP, now=NOW)


BUSY = Capacity(onprem_free={"A100": 0}, wait_minutes=120, source="test")
SOON = Capacity(onprem_free={"A100": 0}, wait_minutes=30, source="test")
NOW_ISH = Capacity(onprem_free={"A100": 0}, wait_minutes=2, source="test")
FREE = Capacity(onprem_free={"A100": 4}, wait_minutes=0, source="test")


def due(in_hours: float, gpus: float = 4, cloud_cost=None, slack: float = 0.0) -> Capacity:
    """The owned GPUs free now, with a cron schedule due on them in `in_hours`."""
    return Capacity(onprem_free={"A100": 4}, wait_minutes=0, source="test", reservations=(
        Reservation(in_hours, gpus, "A100", "cron schedule 'weekly'", cloud_cost, slack),))


# Owned A100s bought dearer: 60,000 USD / (3 y x 8766 h x 60 %) / 4 + 0.06 = 1.01 USD/GPU-h
# in full, more than a spot hour (0.77 USD per 1-hour job with start-up); its power is 0.06.
PRICEY = OwnedGpus(gpu="A100", count=4, purchase_price=60000, watts=400)
PRICEY_OFFERS = [LAMBDA, RUNPOD, RUNPOD_SPOT, onprem_offer(PRICEY, 0.15)]
H100 = Offer("cloud", "H100", 1, 2.0, cloud="c", region="r")
A100 = Offer("cloud", "A100", 1, 1.0, cloud="c", region="r")
FAST = "resources: {accelerators: {A100: 1, H100: 1}}\nestimate: {hours: 3, gpu: A100}\n"
FAST_SPEEDS = {"gpu_speeds": {"A100": 1 / 3, "H100": 1.0}}
STEADY = "schedule: {kind: steady}\n"

# Per 1-hour A100 job: on-prem 0.69 USD in full (0.63 amortized + 0.06 power, the power
# alone being what running it changes), runpod spot 0.70 x 1.1 h = 0.77, runpod on-demand
# 1.20 x 1.1 = 1.32, lambda 1.30 x 1.1 = 1.43.
# id, job yaml, history, capacity, settings, offers,
#   expected (kind, target, offer or None), reason fragments (refusal text when no target)
CASES = [
    # -- exploratory: rents the cheapest GPU per job, or backfills idle owned GPUs
    ("exploratory backfills idle owned GPUs with nothing due",
     JOB + CKPT, (), FREE, {}, OFFERS,
     ("exploratory", "onprem", ONPREM),
     ["exploratory backfill: on-prem A100x1 is idle now and stays free for the job's 1 h",
      "0.06 USD of power, the marginal cost that decided, against runpod/CA A100x1 spot at "
      "0.78 USD to rent",
      "full cost for the record: 0.69 USD per job = 0.63 USD amortized purchase + 0.06 USD power"]),
    ("exploratory with capacity unchecked: owned assumed free",
     JOB, (), None, {}, OFFERS,
     ("exploratory", "onprem", ONPREM), ["exploratory backfill", "against runpod/CA A100x1 at "
                                         "1.32 USD to rent"]),
    ("exploratory, owned busy, checkpoints: cloud spot",
     JOB + CKPT, (), BUSY, {}, OFFERS,
     ("exploratory", "cloud", RUNPOD_SPOT),
     ["exploratory work rents the cheapest rentable GPU per job: runpod/CA A100x1 spot at "
      "0.78 USD to rent vs runpod/CA A100x1 1.32 USD",
      "not on owned GPUs: on-prem busy: wait 120 min > the 6 min exploratory work waits for "
      "owned GPUs (exploratory_wait_minutes)",
      "spot: the job checkpoints"]),
    ("exploratory, owned busy, no checkpoints: on-demand",
     JOB, (), BUSY, {}, OFFERS,
     ("exploratory", "cloud", RUNPOD),
     ["runpod/CA A100x1 at 1.32 USD to rent", "on-demand: spot would cost 0.77 USD",
      "spot needs checkpoint.storage"]),
    ("exploratory does not queue 30 min for owned GPUs",
     JOB + CKPT, (), SOON, {}, OFFERS,
     ("exploratory", "cloud", RUNPOD_SPOT), ["on-prem busy: wait 30 min > the 6 min exploratory"]),
    ("exploratory takes owned GPUs that free within the cloud's start-up",
     JOB + CKPT, (), NOW_ISH, {}, OFFERS,
     ("exploratory", "onprem", ONPREM),
     ["exploratory backfill: on-prem A100x1 frees in 2 min, within the 6 min exploratory work "
      "waits (renting takes the cloud's start-up anyway), and stays free"]),
    ("exploratory_wait_minutes 0: exploratory never waits for owned GPUs",
     JOB + CKPT, (), NOW_ISH, {"exploratory_wait_minutes": 0}, OFFERS,
     ("exploratory", "cloud", RUNPOD_SPOT), ["on-prem busy: wait 2 min > the 0 min exploratory"]),
    ("exploratory that would make a cron run late pays for renting it: rents",
     JOB + CKPT, (), due(0.5), {}, OFFERS,
     ("exploratory", "cloud", RUNPOD_SPOT),
     ["on-prem A100x1 is idle but ranks behind it: 0.06 USD of power + 0.78 USD for the work it "
      "would push out (cron schedule 'weekly')"]),
    ("exploratory takes the owned GPUs where renting for the cron run it pushes out costs less",
     JOB + CKPT, (), due(0.5, cloud_cost=0.1), {}, OFFERS,
     ("exploratory", "onprem", ONPREM),
     ["exploratory backfill: on-prem A100x1 is idle now and stays free for the job's 1 h (it "
      "would make cron schedule 'weekly' late, priced as renting for it), so it runs there for "
      "0.06 USD of power + 0.10 USD for the work it would push out"]),
    ("exploratory before a cron run with the slack to wait for it: backfills",
     JOB + CKPT, (), due(0.5, slack=3.0), {}, OFFERS,
     ("exploratory", "onprem", ONPREM), ["exploratory backfill"]),
    ("a cron run's slack is judged by the job's estimate with its uncertainty (2x as written)",
     JOB + CKPT, (), due(0.5, slack=1.0), {}, OFFERS,
     ("exploratory", "cloud", RUNPOD_SPOT), ["for the work it would push out"]),
    ("exploratory never pushes out a cron run that may not rent",
     JOB + CKPT, (), due(0.5, cloud_cost=math.inf), {}, OFFERS,
     ("exploratory", "cloud", RUNPOD_SPOT),
     ["not on owned GPUs: cron schedule 'weekly' is due on these GPUs in 0.5 h with 0 h of slack, "
      "before this job may end (1 h estimated), and no cloud offer could take it"]),
    ("no estimate at all: 3x the default hours for the cron run's slack",
     "resources: {accelerators: 'A100:1'}\n" + CKPT, (), due(0.5, slack=2.0), {}, OFFERS,
     ("exploratory", "cloud", RUNPOD_SPOT), ["for the work it would push out"]),
    ("exploratory with a cron job due after it would end: backfills",
     JOB + CKPT, (), due(2.0), {}, OFFERS,
     ("exploratory", "onprem", ONPREM), ["exploratory backfill"]),
    ("exploratory beside a due cron job that leaves room for it: backfills",
     JOB + CKPT, (), due(0.5, gpus=2), {}, OFFERS,
     ("exploratory", "onprem", ONPREM), ["exploratory backfill"]),
    ("exploratory_backfill off: exploratory always rents",
     JOB + CKPT, (), FREE, {"exploratory_backfill": False}, OFFERS,
     ("exploratory", "cloud", RUNPOD_SPOT),
     ["not on owned GPUs: exploratory_backfill is off: exploratory work rents"]),
    ("nowhere to rent: exploratory uses owned GPUs within max_wait_minutes",
     JOB + "placement: {allow: [onprem]}\n", (), SOON, {}, OFFERS,
     ("exploratory", "onprem", ONPREM),
     ["no rentable GPU can take it (placement.allow excludes cloud), so it runs on owned GPUs: "
      "on-prem A100x1 can start in about 30 min, 0.06 USD of power"]),
    ("exploratory, owned busy and no cloud allowed: refused, not queued",
     JOB + "placement: {allow: [onprem]}\n", (), BUSY, {}, OFFERS,
     ("exploratory", None, None), ["nearest option, on-prem A100x1 at 0.69 USD per job",
                                   "raise max_wait_minutes to 120, or set schedule.kind: steady"]),
    # Issue 33: spot by its expected cost, not by length. 30 h at 0.05 preemptions an hour is
    # 1.5 preemptions of 15 min redone + 6 min start-up: 30.53 h x 0.70 beats 30 h x 1.20.
    ("a long checkpointing job, owned busy: spot, priced with its expected preemptions",
     "resources: {accelerators: 'A100:1'}\nestimate: {hours: 30}\n" + CKPT, (), BUSY, {}, OFFERS,
     ("exploratory", "cloud", RUNPOD_SPOT),
     ["on spot 1.5 expected preemptions, each 21 min more",
      "with its expected preemptions spot still costs less than on-demand"]),
    ("no turnaround value: the idle owned A100 beats a 3x faster rented H100",
     FAST, (), FREE, FAST_SPEEDS, [ONPREM, H100],
     ("exploratory", "onprem", ONPREM),
     ["0.18 USD of power, the marginal cost that decided, against c/r H100x1 at 2.20 USD"]),
    ("a turnaround value large enough: the 3x faster rented H100 wins",
     FAST, (), FREE, {**FAST_SPEEDS, "turnaround_value_per_hour": 5}, [ONPREM, H100],
     ("exploratory", "cloud", H100),
     ["on-prem A100x1 is idle but ranks behind it", "ranked by cost + 5.00 USD per hour until done: c/r H100x1 7.70 USD "
      "vs on-prem A100x1 15.18 USD"]),
    # -- steady: runs on owned GPUs, waits while its deadline allows, then bursts
    ("the same job on K days: steady, on-prem at the power it costs",
     JOB + CKPT, runs(3), None, {}, OFFERS,
     ("steady", "onprem", ONPREM),
     ["steady work runs on owned GPUs: on-prem A100x1 can start now, 0.06 USD of power, the "
      "marginal cost that decided, against runpod/CA A100x1 spot at 0.78 USD to rent"]),
    ("a cron job: on-prem",
     JOB + "schedule: {cron: '0 3 * * *'}\n", (), None, {}, OFFERS,
     ("steady", "onprem", ONPREM), ["steady work runs on owned GPUs"]),
    ("steady stays on idle owned GPUs even when rented spot is cheaper in full",
     JOB + CKPT, runs(3), FREE, {"onprem": [PRICEY]}, PRICEY_OFFERS,
     ("steady", "onprem", PRICEY_OFFERS[3]),
     ["0.06 USD of power, the marginal cost that decided, against runpod/CA A100x1 spot at "
      "0.78 USD to rent",
      "full cost for the record: 1.01 USD per job = 0.95 USD amortized purchase + 0.06 USD power"]),
    ("steady with on-prem busy but within the max wait: waits on-prem",
     JOB, runs(3), SOON, {}, OFFERS,
     ("steady", "onprem", ONPREM), ["on-prem A100x1 can start in about 30 min"]),
    ("steady with on-prem busy beyond the max wait: cloud burst",
     JOB, runs(3), BUSY, {}, OFFERS,
     ("steady", "cloud", RUNPOD),
     ["cloud burst: steady work waits for owned GPUs only while it can: on-prem busy: wait "
      "120 min > the 60 min max_wait_minutes (60) allows; so it runs on the cheapest rentable "
      "GPU per job: runpod/CA A100x1 at 1.32 USD to rent"]),
    ("a longer max wait keeps it on-prem",
     JOB, runs(3), BUSY, {"max_wait_minutes": 180}, OFFERS,
     ("steady", "onprem", ONPREM), ["on-prem A100x1 can start in about 120 min"]),
    ("steady with a deadline that leaves room to wait: waits on-prem",
     JOB + "schedule: {kind: steady, deadline_hours: 8}\n", (), BUSY, {}, OFFERS,
     ("steady", "onprem", ONPREM), ["steady work runs on owned GPUs: on-prem A100x1 can start in "
                                    "about 120 min"]),
    ("steady whose wait would miss its deadline: bursts",
     JOB + "schedule: {kind: steady, deadline_hours: 2}\n", (), BUSY, {"max_wait_minutes": 600},
     OFFERS, ("steady", "cloud", RUNPOD),
     ["cloud burst", "wait 120 min > the 60 min its deadline (2 h, 60 min of slack) allows"]),
    ("steady, owned busy and no cloud allowed: queued on-prem",
     JOB + "placement: {allow: [onprem]}\n", runs(3), BUSY, {}, OFFERS,
     ("steady", "onprem", ONPREM), ["queued on-prem: the cluster is busy for about 120 min",
                                    "placement.allow excludes cloud"]),
    ("steady that would push out a due cron job worth more: rents",
     JOB + CKPT + STEADY, (), due(0.5, cloud_cost=5.0), {}, OFFERS,
     ("steady", "cloud", RUNPOD_SPOT),
     ["it costs less than on-prem A100x1 at 0.06 USD of power + 5.00 USD for the work it would "
      "push out (cron schedule 'weekly')"]),
    # -- budgets, limits, modes, refusals
    ("a budget that excludes every offer, counted in cash",
     JOB + "budget: {max_cost: 0.01}\n", (), None, {}, OFFERS,
     ("exploratory", None, None), ["nothing fits", "raise budget.max_cost to at least 0.06 USD"]),
    ("max_cost in cash: owned GPUs fit where their full cost would not",
     JOB + CKPT + "budget: {max_cost: 0.5}\n", (), FREE, {}, OFFERS,
     ("exploratory", "onprem", ONPREM), ["0.78 USD cash > budget.max_cost 0.50 USD"]),
    ("max_cost with budget_basis full: nothing fits",
     JOB + CKPT + "budget: {max_cost: 0.5}\n", (), FREE, {"budget_basis": "full"}, OFFERS,
     ("exploratory", None, None), ["raise budget.max_cost to at least 0.69 USD"]),
    ("max_hourly rules out the H100, cheaper per job: the A100",
     FAST + "budget: {max_hourly: 1.5}\n", (), None, FAST_SPEEDS, [A100, H100],
     ("exploratory", "cloud", A100),
     ["2.00 USD/h > budget.max_hourly 1.50 USD", "c/r A100x1 at 3.10 USD to rent"]),
    ("max_hourly rules out every cloud offer: owned GPUs within the max wait",
     JOB + "budget: {max_hourly: 1.0}\n", (), BUSY, {"max_wait_minutes": 180}, OFFERS,
     ("exploratory", "onprem", ONPREM),
     ["1.20 USD/h > budget.max_hourly 1.00 USD",
      "no rentable GPU can take it (", "so it runs on owned GPUs: on-prem A100x1 can start in "
      "about 120 min"]),
    ("a budget in the user's currency",
     JOB + CKPT + "budget: {max_cost: 1500}\n", (), BUSY, {"currency": "KRW", "currency_rate": 1400},
     OFFERS, ("exploratory", "cloud", RUNPOD_SPOT),
     ["runpod/CA A100x1 spot at 1,095 KRW to rent", "1,848 KRW cash > budget.max_cost 1,500 KRW"]),
    ("local-only mode keeps the job local",
     "resources: {accelerators: {A100: 1, RTX4090: 1}}\nestimate: {hours: 1}\n", (), None,
     {"mode": "local"}, OFFERS,
     ("exploratory", "local", LOCAL_GPU), ["local-only mode keeps every job on this machine"]),
    ("local-only mode keeps a steady job local too",
     "resources: {accelerators: {A100: 1, RTX4090: 1}}\nestimate: {hours: 1}\n" + STEADY, (),
     None, {"mode": "local"}, OFFERS,
     ("steady", "local", LOCAL_GPU), ["local-only mode keeps every job on this machine"]),
    ("local-only mode with a GPU this machine lacks: refusal",
     JOB, (), None, {"mode": "local"}, OFFERS,
     ("exploratory", None, None), ['set mode = "hybrid"']),
    ("a CPU job in local-only mode",
     "estimate: {hours: 1}\nscaling: {use_gpu: false}\n", (), None, {"mode": "local", "clouds": []},
     OFFERS, ("exploratory", "local", LOCAL_CPU), ["local-only mode"]),
    ("placement.allow without cloud: the cheapest allowed owned option",
     JOB + "placement: {allow: [onprem, local]}\n", (), None, {}, OFFERS,
     ("exploratory", "onprem", ONPREM), ["no rentable GPU can take it (placement.allow excludes "
                                         "cloud)"]),
    ("placement.allow cloud only, with no cloud GPU: refusal names the change",
     JOB + "placement: {allow: [cloud]}\n", (), None, {}, [ONPREM, LOCAL_CPU],
     ("exploratory", None, None), ["add 'onprem' to placement.allow"]),
    ("a GPU 3x faster at 2x the price wins on cost per job",
     FAST, (), None, FAST_SPEEDS, [A100, H100],
     ("exploratory", "cloud", H100), ["c/r H100x1 at 2.20 USD to rent vs c/r A100x1 3.10 USD"]),
    ("resources.cloud pins the cloud",
     "resources: {accelerators: 'A100:1', cloud: lambda}\nestimate: {hours: 1}\n", (), None, {},
     OFFERS, ("exploratory", "cloud", LAMBDA),
     ["lambda/us-east-1 A100x1 at 1.43 USD to rent", "the job asks for cloud lambda"]),
    ("cpus beyond every cloud offer: owned GPUs",
     "resources: {accelerators: 'A100:1', cpus: 32+}\nestimate: {hours: 1}\n", (), None, {}, OFFERS,
     ("exploratory", "onprem", ONPREM), ["16 CPUs < 32", "30 CPUs < 32"]),
    ("a GPU nobody offers",
     "resources: {accelerators: 'H200:8'}\n", (), None, {}, OFFERS,
     ("exploratory", None, None), ["no offer has H200:8", "offered: A100x1"]),
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
        assert all(a.score >= d.choice.score for a in d.alternatives if a.excluded is None)
    text = " | ".join(d.reasons + tuple(a.excluded or "" for a in d.alternatives))
    for f in fragments:
        assert f in text, f"{f!r} not in {text!r}"


def test_owned_hardware_shows_its_full_cost_and_decides_on_power():
    # Power (0.06 USD per job) decides against spot's 0.78 USD; the full cost (1.01 USD,
    # above spot) is priced and shown, never hidden.
    d = plan(JOB + CKPT, runs(3), FREE, PRICEY_OFFERS, onprem=[PRICEY])
    owned = next(a for a in d.alternatives if a.offer.target == "onprem")
    assert owned.power_cost == pytest.approx(0.06) and owned.marginal_cost == pytest.approx(0.06)
    assert owned.est_cost == pytest.approx(1.0106, abs=1e-4) and owned.cash_cost == owned.power_cost
    assert (d.target, d.decided_by) == ("onprem", "marginal")
    data = d.to_dict()
    assert data["estimate"]["cost_usd"] == pytest.approx(1.0106, abs=1e-4)
    assert data["estimate"]["cash_usd"] == pytest.approx(0.06)
    assert data["choice"]["power_cost"] == pytest.approx(0.06)
    assert data["choice"]["amortized_per_hour_usd"] == pytest.approx(0.9506, abs=1e-4)
    assert [r for r in d.reasons if r.startswith("full cost")] == [
        "full cost for the record: 1.01 USD per job = 0.95 USD amortized purchase + 0.06 USD "
        "power; the power decided, as it is what running the job changes in cash"]


def test_the_congestion_charge_defaults_to_renting_what_is_pushed_out():
    # A due cron job with no price of its own is priced as renting this job's cheapest
    # cloud option: 0.78 USD (spot, with its expected preemptions), on top of 0.06 USD of power.
    d = plan(JOB + CKPT + STEADY, (), due(0.5))
    owned = next(a for a in d.alternatives if a.offer.target == "onprem")
    assert owned.congestion == pytest.approx(0.78225) and owned.displaces == "cron schedule 'weekly'"
    assert owned.marginal_cost == pytest.approx(0.84225)
    assert d.choice.offer == RUNPOD_SPOT, d.reasons
    # Room left for the cron job: no charge, and steady work stays on its owned GPUs.
    d = plan(JOB + CKPT + STEADY, (), due(0.5, gpus=3))
    assert d.choice.offer == ONPREM and d.choice.congestion == 0


def test_ties_in_cost_go_to_owned_hardware():
    # No start-up billed: a cloud hour at exactly the owned power's price costs the same per job.
    owned = Offer("onprem", "A100", 1, 1.0, amortized_per_hour=0.0, power_per_hour=1.0, pooled=True)
    twin = Offer("cloud", "A100", 1, 1.0, cloud="c", region="r")
    for offers in ([owned, twin], [twin, owned]):
        d = plan(JOB, (), FREE, offers, cloud_startup_minutes=0)
        assert d.alternatives[0].score == d.alternatives[1].score == 1.0
        assert d.choice.offer == owned, d.reasons


def test_an_unpriced_cluster_is_named_once():
    unpriced = Offer("onprem", "A100", 2, 0.09, power_per_hour=0.09, pooled=True,
                     unpriced="the on-prem cluster's full cost is unknown: add [[onprem]] ...")
    d = plan(JOB + STEADY, (), FREE, [unpriced, RUNPOD])
    assert d.target == "onprem"
    assert d.notes.count(unpriced.unpriced) == 1
    assert any("counts power only" in r for r in d.reasons)
    assert d.to_dict()["choice"]["full_cost_known"] is False


def test_every_alternative_is_priced_and_ranked():
    d = plan(JOB + CKPT)
    scores = [a.score for a in d.alternatives]
    assert scores == sorted(scores)
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
    picks = []
    for job, capacity in ((JOB, BUSY), (JOB + CKPT, BUSY), (JOB + CKPT, FREE)):
        spec = load_spec_text("name: t\nrun: x\n" + job)
        d = decide(spec, classify(spec, FP, [], NOW, s, False, 1.0), index, capacity, s)
        picks.append(d.choice.offer)
    assert picks == [RUNPOD, RUNPOD_SPOT, ONPREM]


def test_an_auto_gpu_train_job_is_priced_on_a_gpu_per_worker():
    """Ray Train's workers use GPUs (`use_gpu: auto`) only with one each: a two-worker job
    without `accelerators` is priced on two-GPU offers and on CPUs, never on one GPU,
    where its workers would run on the CPUs of a GPU machine paid for."""
    two = Offer("cloud", "A100", 2, 2.1, cloud="runpod", region="CA", cpus=32)
    cpu = Offer("cloud", None, 0, 0.4, cloud="runpod", region="CA", cpus=16)
    spec = load_spec_text("name: t\ntrain: {job: image-classification}\n"
                          "scaling: {num_workers: 2}\nestimate: {hours: 1}\n")
    s = Settings(clouds=["runpod"], mode="hybrid")
    d = decide(spec, classify(spec, FP, [], NOW, s, False, 1.0), [RUNPOD, two, cpu], None, s)
    priced = {(a.offer.gpu, a.offer.count) for a in d.alternatives}
    assert priced == {("A100", 2), (None, 0)}, d.alternatives
    one = load_spec_text("name: t\ntrain: {job: image-classification}\nestimate: {hours: 1}\n")
    d1 = decide(one, classify(one, FP, [], NOW, s, False, 1.0), [RUNPOD, two, cpu], None, s)
    assert ("A100", 1) in {(a.offer.gpu, a.offer.count) for a in d1.alternatives}


def test_gpu_workers_that_cannot_all_have_a_gpu_are_refused_not_left_waiting():
    spec = load_spec_text("name: t\ntrain: {job: image-classification}\n"
                          "scaling: {num_workers: 4, use_gpu: true}\n"
                          "resources: {accelerators: A100:1}\nestimate: {hours: 1}\n")
    s = Settings(clouds=["lambda", "runpod"], mode="hybrid")
    d = decide(spec, classify(spec, FP, [], NOW, s, False, 1.0), [LAMBDA, RUNPOD], None, s)
    assert d.choice is None and d.refusal
    assert all(a.excluded == "4 workers with use_gpu: true need 4 GPUs, it has 1"
               for a in d.alternatives), d.alternatives
    owned = OwnedGpus(gpu="A100", count=4, purchase_price=40000)  # a pool with 4: it fits
    d = decide(spec, classify(spec, FP, [], NOW, s, False, 1.0),
               [LAMBDA, onprem_offer(owned, 0.15)], None, Settings(onprem=[owned], mode="hybrid"))
    assert d.choice is not None and d.choice.offer.target == "onprem"


@pytest.mark.parametrize("rate, spot_wins", [(0.0, True), (0.05, True), (1.0, True), (3.0, False)])
def test_a_long_checkpointing_job_takes_spot_while_its_expected_cost_is_lower(rate, spot_wins):
    """Issue 33, part 4: no length ban on spot. A 30 h job that checkpoints pays, on spot,
    0.70/h for 30 x (1 + rate x 21 min) hours; on-demand 1.20/h for 30. At 3 preemptions an
    hour spot's expected 2.05x the hours cost more than on-demand, and on-demand is chosen."""
    long_job = "resources: {accelerators: 'A100:1'}\nestimate: {hours: 30}\n" + CKPT
    d = plan(long_job, (), BUSY, spot_preemptions_per_hour=rate)
    assert d.choice.offer == (RUNPOD_SPOT if spot_wins else RUNPOD), d.reasons
    spot = next(a for a in d.alternatives if a.offer == RUNPOD_SPOT)
    assert spot.est_hours == pytest.approx(30 * (1 + rate * 21 / 60))
    assert spot.est_cost == pytest.approx(0.70 * (30 * (1 + rate * 21 / 60) + 0.1))
    assert not spot.excluded or not spot_wins


EIGHT = OwnedGpus(gpu="A100", count=8, purchase_price=80000, watts=400)
FOUR_OR_EIGHT = ("resources: {accelerators: ['A100:4', 'A100:8']}\n"
                 "estimate: {hours: 8, gpu: A100}\n" + CKPT + STEADY)


@pytest.mark.parametrize("deadline, used", [(None, 4), (24, 4), (6, 8)])
def test_owned_gpus_beyond_what_the_job_needs_are_left_free(deadline, used):
    """A data-parallel job that may take 4 or 8 of the team's 8 GPUs costs the same power
    either way (32 GPU-hours): it takes 4 and leaves 4 for the next job, unless 8 h on 4
    would end after its deadline; then 4 h on 8."""
    extra = "" if deadline is None else f"schedule: {{kind: steady, deadline_hours: {deadline}}}\n"
    free = Capacity(onprem_free={"A100": 8}, wait_minutes=0, source="test")
    owned = onprem_offer(EIGHT, 0.15)
    d = plan(FOUR_OR_EIGHT.replace(STEADY, extra or STEADY), (), free, [owned, LAMBDA],
             onprem=[EIGHT])
    assert (d.choice.offer, d.choice.used) == (owned, used), d.reasons
    rows = {a.used: a for a in d.alternatives if a.offer == owned}
    assert rows[4].power_cost == pytest.approx(rows[8].power_cost)
    if deadline == 6:
        assert rows[4].excluded == "8 h on 4 GPUs ends after its deadline (6 h)"


def test_an_instance_with_more_gpus_than_the_job_asks_for_is_priced_as_paid():
    """Issue 33, part 4: no cloud has 4 A100s, the job allows 8 (data-parallel work splits
    over them): the 8-GPU instance bills all 8 for the 4 h the work takes on them, plus its
    start-up, and is never priced as half an instance."""
    x8 = Offer("cloud", "A100", 8, 10.0, cloud="aws", region="r", instance_type="p4d")
    d = plan(FOUR_OR_EIGHT, (), BUSY, [x8, LAMBDA], onprem=[])
    row = next(a for a in d.alternatives if a.offer == x8)
    assert (row.used, row.est_hours) == (8, pytest.approx(4.0))
    assert row.est_cost == pytest.approx(10.0 * (4.0 + 0.1))
    assert d.choice.offer == x8, d.reasons


def test_a_job_that_outlived_its_estimate_is_not_about_to_end():
    from orchestrator.decision.capacity import expected_remaining_s

    h = 3600.0
    assert expected_remaining_s(h, 0.0, 1.0) == h  # within its estimate: the estimate's rest
    assert expected_remaining_s(h, 0.5 * h, 3.0) == pytest.approx(0.5 * h)
    assert expected_remaining_s(h, 1.5 * h, 1.0) == 60.0  # past it: never "any moment now"
    # 1 h assumed (no estimate: 3x), run for 2 h: not "any moment now", another 2 h.
    assert expected_remaining_s(h, 2 * h, 3.0) == pytest.approx(2 * h)
    assert expected_remaining_s(h, 4 * h, 3.0) > expected_remaining_s(h, 2 * h, 3.0)


def test_exploratory_work_waits_for_owned_gpus_only_while_its_deadline_allows():
    # Owned A100s free in 2 min; the job has no estimate (1 h assumed, up to 3 h) and is due
    # in 2 h: waiting could make it late, so it rents; due in 4 h, it waits.
    bare = "resources: {accelerators: 'A100:1'}\n" + CKPT
    late = plan(bare + "schedule: {deadline_hours: 2}\n", (), NOW_ISH)
    assert late.choice.offer == RUNPOD_SPOT
    owned = next(a for a in late.alternatives if a.offer.target == "onprem")
    assert "(up to 3 h by its estimate's uncertainty) may end past its deadline (2 h)" in owned.excluded
    assert plan(bare + "schedule: {deadline_hours: 4}\n", (), NOW_ISH).choice.offer == ONPREM
