"""The cost ledger and budgets: sums across recoveries, owned hardware, refusals and stops."""

from __future__ import annotations

import csv
import io
import json

import pytest

from jobs.context import over_budget
from jobs.request import Budget
from orchestrator.decision import Offer
from orchestrator.decision import job_ledger as ledger
from orchestrator.decision.facts import Facts, decide_on
from orchestrator.decision.pricing import local_offer
from orchestrator.records.placement import PlacedOffer
from orchestrator.settings import LocalMachine, Settings
from orchestrator.spec import load_spec_text
from tests.conftest import job_row, run_orch, store_at
from tests.unit.providers.test_cloud import JOB, T0, orch, statuses, use_fake  # noqa: F401 (fixture)

WHERE = {"cloud": "runpod", "region": "US", "resources": "1x runpod([Spot], {'H100': 1})"}


def owned_record(**kw) -> dict:
    """A local job that held 0.5 of a 2-GPU workstation for two hours (by Ray's clock)."""
    choice = {"target": "local", "gpu": "RTX4090", "count": 1, "price_per_hour": 0.5,
              "price_per_hour_usd": 0.5, "amortized_per_hour_usd": 0.4, "power_per_hour_usd": 0.1,
              "est_hours": 1.0, "est_cost": 0.5}
    alt = {"target": "cloud", "cloud": "runpod", "region": "CA", "gpu": "RTX4090", "count": 1,
           "spot": False, "instance_type": "1x_4090", "price_per_hour": 0.7, "est_hours": 1.0,
           "est_cost": 0.8, "excluded": None}
    rec = {"id": "orch-1", "name": "train", "status": "SUCCEEDED", "kind": "steady",
           "target": "local", "created_at": T0, "started_at": T0 + 30, "finished_at": T0 + 7300,
           "metrics": {}, "info": {"backend_start": T0 + 10, "backend_end": T0 + 7210},
           "decision": {"choice": choice, "alternatives": [choice, alt],
                        "estimate": {"hours": 1.0, "cost": 0.5, "cost_usd": 0.5}}}
    rec.update(kw)
    return rec


def test_owned_hardware_costs_amortized_plus_power_for_the_time_held():
    e = ledger.entry(job_row(owned_record()))
    # Ray held it 7200 s = 2 h at 0.5 USD/h (0.4 amortized + 0.1 power).
    assert e.hours == pytest.approx(2.0)
    assert e.cost_usd == pytest.approx(1.0)
    assert (e.amortized_usd, e.power_usd) == (pytest.approx(0.8), pytest.approx(0.2))
    # The cloud option passed over: estimated 0.8 for 1 h; the job took 2 h, so 1.6.
    assert e.alternative.where == "runpod/CA"
    assert e.alternative.cost_usd == pytest.approx(1.6)


def _measured(energy_wh, source="nvml", kwh=0.15) -> dict:
    rec = owned_record(metrics={"telemetry": {"summary": {"source": source, "energy_wh": energy_wh}}},
                       spec={"train": {"entrypoint": "m:f"}})  # orch's runner measured it
    rec["decision"]["choice"]["kwh_price_usd"] = kwh
    return rec


@pytest.mark.parametrize("rec, power, basis, rated", [
    # 2 h; rated 0.1 USD/h of power is 0.2; the GPU drew 400 Wh at 0.15 USD/kWh: 0.06
    (_measured(400.0), 0.06, "measured", 0.2),
    (_measured(400.0, source="psutil"), 0.2, "rated", None),  # a CPU's figure has no energy
    (_measured(None), 0.2, "rated", None),  # a GPU without an energy reading
    (_measured(400.0, kwh=None), 0.2, "rated", None),  # planned before orch kept the kWh price
    (owned_record(), 0.2, "rated", None),
], ids=["measured", "cpu", "no-energy", "old-plan", "no-telemetry"])
def test_an_owned_jobs_power_is_the_energy_it_drew_where_measured(rec, power, basis, rated):
    e = ledger.entry(job_row(rec))
    assert (e.power_usd, e.power_basis) == (pytest.approx(power), basis)
    assert e.power_rated_usd == (None if rated is None else pytest.approx(rated))
    assert e.cash_usd == pytest.approx(power)  # cash is the power, however had
    # A budget never counts less than the rated power: the job's own workers measured it.
    assert ledger.spend(e, "cash") == pytest.approx(max(power, rated or 0.0))
    assert ledger.spend(e, "full") == pytest.approx(0.8 + max(power, rated or 0.0))
    assert e.cost_usd == pytest.approx(0.8 + power)  # the purchase's share, plus that power
    assert e.amortized_usd == pytest.approx(0.8)


