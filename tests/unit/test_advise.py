"""Buy-vs-rent advice: break-even on hand-checked numbers, utilization, what-ifs, the CLI."""

from __future__ import annotations

import json
import os

import pytest

from orchestrator.decision.advise import DAYS_PER_MONTH, WhatIf, advise
from orchestrator.decision.models import Offer
from orchestrator.settings import Settings
from orchestrator.store import Store
from tests.conftest import run_orch, store_at

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


def test_measured_work_cost_utilization_and_break_even():
    a = advise(history(), settings(), OFFERS, NOW)
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
    a = advise(history(), settings(), OFFERS, NOW, what_if=WhatIf(rent_price=0.10))
    [c] = a.candidates
    assert c.net_usd == pytest.approx(200 * 0.10 - 40.0)
    assert c.payback_months is None and c.verdict == "rent" and "never" in c.reason
    # Pays back, but after its lifetime: 5000 / (200 x 1.0 - 40) = 31.25 < 36; at 0.9/h
    # 5000 / (180 - 40) = 35.7; at 0.85/h 5000 / (170 - 40) = 38.5 > 36: rent
    [c] = advise(history(), settings(), OFFERS, NOW, what_if=WhatIf(rent_price=0.85)).candidates
    assert c.payback_months == pytest.approx(5000 / 130) and c.verdict == "rent"
    assert "after its 36-month lifetime" in c.reason
    # At 8000 USD: 8000 / 260 = 30.8 months against renting a pair, but the same work rents
    # for 240 USD on single GPUs: 8000 / (240 - 40) = 40 months > 36: rent.
    [c] = advise(history(), settings(), OFFERS, NOW, what_if=WhatIf(prices={"RTX4090": 8000})).candidates
    assert c.payback_months == pytest.approx(8000 / 260)
    assert c.cheapest_rent["payback_months"] == pytest.approx(40.0)
    assert c.verdict == "rent" and "c2/r2 RTX4090 x1 rents the same work" in c.reason
    assert "pays back in 40.0 months" in c.reason


def test_capacity_cap_and_utilization_cap():
    # 1000 H100-hours / 0.5 = 2000 h needed, but a month holds 730: the rest stays rented.
    # rent avoided 730 x 1.5 = 1095; power 0.8 x 730 x 0.25 = 146; 5000 / 949 = 5.27 months
    [c] = advise(history(), settings(), OFFERS, NOW, what_if=WhatIf(steady_hours=1000)).candidates
    assert c.hours_needed == pytest.approx(2000.0) and c.capped
    assert c.hours_per_month == pytest.approx(730.0)
    assert c.payback_months == pytest.approx(5000 / (1095 - 146))
    # at a 0.5 utilization cap: 365 h; 547.5 - 73 = 474.5 a month; 10.54 months
    a = advise(history(), settings(), OFFERS, NOW,
               what_if=WhatIf(steady_hours=1000, utilization_cap=0.5))
    [c] = a.candidates
    assert c.hours_per_month == pytest.approx(365.0)
    assert c.payback_months == pytest.approx(5000 / 474.5)
    assert a.measured_steady_ref_hours_per_month == pytest.approx(100.0)
    assert a.steady_ref_hours_per_month == 1000
    assert a.what_if == {"steady_hours": 1000, "utilization_cap": 0.5}


def test_what_if_electricity_price_and_candidate_price():
    # power at 0.10 USD/kWh: 160 kWh = 16 USD; at 2600 USD: 2600 / (300 - 16) = 9.15 months
    a = advise(history(), settings(), OFFERS, NOW,
               what_if=WhatIf(electricity_price=0.10, prices={"rtx4090": 2600}))
    [c] = a.candidates
    assert c.power_usd == pytest.approx(16.0)
    assert c.purchase_price_usd == 2600
    assert c.payback_months == pytest.approx(2600 / 284)
    assert a.electricity_price == 0.10
    assert a.what_if == {"electricity_price": 0.10, "prices": {"rtx4090": 2600}}


def test_rent_price_without_an_offer_of_that_size_or_model():
    # only 1-GPU offers: 2 x 0.60 = 1.20 USD/h -> 240 - 40 = 200 a month; 25 months
    [c] = advise(history(), settings(), [OFFERS[2]], NOW).candidates
    assert c.rent_price_per_hour_usd == pytest.approx(1.20)
    assert c.payback_months == pytest.approx(25.0)
    # no offer at all: what steady cloud work paid, 200/60 USD per H100-hour x 0.5 H100s
    # = 1.667 USD/h -> 333.33 - 40 = 293.33 a month; 5000 / 293.33 = 17.05 months
    a = advise(history(), settings(), [], NOW, catalog_problem="no clouds are configured")
    [c] = a.candidates
    assert c.rent_price_per_hour_usd == pytest.approx(200 / 60 * 0.5)
    assert c.payback_months == pytest.approx(5000 / (200 * 200 / 60 * 0.5 - 40))
    assert "steady cloud work" in c.rent_basis
    assert a.missing and a.missing[0].startswith("no clouds are configured")
    # and with no cloud history either: unknown, and says what to give
    owned_only = [r for r in history() if r["target"] == "onprem"]
    [c] = advise(owned_only, settings(), [], NOW).candidates
    assert c.verdict == "unknown" and "--rent-price" in c.reason


def test_window_drops_old_jobs_and_clips_long_ones():
    old = record("steady", "cloud", "H100", 1, 10, end=NOW - 100 * DAY, ledger_usd=30.0)
    # started 95 days ago and ran 240 h (10 days): its last 5 days, 120 h, are in the window
    long_ = record("steady", "onprem", "RTX4090", 1, 240, end=NOW - 85 * DAY, price_krw=1000.0)
    a = advise([old, long_], settings(), OFFERS, NOW, days=90)
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
        store.update(rec["id"], created_at=r["created_at"])
        if r["status"] == "RUNNING":
            store.set_status(rec["id"], "RUNNING", started_at=r["started_at"])
            continue
        store.set_status(rec["id"], "RUNNING", started_at=r["started_at"])
        store.set_status(rec["id"], r["status"], finished_at=r["finished_at"], info=r["info"])


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
