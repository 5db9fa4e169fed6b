"""Buy-vs-rent advice: break-even on hand-checked numbers, utilization, what-ifs, what owned
GPUs really cost per held hour, the CLI."""

from __future__ import annotations

import json
import os

import pytest

from orchestrator.decision.advise import DAYS_PER_MONTH, WhatIf, advise
from orchestrator.decision.models import Offer
from orchestrator.decision.utilization import owned_use
from orchestrator.records.cost import CostEntry
from orchestrator.settings import LocalMachine, OwnedGpus, Settings
from orchestrator.store import Store
from tests.conftest import job_row, run_json, run_orch, store_at

DAY = 86400.0
NOW = 1_800_000_000.0
MONTH_S = DAYS_PER_MONTH * DAY  # the first job is exactly one month old: months = 1.0

# RTX4090 at 0.25 of an H100, so a pair is half an H100.
CANDIDATE = {"gpu": "RTX4090", "count": 2, "purchase_price": 5000, "watts": 400,
             "lifetime_years": 3}
OFFERS = [
    Offer(target="cloud", gpu="RTX4090", count=2, price_per_hour=1.50, cloud="c1", region="r1"),
    Offer(target="cloud", gpu="RTX4090", count=2, price_per_hour=0.50, cloud="c1", region="r1",
          spot=True),  # spot is never the rent steady work avoids
    Offer(target="cloud", gpu="RTX4090", count=1, price_per_hour=0.60, cloud="c2", region="r2"),
    Offer(target="cloud", gpu="RTX4090", count=2, price_per_hour=1.80, cloud="c3", region="r3"),
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("ORCH_"):
            monkeypatch.delenv(k)


def settings(**kw) -> Settings:
    base = dict(currency="KRW", currency_rate=1000, electricity_price=0.25,
                gpu_speeds={"RTX4090": 0.25}, candidates=[CANDIDATE],
                onprem=[{"gpu": "RTX4090", "count": 4, "purchase_price": 12000}])
    base.update(kw)
    return Settings(**base)


def record(kind, target, gpu, count, hours, *, end, price_krw=None, ledger_usd=None,
           created=None, status="SUCCEEDED") -> dict:
    """A store record as `Store.list()` returns it; money in the decision is in KRW at 1000/USD."""
    choice = {"target": target, "gpu": gpu, "count": count, "cloud": "c1" if target == "cloud" else None,
              "price_per_hour": price_krw}
    # billed hours include six minutes of start-up: cost, not work
    info = ({"ledger": {"cost_usd": ledger_usd, "billed_hours": hours + 0.1, "recoveries": 0}}
            if ledger_usd is not None else {})
    start = end - hours * 3600
    return {"id": f"orch-{kind}-{target}-{end:.0f}", "name": "j", "status": status, "kind": kind,
            "target": target, "fingerprint": "fp", "created_at": start if created is None else created,
            "started_at": start, "finished_at": end, "metrics": {}, "info": info,
            "decision": {"kind": kind, "choice": choice,
                         "estimate": {"cost": 1000.0, "cost_usd": 1.0, "currency": "KRW"}}}


def history() -> list[dict]:
    return [
        # steady, cloud, 1 x H100 for 60 h; its ledger says 200 USD: 60 H100-hours
        record("steady", "cloud", "H100", 1, 60, end=NOW - 20 * DAY, ledger_usd=200.0,
               created=NOW - MONTH_S),
        # steady, on-prem, 2 x RTX4090 for 80 h at 800 KRW/h = 0.80 USD/h: 64 USD;
        # 160 GPU-hours x 0.25 = 40 H100-hours
        record("steady", "onprem", "RTX4090", 2, 80, end=NOW - 5 * DAY, price_krw=800.0),
        # exploratory, cloud, billed 10 USD; 5 H100-hours
        record("exploratory", "cloud", "H100", 1, 5, end=NOW - DAY, ledger_usd=10.0),
        # still running: counted when it finishes
        {**record("steady", "cloud", "H100", 1, 1, end=NOW), "status": "RUNNING", "finished_at": None},
    ]


def rows(recs: list[dict]) -> list:
    """The dict records as the store rows `advise` reads."""
    return [job_row(r) for r in recs]


def test_measured_work_cost_utilization_and_break_even():
    a = advise(rows(history()), settings(), OFFERS, NOW)
    assert a.months == pytest.approx(1.0) and a.history_days == pytest.approx(DAYS_PER_MONTH)
    assert a.running_jobs == 1
    # steady: 60 + 40 = 100 H100-hours in the month; 60 + 80 = 140 wall hours; 200 + 64 USD
    assert a.steady.jobs == 2
    assert a.steady.ref_gpu_hours == pytest.approx(100.0)
    assert a.steady.wall_hours == pytest.approx(140.0)
    assert a.steady.gpu_hours == pytest.approx(60 + 160)
    assert a.steady.cost_usd == pytest.approx(264.0)
    assert a.exploratory.ref_gpu_hours == pytest.approx(5.0)
    assert a.exploratory.cost_usd == pytest.approx(10.0)
    assert a.by_target["cloud"]["cost_usd"] == pytest.approx(210.0)
    assert a.by_target["cloud"]["steady_cost_usd"] == pytest.approx(200.0)
    assert a.by_target["onprem"]["cost_usd"] == pytest.approx(64.0)
    # utilization: 160 busy GPU-hours / (4 owned GPUs x 30.44 d x 24 h = 2922.24) = 0.05475
    assert a.owned["utilization"] == pytest.approx(160 / 2922.24)
    # what steady cloud work paid: 200 USD / 60 H100-hours
    assert a.paid_per_ref_hour_usd == pytest.approx(200 / 60)

    [c] = a.candidates
    # 100 H100-hours / (0.25 x 2 GPUs) = 200 h a month on the pair (under the 730 h cap);
    # rent avoided: 200 h x 1.50 USD/h (cheapest on-demand x2 offer; not spot, not 2 x 0.60)
    #   = 300 USD; power: 400 W x 2 = 0.8 kW x 200 h = 160 kWh x 0.25 USD = 40 USD;
    # net 260 USD a month; break-even 5000 / 260 = 19.23 months < 36 months lifetime: buy;
    # over the lifetime it saves 260 x 36 - 5000 = 4360 USD.
    assert c.hours_per_month == pytest.approx(200.0) and not c.capped
    assert c.rent_price_per_hour_usd == pytest.approx(1.50)
    assert c.rent_avoided_usd == pytest.approx(300.0)
    assert c.power_usd == pytest.approx(40.0)
    assert c.net_usd == pytest.approx(260.0)
    assert c.payback_months == pytest.approx(5000 / 260)
    assert c.lifetime_months == 36
    assert c.lifetime_saving_usd == pytest.approx(4360.0)
    assert c.verdict == "buy" and "19.2 of its 36 months" in c.reason
    # Second opinion: the 1-GPU offer rents an H100-hour for 0.60 / 0.25 = 2.40 USD, so the
    # same 100 H100-hours rent for 240 USD; against that: 5000 / (240 - 40) = 25 months.
    assert c.cheapest_rent["offer"] == "c2/r2 RTX4090 x1"
    assert c.cheapest_rent["per_ref_hour_usd"] == pytest.approx(2.40)
    assert c.cheapest_rent["rent_avoided_usd"] == pytest.approx(240.0)
    assert c.cheapest_rent["payback_months"] == pytest.approx(25.0)
    assert any("1 running jobs" in s for s in a.assumptions)
    assert a.missing == [] and a.what_if == {}


def test_rent_when_it_never_pays_back_or_only_after_its_lifetime():
    # rent 0.10 USD/h but power 0.8 kW x 0.25 USD = 0.20 USD/h: every hour owned costs more
    a = advise(rows(history()), settings(), OFFERS, NOW, what_if=WhatIf(rent_price=0.10))
    [c] = a.candidates
    assert c.net_usd == pytest.approx(200 * 0.10 - 40.0)
    assert c.payback_months is None and c.verdict == "rent" and "never" in c.reason
    # Pays back, but after its lifetime: 5000 / (200 x 1.0 - 40) = 31.25 < 36; at 0.9/h
    # 5000 / (180 - 40) = 35.7; at 0.85/h 5000 / (170 - 40) = 38.5 > 36: rent
    [c] = advise(rows(history()), settings(), OFFERS, NOW, what_if=WhatIf(rent_price=0.85)).candidates
    assert c.payback_months == pytest.approx(5000 / 130) and c.verdict == "rent"
    assert "after its 36-month lifetime" in c.reason
    # At 8000 USD: 8000 / 260 = 30.8 months against renting a pair, but the same work rents
    # for 240 USD on single GPUs: 8000 / (240 - 40) = 40 months > 36: rent.
    [c] = advise(rows(history()), settings(), OFFERS, NOW, what_if=WhatIf(prices={"RTX4090": 8000})).candidates
    assert c.payback_months == pytest.approx(8000 / 260)
    assert c.cheapest_rent["payback_months"] == pytest.approx(40.0)
    assert c.verdict == "rent" and "c2/r2 RTX4090 x1 rents the same work" in c.reason
    assert "pays back in 40.0 months" in c.reason


def test_capacity_cap_and_utilization_cap():
    # 1000 H100-hours / 0.5 = 2000 h needed, but a month holds 730: the rest stays rented.
    # rent avoided 730 x 1.5 = 1095; power 0.8 x 730 x 0.25 = 146; 5000 / 949 = 5.27 months
    [c] = advise(rows(history()), settings(), OFFERS, NOW, what_if=WhatIf(steady_hours=1000)).candidates
    assert c.hours_needed == pytest.approx(2000.0) and c.capped
    assert c.hours_per_month == pytest.approx(730.0)
    assert c.payback_months == pytest.approx(5000 / (1095 - 146))
    # at a 0.5 utilization cap: 365 h; 547.5 - 73 = 474.5 a month; 10.54 months
    a = advise(rows(history()), settings(), OFFERS, NOW,
               what_if=WhatIf(steady_hours=1000, utilization_cap=0.5))
    [c] = a.candidates
    assert c.hours_per_month == pytest.approx(365.0)
    assert c.payback_months == pytest.approx(5000 / 474.5)
    assert a.measured_steady_ref_hours_per_month == pytest.approx(100.0)
    assert a.steady_ref_hours_per_month == 1000
    assert a.what_if == {"steady_hours": 1000, "utilization_cap": 0.5}


def test_what_if_electricity_price_and_candidate_price():
    # power at 0.10 USD/kWh: 160 kWh = 16 USD; at 2600 USD: 2600 / (300 - 16) = 9.15 months
    a = advise(rows(history()), settings(), OFFERS, NOW,
               what_if=WhatIf(electricity_price=0.10, prices={"rtx4090": 2600}))
    [c] = a.candidates
    assert c.power_usd == pytest.approx(16.0)
    assert c.purchase_price_usd == 2600
    assert c.payback_months == pytest.approx(2600 / 284)
    assert a.electricity_price == 0.10
    assert a.what_if == {"electricity_price": 0.10, "prices": {"rtx4090": 2600}}


def test_rent_price_without_an_offer_of_that_size_or_model():
    # only 1-GPU offers: 2 x 0.60 = 1.20 USD/h -> 240 - 40 = 200 a month; 25 months
    [c] = advise(rows(history()), settings(), [OFFERS[2]], NOW).candidates
    assert c.rent_price_per_hour_usd == pytest.approx(1.20)
    assert c.payback_months == pytest.approx(25.0)
    # no offer at all: what steady cloud work paid, 200/60 USD per H100-hour x 0.5 H100s
    # = 1.667 USD/h -> 333.33 - 40 = 293.33 a month; 5000 / 293.33 = 17.05 months
    a = advise(rows(history()), settings(), [], NOW, catalog_problem="no clouds are configured")
    [c] = a.candidates
    assert c.rent_price_per_hour_usd == pytest.approx(200 / 60 * 0.5)
    assert c.payback_months == pytest.approx(5000 / (200 * 200 / 60 * 0.5 - 40))
    assert "steady cloud work" in c.rent_basis
    assert a.missing and a.missing[0].startswith("no clouds are configured")
    # and with no cloud history either: unknown, and says what to give
    owned_only = [r for r in history() if r["target"] == "onprem"]
    [c] = advise(rows(owned_only), settings(), [], NOW).candidates
    assert c.verdict == "unknown" and "--rent-price" in c.reason


def test_window_drops_old_jobs_and_clips_long_ones():
    old = record("steady", "cloud", "H100", 1, 10, end=NOW - 100 * DAY, ledger_usd=30.0)
    # started 95 days ago and ran 240 h (10 days): its last 5 days, 120 h, are in the window
    long_ = record("steady", "onprem", "RTX4090", 1, 240, end=NOW - 85 * DAY, price_krw=1000.0)
    a = advise(rows([old, long_]), settings(), OFFERS, NOW, days=90)
    assert a.history_days == 90 and a.steady.jobs == 1
    assert a.steady.wall_hours == pytest.approx(120.0)
    assert a.steady.cost_usd == pytest.approx(120.0)  # 1 USD/h for the hours inside


def test_nothing_to_go_on_says_what_is_missing():
    a = advise([], settings(candidates=[]), [], NOW)
    assert a.candidates == [] and len(a.missing) == 3
    assert "--steady-hours" in a.missing[0] and "[[candidates]]" in a.missing[1]
    # an unknown GPU without a speed figure cannot be priced
    a = advise([], settings(candidates=[{"gpu": "MYSTERY9", "purchase_price": 1}]), OFFERS, NOW,
               what_if=WhatIf(steady_hours=10))
    assert a.candidates[0].verdict == "unknown" and "speed" in a.candidates[0].reason


# -- the CLI -------------------------------------------------------------------------

CATALOG = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Region,SpotPrice,Price,"
           "AvailabilityZone,GpuInfo\n"
           "2x_RTX4090,RTX4090,2,12,82,US,0.50,1.50,US-GA-1,\"{'Gpus': [{'Name': 'RTX4090', "
           "'Manufacturer': 'NVIDIA', 'Count': 2, 'MemoryInfo': {'SizeInMiB': 24576}}], "
           "'TotalGpuMemoryInMiB': 49152}\"\n")