def test_an_older_record_is_priced_from_the_price_it_showed_in_its_currency():
    rec = owned_record()
    for a in rec["decision"]["alternatives"]:
        a.pop("price_per_hour_usd", None)
    rec["decision"]["choice"] = {**rec["decision"]["alternatives"][0], "price_per_hour": 700.0}
    rec["decision"]["estimate"] = {"hours": 1.0, "cost": 700.0, "cost_usd": 0.5}  # 1400 KRW/USD
    rec["info"] = {}  # no backend times: orch's own start and finish
    e = ledger.entry(job_row(rec))
    assert e.hours == pytest.approx(7270 / 3600)
    assert e.cost_usd == pytest.approx(0.5 * 7270 / 3600)


def cloud_record(**kw) -> dict:
    """A cloud job billed 3 USD over its launches."""
    choice = {"target": "cloud", "cloud": "runpod", "region": "CA", "gpu": "H100", "count": 1,
              "price_per_hour": 2.0, "price_per_hour_usd": 2.0, "amortized_per_hour_usd": None,
              "power_per_hour_usd": None, "est_hours": 1.0, "est_cost": 2.2}
    rec = {"id": "orch-c", "name": "burst", "status": "SUCCEEDED", "kind": "exploratory",
           "target": "cloud", "created_at": T0, "started_at": T0, "finished_at": T0 + 5400,
           "metrics": {}, "info": {"ledger": {"cost_usd": 3.0, "billed_hours": 1.5}},
           "decision": {"choice": choice, "alternatives": [choice],
                        "estimate": {"hours": 1.0, "cost": 2.2, "cost_usd": 2.2}}}
    rec.update(kw)
    return rec


def _old_owned() -> dict:
    rec = owned_record()  # planned before orch split owned prices into amortized and power
    for k in ("amortized_per_hour_usd", "power_per_hour_usd"):
        rec["decision"]["choice"].pop(k)
    return rec


@pytest.mark.parametrize("rec, cost, cash", [
    (cloud_record(), 3.0, 3.0),  # the bill, both ways
    (owned_record(), 1.0, 0.2),  # 2 h: 0.8 amortized + 0.2 power; the purchase is paid
    (owned_record(target="onprem"), 1.0, 0.2),
    (_old_owned(), 1.0, 1.0),  # no power figure: cash is the full cost, never less
    (owned_record(status="RUNNING", finished_at=None, info={"backend_start": T0}), 0.25, 0.05),
], ids=["cloud", "local", "onprem", "old-owned-record", "running"])
def test_cash_is_the_cloud_bill_or_owned_hardwares_power(rec, cost, cash):
    e = ledger.entry(job_row(rec), now=T0 + 1800)
    assert (e.cost_usd, e.cash_usd) == (pytest.approx(cost), pytest.approx(cash))
    assert ledger.spend(e, "full") == pytest.approx(cost)
    assert ledger.spend(e, "cash") == pytest.approx(cash)


def test_an_entry_saved_before_cash_existed_reads_its_cash_from_its_power():
    saved = ledger.entry(job_row(owned_record()))
    saved.cash_usd = None
    assert ledger.cash(saved) == pytest.approx(0.2)
    cloud = ledger.entry(job_row(cloud_record()))
    cloud.cash_usd = None
    assert ledger.cash(cloud) == pytest.approx(3.0)
    assert ledger.group([saved, cloud], "target")[0].cash_usd == pytest.approx(3.0)


@pytest.mark.parametrize("basis, spent", [("cash", 3.0 + 0.2 + 0.1), ("full", 3.0 + 1.0 + 0.5)])
def test_the_months_spend_on_each_basis(basis, spent):
    now = T0 + 10_000
    records = [cloud_record(), owned_record(),
               owned_record(id="orch-2", status="RUNNING", finished_at=None,
                            info={"backend_start": now - 3600}),
               cloud_record(id="orch-old", started_at=T0 - 90 * 86400,
                            finished_at=T0 - 90 * 86400 + 5400)]
    entries = [ledger.entry(job_row(rec), now) for rec in records]
    assert ledger.month_spend(entries, now, basis) == pytest.approx(spent)
    # In parts: the cloud's bill, owned power (0.2 + 0.1), owned amortized (0.8 + 0.4); the
    # job that ended 90 days ago counts in none.
    parts = ledger.month_parts(entries, now)
    assert parts == {"cloud": pytest.approx(3.0), "owned_power": pytest.approx(0.3),
                     "owned_amortized": pytest.approx(1.2)}
    counted = ("cloud", "owned_power") if basis == "cash" else ledger.SPEND_PARTS
    assert sum(parts[p] for p in counted) == pytest.approx(spent)


