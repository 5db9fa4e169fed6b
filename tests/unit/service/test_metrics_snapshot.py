"""`orch serve`'s /metrics snapshot (service/metrics_snapshot.py), built from job rows alone:
exact figures for the queue, the month's spend in parts against the budget, each running
job's device, throughput and cost, and the owned GPUs."""

from __future__ import annotations

import copy

import pytest

from orchestrator.service.metrics_snapshot import DevicePoint, OwnedGpus, QueueLine, build
from orchestrator.settings import OwnedGpus as Inventory
from orchestrator.settings import Settings
from orchestrator.store import JobCount
from tests.conftest import job_row
from tests.unit.decision.test_job_ledger import T0, cloud_record, owned_record

GiB = 2.0**30
NOW = T0 + 10_000


def _gpu_job() -> dict:
    """Two workers on two owned GPUs, running for an hour at 0.5 USD/h (0.4 amortized + 0.1
    power), each worker's latest point measured by NVML."""
    rec = owned_record(id="orch-run", name="bert", status="RUNNING", finished_at=None,
                       info={"backend_start": NOW - 3600},
                       spec={"train": {"job": "image-classification"},
                             "scaling": {"num_workers": 2, "use_gpu": True}},
                       metrics={"samples_per_sec": 812.5, "device_now": {
                           "0": {"since_s": 60.0, "util": 80.0, "mem_gb": 20.0, "power_w": 250.0,
                                 "source": "nvml"},
                           "1": {"since_s": 60.0, "util": 60.0, "mem_gb": 18.5, "power_w": 210.0,
                                 "source": "nvml"},
                           # a worker's line that no runner prints: left out, or held in range
                           "x": {"util": 99.0, "mem_gb": 1.0},
                           "2": {"util": "busy", "mem_gb": 1.0},
                           "3": {"util": 1e300, "mem_gb": -1.0, "source": "gpu!"}}})
    rec["decision"] = copy.deepcopy(rec["decision"])
    rec["decision"]["choice"]["count"] = 2
    return rec


def _cpu_job() -> dict:
    """A run on this machine's CPU offer: its point is the worker's CPU, which is never a
    GPU's utilization."""
    rec = owned_record(id="orch-cpu", name="digits", status="RUNNING", finished_at=None,
                       info={"backend_start": NOW - 1800}, spec={"run": "python x.py"},
                       metrics={"device_now": {"0": {"since_s": 2.0, "util": 37.5, "mem_gb": 0.5,
                                                     "source": "psutil"}}})
    rec["decision"] = copy.deepcopy(rec["decision"])
    rec["decision"]["choice"].update(gpu=None, count=0)
    return rec


def _queued(job_id: str, target: str, age_s: float) -> dict:
    return {"id": job_id, "name": "q", "status": "PENDING", "kind": "exploratory",
            "target": target, "created_at": NOW - age_s, "info": {"queued": True}}


def _settings(**kw) -> Settings:
    return Settings(home="/nonexistent", mode="local", **kw)


def test_the_snapshot_of_a_team_month():
    month = [job_row(r) for r in (owned_record(), cloud_record(), _gpu_job(), _cpu_job(),
                                  _queued("orch-q1", "local", 90.0), _queued("orch-q2", "local", 30.0))]
    queued = [r for r in month if r.status == "PENDING"]
    counts = [JobCount("PENDING", "local", "exploratory", 2), JobCount("RUNNING", "local", "steady", 2)]
    settings = _settings(monthly_budget=1400.0, currency="KRW", currency_rate=1400.0,
                         onprem=[Inventory(gpu="A100", count=4, purchase_price=40000),
                                 Inventory(gpu="CPU", count=2, cpus=64, purchase_price=9000)])
    snap = build(counts, month, queued, NOW, settings, local_gpus=2)

    assert snap.jobs == tuple(counts)
    assert snap.queue == (QueueLine("cloud", 0, 0.0), QueueLine("local", 2, 90.0),
                          QueueLine("onprem", 0, 0.0))
    # The month: the cloud bill 3.0; owned power 0.2 (the finished job's 2 h) + 0.1 + 0.05
    # (the running ones so far); owned amortized 0.8 + 0.4 + 0.2. Cash counts the first two.
    assert snap.spend_usd == {"cloud": pytest.approx(3.0), "owned_power": pytest.approx(0.35),
                              "owned_amortized": pytest.approx(1.4)}
    assert (snap.budget_basis, snap.budget_spend_usd) == ("cash", pytest.approx(3.35))
    assert snap.budget_usd == pytest.approx(1.0)  # 1,400 KRW at 1,400 KRW per USD

    gpu, cpu = snap.running
    assert (gpu.id, gpu.name, gpu.target, gpu.kind, gpu.gpus) == ("orch-run", "bert", "local", "steady", 2.0)
    assert (gpu.cost_usd, gpu.cash_usd) == (pytest.approx(0.5), pytest.approx(0.1))
    assert gpu.samples_per_second == 812.5
    assert gpu.devices == (DevicePoint("0", "nvml", 80.0, 20.0 * GiB, 250.0),
                           DevicePoint("1", "nvml", 60.0, 18.5 * GiB, 210.0),
                           DevicePoint("3", "unknown", 100.0, 0.0, None))
    assert (cpu.gpus, cpu.samples_per_second) == (0.0, None)
    assert cpu.devices == (DevicePoint("0", "psutil", 37.5, 0.5 * GiB, None),)
    # Owned GPUs: the GPU job's two on local, measured 70% busy; the CPU job's figure is not
    # a GPU's. On-prem: the inventory's 4 GPUs (its CPU pool is not GPUs), none in use.
    assert snap.owned == (OwnedGpus("local", 2.0, 2.0, 70.0), OwnedGpus("onprem", 0.0, 4.0, None))


def test_a_full_budget_counts_the_purchase_too_and_no_budget_is_none():
    month = [job_row(owned_record()), job_row(cloud_record())]
    snap = build([], month, [], NOW, _settings(monthly_budget=50.0, budget_basis="full"))
    assert (snap.budget_basis, snap.budget_spend_usd, snap.budget_usd) == ("full", pytest.approx(4.0), 50.0)
    assert sum(snap.spend_usd.values()) == pytest.approx(snap.budget_spend_usd)
    snap = build([], month, [], NOW, _settings())
    assert snap.budget_usd is None and snap.budget_spend_usd == pytest.approx(3.2)
    # Unknown: this machine's GPUs (not read) and on-prem's (no inventory).
    assert [(o.total, o.utilization_percent) for o in snap.owned] == [(None, None), (None, None)]


def test_a_measured_power_under_its_rating_counts_at_the_rating():
    rec = owned_record(metrics={"telemetry": {"summary": {"source": "nvml", "energy_wh": 400.0}}})
    rec["decision"]["choice"]["kwh_price_usd"] = 0.15  # 0.06 USD measured, 0.2 rated
    snap = build([], [job_row(rec)], [], NOW, _settings())
    assert snap.spend_usd["owned_power"] == pytest.approx(0.2)
    assert snap.spend_usd["owned_amortized"] == pytest.approx(0.8)