CONFIG = """\
electricity_price = 0.25
gpu_speeds = {RTX4090 = 0.25}
[[onprem]]
gpu = "RTX4090"
count = 4
purchase_price = 12000
[[candidates]]
gpu = "RTX4090"
count = 2
purchase_price = 5000
watts = 400
"""


def fill(store: Store, recs: list[dict]) -> None:
    for r in recs:
        rec = store.create_job(name=r["name"], spec={"run": "x"}, kind=r["kind"], target=r["target"],
                               fingerprint="fp", decision=r["decision"])
        store.update(rec.id, created_at=r["created_at"])
        if r["status"] == "RUNNING":
            store.set_status(rec.id, "RUNNING", started_at=r["started_at"])
            continue
        store.set_status(rec.id, "RUNNING", started_at=r["started_at"])
        store.set_status(rec.id, r["status"], finished_at=r["finished_at"], info=r["info"],
                         metrics=r["metrics"])


def test_cli_json_from_a_filled_store(orch_home):
    import time

    now = time.time()
    shift = now - NOW  # the same history, ending now
    recs = []
    for r in history():
        r = dict(r)
        for k in ("created_at", "started_at", "finished_at"):
            if r[k] is not None:
                r[k] += shift
        recs.append(r)
    store = store_at(orch_home)
    fill(store, recs)
    store.close()
    (orch_home / "config.toml").write_text(CONFIG)
    cat = orch_home / "catalogs" / "runpod"
    cat.mkdir(parents=True)
    (cat / "vms.csv").write_text(CATALOG)
    env = {"ORCH_CLOUDS": "runpod", "ORCH_CATALOG_DIR": str(orch_home / "catalogs"),
           "ORCH_CURRENCY": "KRW", "ORCH_CURRENCY_RATE": "1000"}
    proc = run_orch(orch_home, "advise", "--json", timeout=120, **env)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["currency"] == "KRW" and d["running_jobs"] == 1
    assert d["months"] == pytest.approx(1.0, rel=1e-3)
    assert d["steady"]["ref_gpu_hours"] == pytest.approx(100.0, rel=1e-3)
    assert d["steady"]["per_month"]["cost_usd"] == pytest.approx(264.0, rel=1e-3)
    assert d["owned"]["utilization"] == pytest.approx(160 / 2922.24, rel=1e-3)
    [c] = d["candidates"]
    assert c["rent_price_per_hour_usd"] == pytest.approx(1.50)  # runpod's x2 on demand
    assert c["payback_months"] == pytest.approx(5000 / 260, rel=1e-3)
    assert c["verdict"] == "buy"
    assert d["missing"] == [] and d["what_if"] == {}

    # Without the catalog (no SkyPilot import: fast), the rent price given instead.
    proc = run_orch(orch_home, "advise", "--steady-hours", "1000", "--price", "RTX4090=2000",
                    "--rent-price", "1.5", timeout=120, ORCH_CURRENCY="KRW", ORCH_CURRENCY_RATE="1000")
    assert proc.returncode == 0, proc.stderr
    # 2000 / (730 x 1.5 - 0.8 x 730 x 0.25) = 2000 / (1095 - 146) = 2.1 months, at the cap;
    # the table shows KRW: 2,000,000 KRW for the candidate
    assert "2.1 mo" in proc.stdout and "730 (cap)" in proc.stdout and "2,000,000 KRW" in proc.stdout
    assert "steady hours 1000" in proc.stdout and "rent price 1.5" in proc.stdout
    assert "assumptions" in proc.stdout and "missing" not in proc.stdout