def test_a_budget_basis_orch_does_not_know_is_an_error():
    with pytest.raises(ValueError, match="budget basis 'net'"):
        ledger.month_spend([], T0, "net")


@pytest.mark.parametrize("choice, basis, rate", [
    ({"target": "local", "price_per_hour_usd": 0.5, "power_per_hour_usd": 0.1}, "cash", 0.1),
    ({"target": "local", "price_per_hour_usd": 0.5, "power_per_hour_usd": 0.1}, "full", 0.5),
    ({"target": "local", "price_per_hour_usd": 0.5}, "cash", 0.5),  # an older plan
    ({"target": "cloud", "price_per_hour_usd": 2.0, "power_per_hour_usd": None}, "cash", 2.0),
    ({"target": "cloud"}, "cash", None),
])
def test_the_hourly_rate_a_running_job_counts_against_its_budget(choice, basis, rate):
    assert ledger.hourly(PlacedOffer(**choice), basis) == (None if rate is None else pytest.approx(rate))


def test_a_running_job_costs_what_it_has_used_so_far():
    rec = owned_record(status="RUNNING", finished_at=None, info={"backend_start": T0})
    e = ledger.entry(job_row(rec), now=T0 + 1800)
    assert e.running and e.cost_usd == pytest.approx(0.25)


def test_group_month_spend_and_csv():
    now = T0 + 10_000
    a = ledger.entry(job_row(owned_record()))
    b = ledger.entry(job_row(owned_record(id="orch-2", name="other", kind="exploratory",
                                          status="RUNNING", finished_at=None,
                                          info={"backend_start": now - 3600})), now)
    c = ledger.entry(job_row(owned_record(id="orch-3", info={"backend_start": T0 - 90 * 86400,
                                                             "backend_end": T0 - 90 * 86400 + 3600},
                                          finished_at=T0 - 90 * 86400 + 3600)), now)
    by_kind = {g.key: g for g in ledger.group([a, b, c], "kind")}
    assert by_kind["steady"].jobs == 2
    assert by_kind["steady"].cost_usd == pytest.approx(1.0 + 0.5)
    assert by_kind["exploratory"].cost_usd == pytest.approx(0.5)
    months = ledger.group([a, b, c], "month")
    assert [m.key for m in months] == sorted(m.key for m in months) and len(months) == 2
    assert by_kind["steady"].cash_usd == pytest.approx(0.2 + 0.1)  # power alone
    # This month: a (ended in it) and b (running); c ended three months ago.
    assert ledger.month_spend([a, b, c], now, "full") == pytest.approx(1.5)
    assert ledger.month_spend([a, b, c], now) == pytest.approx(0.3)  # cash by default
    rows = list(csv.DictReader(io.StringIO(ledger.to_csv([a, b]))))
    assert [r["id"] for r in rows] == ["orch-1", "orch-2"]
    assert float(rows[0]["cost_usd"]) == pytest.approx(1.0)
    assert float(rows[0]["cash_usd"]) == pytest.approx(0.2)
    assert float(rows[0]["saved_usd"]) == pytest.approx(0.6)


# -- budgets --------------------------------------------------------------------------

LOCAL = local_offer(LocalMachine(purchase_price=3000, watts=450), 0.15, "RTX4090", 1, 16, 64)
CLOUD = Offer("cloud", "RTX4090", 1, 0.40, cloud="runpod", region="CA", cpus=16, memory_gb=64)
STEP = "name: t\nrun: python train.py\nresources: {accelerators: RTX4090}\nestimate: {hours: 10}\n"


def facts(offers, spent: float = 0.0) -> Facts:
    return Facts(offers=offers, capacity=None, history=(), spent_this_month=spent)


def test_a_plan_over_the_jobs_budget_is_refused():
    spec = load_spec_text(STEP + "budget: {max_cost: 1}\n")
    full = Settings(mode="hybrid", clouds=["runpod"], budget_basis="full")
    d = decide_on(spec, full, facts([CLOUD, LOCAL]), fingerprint="f", now=T0)
    assert d.target is None  # 4.04 rented, 4.48 owned in full
    assert "budget.max_cost" in d.refusal and "raise budget.max_cost to at least" in d.refusal
    # In cash the workstation costs its power, 0.68: within the budget.
    cash = Settings(mode="hybrid", clouds=["runpod"])
    d = decide_on(spec, cash, facts([CLOUD, LOCAL]), fingerprint="f", now=T0)
    assert d.target == "local"


def test_a_plan_over_the_monthly_budget_is_refused_and_says_how_much_is_spent():
    spec = load_spec_text(STEP)
    s = Settings(mode="hybrid", clouds=["runpod"], monthly_budget=50)
    ok = decide_on(spec, s, facts([CLOUD], spent=40.0), fingerprint="f", now=T0)
    assert ok.target == "cloud"  # 10 h x 0.40 + start-up = 4.04; 40 + 4.04 <= 50
    over = decide_on(spec, s, facts([CLOUD], spent=46.5), fingerprint="f", now=T0)
    assert over.target is None
    assert "46.50 USD spent this month" in over.refusal and "monthly_budget 50.00 USD" in over.refusal
    assert "raise monthly_budget" in over.refusal


def test_the_months_spend_comes_from_the_store_on_the_budgets_basis(tmp_path):
    from orchestrator.service.orch import Orch

    def month_spend(settings, since=None):  # what `orch cost` says of the month, in USD
        month = Orch(settings).cost_report(since=since).month
        assert month is not None
        return month.spent

    s = Settings(home=tmp_path, monthly_budget=10)
    assert month_spend(s) == 0.0  # no store yet, and none is created
    assert not (tmp_path / "orch.db").exists()
    store = store_at(tmp_path)
    rec = owned_record()
    job = store.create_job(name="t", spec={}, kind="steady", target="local", fingerprint="f",
                           decision=rec["decision"])
    store.update(job.id, info=rec["info"])
    store.set_status(job.id, "SUCCEEDED")  # finished now: this month

    assert month_spend(s) == pytest.approx(0.2)  # cash: the power
    assert month_spend(s, since="2999-01-01") == pytest.approx(0.2)  # the month, not the lines
    full = Settings(home=tmp_path, monthly_budget=10, budget_basis="full")
    assert month_spend(full) == pytest.approx(1.0)
    assert month_spend(full, since="2999-01-01") == pytest.approx(1.0)


def test_the_runner_stops_when_the_spend_reaches_the_limit():
    budget = Budget(limit_usd=1.0, price_per_hour_usd=2.0, spent_usd=0.2, t0=T0,
                    what="budget.max_cost 1.00 USD")
    assert over_budget(budget, T0 + 1400) is None  # 0.2 + 2 x 1400/3600 = 0.978
    why = over_budget(budget, T0 + 1500)  # 0.2 + 0.833 = 1.033
    assert why and "budget.max_cost 1.00 USD reached" in why and "1.033 USD spent" in why
    assert over_budget(None, T0) is None and over_budget(Budget(0.0, 2.0), T0) is None


def test_a_running_cloud_job_is_stopped_at_its_budget(orch):  # noqa: F811
    spec = load_spec_text(JOB.format(accel="H100:1") + "budget: {max_cost: 2.5}\n", "explore.yaml")
    fake = use_fake(orch, [{"status": "RUNNING", "start_at": T0, **WHERE}],
                    clock=[T0 + 600, T0 + 7200, T0 + 7300])
    rec = orch.submit(spec).rec
    run = json.loads(fake.launched[0][0].envs["ORCH_RUN"])
    assert run["budget"]["limit_usd"] == 2.5 and run["budget"]["spent_usd"] > 0
    rec = orch.refresh(orch.get(rec.id))  # 10 min in: 1.75 x (1/6 + 0.1) = 0.47 USD
    assert rec.status == "RUNNING" and not fake.cancelled
    rec = orch.refresh(orch.get(rec.id))  # 2 h in: 3.68 USD > 2.5 x 1.1
    assert fake.cancelled == [rec.id]
    assert "budget.max_cost 2.50 USD reached" in rec.message
    rec = orch.refresh(orch.get(rec.id))
    assert rec.status == "CANCELLED" and "budget.max_cost" in rec.message
    assert rec.info.cost.cost_usd == pytest.approx(rec.info.ledger.cost_usd)