def test_cli_without_store_or_candidates_and_bad_flags(orch_home):
    proc = run_orch(orch_home, "advise", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "no finished jobs" in proc.stdout and "[[candidates]]" in proc.stdout
    assert "ORCH_CLOUDS" in proc.stdout
    assert not (orch_home / "orch.db").exists()  # advice never creates the store
    proc = run_orch(orch_home, "advise", "--utilization-cap", "1.5", timeout=120)
    assert proc.returncode == 2 and "--utilization-cap 1.5" in proc.stderr
    proc = run_orch(orch_home, "advise", "--price", "H100=3", timeout=120)
    assert proc.returncode == 2 and "not a candidate" in proc.stderr


# -- what owned GPUs really cost per held hour -----------------------------------------

H = 3600.0
T0 = NOW - 240 * H  # a 10-day window: 240 h
LIFE_H = 3 * 8766.0  # three years of hours
# 2 x A100 bought for exactly 3 years of hours: ownership is 1 USD per pool-hour
A100S = OwnedGpus(gpu="A100", count=2, purchase_price=LIFE_H, utilization=0.5, watts=250)
RTX = OwnedGpus(gpu="RTX4090", count=4, purchase_price=12000)  # 3 years, 60%, 300 W
WORKSTATION = LocalMachine(purchase_price=2500, utilization=0.3, watts=150)


def job(target, gpu, count, start_h, end_h=None) -> CostEntry:
    """A ledger entry: hours from T0; end None while it runs."""
    return CostEntry(target=target, gpu=gpu, gpu_count=count, started_at=T0 + start_h * H,
                     finished_at=None if end_h is None else T0 + end_h * H)


CLOUD_ONLY = [job("cloud", "H100", 1, 0, 5)]

# (case, onprem lines, jobs, window start, local GPUs detected, expected per pool)
USE_CASES = [
    # Idle: 12000 x 240 / 26298 = 109.51 USD of ownership bought no work; assumed
    # 12000 / (26298 x 0.6 x 4) = 0.190 + 0.3 kW x 0.25 = 0.265 USD per GPU-hour
    ("idle pool", [RTX], CLOUD_ONLY, T0, 0,
     {"onprem RTX4090 x4": dict(jobs=0, busy_gpu_hours=0.0, capacity_gpu_hours=960.0,
                                utilization=0.0, ownership_usd=12000 * 240 / LIFE_H, power_usd=0.0,
                                real_per_gpu_hour_usd=None,
                                assumed_per_gpu_hour_usd=12000 / (LIFE_H * 0.6 * 4) + 0.075)}),
    # 50% busy as assumed: 2 GPUs x 120 h = 240 of 480 GPU-hours; ownership 240 USD, power
    # 0.25 kW x 240 h x 0.25 = 15 USD; (240 + 15) / 240 = 1.0625, the assumed 1 + 0.0625
    ("pool 50% busy", [A100S], [job("onprem", "A100", 2, 0, 120)], T0, 0,
     {"onprem A100 x2": dict(jobs=1, busy_gpu_hours=240.0, capacity_gpu_hours=480.0,
                             utilization=0.5, ownership_usd=240.0, power_usd=15.0,
                             real_per_gpu_hour_usd=1.0625, assumed_per_gpu_hour_usd=1.0625)}),
    # Window 120 h of a longer history: the job before it is out; the long one counts its
    # last 40 h (80 GPU-hours); one still running since hour 200 counts 40 h on 1 GPU.
    # 120 of 240 GPU-hours; ownership 120, power 0.25 x 120 x 0.25 = 7.5 USD.
    ("window shorter than the history", [A100S],
     [job("onprem", "A100", 2, -100, -10), job("onprem", "A100", 2, -40, 160),
      job("onprem", "A100", 1, 200), job("onprem", "H100", 8, 130, 140)], T0 + 120 * H, 0,
     {"onprem A100 x2": dict(jobs=2, busy_gpu_hours=120.0, capacity_gpu_hours=240.0,
                             utilization=0.5, ownership_usd=120.0, power_usd=7.5,
                             real_per_gpu_hour_usd=127.5 / 120)}),
    # This workstation (1 GPU): 24 h of 240 busy = 10%; ownership 2500 x 240 / 26298 =
    # 22.82, power 0.15 kW x 24 h x 0.25 = 0.90 USD; (22.82 + 0.90) / 24 = 0.988 USD a
    # used hour against 2500 / (26298 x 0.3) + 0.0375 = 0.354 assumed
    ("local workstation", [], CLOUD_ONLY + [job("local", "RTX4090", 1, 0, 24)], T0, 1,
     {"local": dict(jobs=1, gpus=1, unit="GPU", busy_gpu_hours=24.0, capacity_gpu_hours=240.0,
                    utilization=0.1, ownership_usd=2500 * 240 / LIFE_H, power_usd=0.9,
                    real_per_gpu_hour_usd=(2500 * 240 / LIFE_H + 0.9) / 24,
                    assumed_per_gpu_hour_usd=2500 / (LIFE_H * 0.3) + 0.0375)}),
    # A workstation without GPUs is busy while any job runs: 0-20 h and 10-30 h overlap,
    # so 30 machine-hours, not 40
    ("local without GPUs", [], [job("local", None, 0, 0, 20), job("local", None, 0, 10, 30)], T0, 0,
     {"local": dict(jobs=2, gpus=1, unit="machine", busy_gpu_hours=30.0, utilization=0.125)}),
]


@pytest.mark.parametrize("case,lines,jobs,start,local_gpus,want", USE_CASES,
                         ids=[c[0] for c in USE_CASES])
def test_owned_use_measures_each_pool(case, lines, jobs, start, local_gpus, want):
    u = owned_use(jobs, lines, WORKSTATION, start=start, end=NOW, basis="the test window",
                  electricity_price=0.25, local_gpus=local_gpus)
    assert u.history
    pools = {p.pool: p for p in u.pools}
    assert set(pools) == set(want)
    for name, fields in want.items():
        for k, v in fields.items():
            got = getattr(pools[name], k)
            assert got == (pytest.approx(v) if isinstance(v, float) else v), (name, k)


def test_owned_use_says_when_real_and_assumed_differ():
    # idle: what the ownership bought, in the user's currency
    [p] = owned_use(CLOUD_ONLY, [RTX], WORKSTATION, start=T0, end=NOW, basis="w",
                    electricity_price=0.25, currency="KRW", rate=1000).pools
    assert p.verdict.startswith("no job ran on these GPUs in the 10.0 days: their 109,514 KRW")
    # 48 of 960 GPU-hours: 5% busy; (109.51 + 0.3 x 48 x 0.25) / 48 = 2.36 USD, not 0.265
    [p] = owned_use([job("onprem", "RTX4090", 4, 0, 12)], [RTX], WORKSTATION, start=T0, end=NOW,
                    basis="w", electricity_price=0.25).pools
    assert p.utilization == pytest.approx(0.05)
    assert p.verdict == ("jobs held them 5% of the time against the 60% assumed: each held GPU-hour "
                         "really costs 2.36 USD, not 0.27 USD; more steady work on these GPUs, or "
                         "fewer GPUs, would lower it")
    # busier than assumed: 95% of the A100s against 50%; plans price them too high
    [p] = owned_use([job("onprem", "A100", 2, 0, 228)], [A100S], WORKSTATION, start=T0, end=NOW,
                    basis="w", electricity_price=0.25).pools
    assert p.utilization == pytest.approx(0.95)
    assert p.real_per_gpu_hour_usd < p.assumed_per_gpu_hour_usd
    assert "set utilization = 0.95 in [[onprem]] gpu = \"A100\"" in p.verdict
    # near the assumed: no advice
    [p] = owned_use([job("onprem", "A100", 2, 0, 120)], [A100S], WORKSTATION, start=T0, end=NOW,
                    basis="w", electricity_price=0.25).pools
    assert "near the 50% assumed" in p.verdict


def test_owned_use_without_history_lifetime_cap_and_notes():
    # No job at all: nothing measured, the assumed figure only; no local pool
    u = owned_use([], [A100S], WORKSTATION, start=T0, end=NOW, basis="w", electricity_price=0.25)
    [p] = u.pools
    assert not u.history and p.utilization is None and p.real_per_gpu_hour_usd is None
    assert p.assumed_per_gpu_hour_usd == pytest.approx(1.0625)
    assert p.verdict.startswith("no job history to measure: each held GPU-hour costs 1.06 USD")
    # A 5-day lifetime caps the 10-day window: 120 h; the job's 2 x 120 h all lie in it
    short = OwnedGpus(gpu="A100", count=2, purchase_price=1000, lifetime_years=120 / 8766)
    [p] = owned_use([job("onprem", "A100", 2, 100, 240)], [short], WORKSTATION, start=T0, end=NOW,
                    basis="w", electricity_price=0.25).pools
    assert p.window_days == pytest.approx(5.0) and "capped at its" in p.window_basis
    assert p.ownership_usd == pytest.approx(1000.0) and p.utilization == pytest.approx(1.0)
    # Two lines of one model share its jobs by GPU count; a model no line lists is a note;
    # so are CPU pools and CPU jobs on a GPU workstation, whose GPU count comes from history
    lines = [RTX, OwnedGpus(gpu="RTX4090", count=12, purchase_price=1),
             OwnedGpus(gpu="CPU", count=3, purchase_price=1)]
    jobs = [job("onprem", "RTX4090", 8, 0, 10), job("onprem", "L4", 1, 0, 1),
            job("local", "RTX4090", 2, 0, 1), job("local", None, 0, 0, 1)]
    u = owned_use(jobs, lines, WORKSTATION, start=T0, end=NOW, basis="w", electricity_price=0.25)
    busy = {p.pool: p.busy_gpu_hours for p in u.pools}
    assert busy == {"onprem RTX4090 x4": pytest.approx(20.0),
                    "onprem RTX4090 x12": pytest.approx(60.0), "local": pytest.approx(2.0)}
    assert [p.gpus for p in u.pools if p.target == "local"] == [2]
    text = " | ".join(u.notes)
    for part in ("split between them", "L4", "CPU-only jobs", "most a local job used", "CPU pools"):
        assert part in text


def test_advise_carries_owned_use_over_its_window():
    a = advise(rows(history()), settings(), OFFERS, NOW)
    [p] = a.owned_use.pools
    # the same 160 of 2922.24 GPU-hours as `owned`; ownership 12000 x 730.56 / 26298
    assert p.utilization == pytest.approx(a.owned["utilization"])
    assert a.owned_use.window_basis == "the 30.4 days since the first recorded job"
    assert p.real_per_gpu_hour_usd == pytest.approx((12000 * 730.56 / LIFE_H + 0.3 * 160 * 0.25) / 160)
    assert "2,159 KRW, not 265 KRW" in p.verdict
    d = a.to_dict()["owned_use"]
    assert d["pools"][0]["real_per_gpu_hour_usd"] == pytest.approx(p.real_per_gpu_hour_usd)
    a = advise(rows(history()), settings(), OFFERS, NOW, days=10)
    assert a.owned_use.window_basis == "the last 10 days (--days)"


def test_cli_owned_use_from_a_filled_store(orch_home):
    import time

    now = time.time()
    # 10 days of history: on-prem 2 x RTX4090 for 48 h (96 of 960 GPU-hours), this
    # workstation 1 GPU for 10 h, and a cloud job, the first recorded, 10 days ago
    recs = [record("exploratory", "cloud", "H100", 1, 1, end=now - 10 * DAY + H, ledger_usd=3.0),
            record("steady", "onprem", "RTX4090", 2, 48, end=now - 2 * DAY, price_krw=500.0),
            record("exploratory", "local", "RTX4090", 1, 10, end=now - DAY, price_krw=100.0)]
    store = store_at(orch_home)
    fill(store, recs)
    store.close()
    (orch_home / "config.toml").write_text(CONFIG)
    env = {"ORCH_CURRENCY": "KRW", "ORCH_CURRENCY_RATE": "1000"}
    d = run_json(orch_home, "advise", timeout=120, **env)
    u = d["owned_use"]
    assert u["history"] and u["window_days"] == pytest.approx(10.0, rel=1e-3)
    assert u["window_basis"] == "the 10.0 days since the first recorded job"
    pools = {p["pool"]: p for p in u["pools"]}
    onprem = pools["onprem RTX4090 x4"]
    assert onprem["busy_gpu_hours"] == pytest.approx(96.0, rel=1e-3)
    assert onprem["utilization"] == pytest.approx(0.1, rel=1e-3)
    own = 12000 * 240 / LIFE_H
    assert onprem["ownership_usd"] == pytest.approx(own, rel=1e-3)
    assert onprem["real_per_gpu_hour_usd"] == pytest.approx((own + 0.3 * 96 * 0.25) / 96, rel=1e-3)
    assert onprem["assumed_per_gpu_hour_usd"] == pytest.approx(12000 / (LIFE_H * 0.6 * 4) + 0.075)
    # this workstation's GPUs are what nvidia-smi finds here, at least the one the job used
    local = pools["local"]
    assert local["busy_gpu_hours"] == pytest.approx(10.0, rel=1e-3) and local["gpus"] >= 1
    assert local["utilization"] == pytest.approx(10 / (local["gpus"] * 240), rel=1e-3)
    proc = run_orch(orch_home, "advise", timeout=120, **env)
    assert proc.returncode == 0, proc.stderr
    assert "what owned GPUs really cost per hour jobs held them" in proc.stdout
    assert "jobs held them 10% of the time against the 60% assumed" in proc.stdout
    assert "KRW, not 265 KRW" in proc.stdout