def test_orch_cost_prints_measured_and_rated_power_where_they_differ(tmp_path):
    home = tmp_path / "home"
    store = store_at(home)
    for rec in (_measured(400.0), owned_record()):
        job = store.create_job(name="m", spec=rec.get("spec") or {}, kind="steady",
                               target="local", fingerprint="f", decision=rec["decision"])
        store.update(job.id, info=rec["info"], metrics=rec["metrics"])
        store.set_status(job.id, "SUCCEEDED")
    store.close()
    table = run_orch(home, "cost")
    assert table.returncode == 0, table.stderr
    assert ("power of 1 owned job: 0.06 USD from the energy their GPUs drew (NVML), where "
            "rated watts x hours says 0.20 USD") in " ".join(table.stdout.split()), table.stdout
    d = json.loads(run_orch(home, "cost", "--jobs", "--json").stdout)
    assert sorted(j["power_basis"] for j in d["jobs"]) == ["measured", "rated"]


def test_orch_cost_groups_writes_csv_and_refuses_bad_flags(tmp_path):
    home = tmp_path / "home"
    store = store_at(home)
    for name, kind in (("a", "steady"), ("a", "steady"), ("b", "exploratory")):
        rec = owned_record()
        job = store.create_job(name=name, spec={}, kind=kind, target="local", fingerprint="f",
                               decision=rec["decision"])
        store.update(job.id, info=rec["info"])
        store.set_status(job.id, "SUCCEEDED")
    store.close()
    proc = run_orch(home, "cost", "--by", "name", "--json", "--csv", str(tmp_path / "c.csv"))
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert [(g["name"], g["jobs"]) for g in d["groups"]] == [("a", 2), ("b", 1)]
    assert d["groups"][0]["cost_usd"] == pytest.approx(2.0)
    assert d["groups"][0]["cash_usd"] == pytest.approx(0.4)  # the power of 2 x 2 h
    assert d["total"]["cost_usd"] == pytest.approx(3.0)
    assert d["total"]["alternative_usd"] == pytest.approx(4.8)
    assert len((tmp_path / "c.csv").read_text().splitlines()) == 4
    plot = tmp_path / "spend.png"
    drawn = run_orch(home, "cost", "--plot", str(plot))
    assert drawn.returncode == 0 and f"wrote {plot}" in drawn.stderr
    from PIL import Image

    with Image.open(plot) as im:
        assert im.format == "PNG" and im.size[0] > 300
    table = run_orch(home, "cost", "--by", "kind")
    assert table.returncode == 0 and "steady" in table.stdout and "3.00 USD" in table.stdout
    for bad in (["--by", "week"], ["--since", "yesterday"], ["--plot", "x.svg"]):
        p = run_orch(home, "cost", *bad)
        assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.count("error:") == 1


def test_orch_cost_since_a_date_gives_the_month_the_budget_counts(tmp_path):
    """`--since D` keeps the jobs since D in its lines, but the month's line is the budget's:
    every job of this month (it once summed the jobs since D alone)."""
    import time

    home = tmp_path / "home"
    store = store_at(home)
    start = ledger.month_start(time.time())
    rec = owned_record(info={"backend_start": start + 60, "backend_end": start + 7260})
    job = store.create_job(name="early", spec={}, kind="steady", target="local", fingerprint="f",
                           decision=rec["decision"])
    store.update(job.id, info=rec["info"])
    store.set_status(job.id, "SUCCEEDED")
    store.update(job.id, created_at=start + 30, started_at=start + 60, finished_at=start + 7300)
    store.close()
    tomorrow = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 86400))
    whole = json.loads(run_orch(home, "cost", "--json", ORCH_MONTHLY_BUDGET="100").stdout)
    since = run_orch(home, "cost", "--json", "--since", tomorrow, ORCH_MONTHLY_BUDGET="100")
    assert since.returncode == 0, since.stderr
    d = json.loads(since.stdout)
    assert d["jobs"] == [] and d["total"]["jobs"] == 0
    assert whole["month"]["spent"] == pytest.approx(0.2)  # 2 h of its power, in cash
    assert d["month"]["spent"] == pytest.approx(whole["month"]["spent"])
