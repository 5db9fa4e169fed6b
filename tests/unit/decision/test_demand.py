"""What a job holds: one answer for placement's wait estimate, the Ray job's metadata and
`orch serve`'s queue. A table of job files and offers, each with the one demand, checked
through every path that reads it. No Ray."""

from __future__ import annotations

import pytest

from orchestrator.base import redact
from orchestrator.decision.capacity import ClusterLoad, Running
from orchestrator.decision.demand import Demand, job_demand
from orchestrator.decision.facts import Facts, decide_on
from orchestrator.decision.models import Capacity
from orchestrator.decision.pricing import onprem_offer
from orchestrator.records.placement import PlacedOffer, Placement
from orchestrator.server.scheduler import queued_job
from orchestrator.service.orch import Orch
from orchestrator.service.planning import cluster_capacity
from orchestrator.settings import OwnedGpus, Settings
from orchestrator.spec import load_spec_text
from providers.onprem import OnPremProvider
from providers.ray_cluster import ClusterSnapshot, _job
from tests.conftest import job_row

A100 = {"target": "onprem", "gpu": "A100", "count": 1.0}
ON_CPU = {"target": "onprem", "gpu": None, "count": 0.0}


def on(gpu: str, count: float) -> dict:
    return {"target": "onprem", "gpu": gpu, "count": count}


pytestmark = pytest.mark.usefixtures("no_orch_env")  # placement reads the defaults


T = "train: {job: image-classification}\n"
# (job file, the offer placement chose or None before it has, what the job holds)
TABLE = [
    # train: one CPU per worker, or one GPU per worker (and no CPU) on GPUs
    (T + "scaling: {num_workers: 2, use_gpu: false}\n", None, Demand(cpus=2)),
    (T + "scaling: {num_workers: 2}\n", None, Demand(cpus=2)),
    (T + "scaling: {num_workers: 2}\n", ON_CPU, Demand(cpus=2)),
    (T + "scaling: {num_workers: 4, use_gpu: true}\n", None, Demand(gpus=4)),
    # auto on the GPU placement chose (for this job or for the offer it prices)
    (T + "scaling: {num_workers: 1}\n", on("RTX4090", 1), Demand(gpus=1)),
    (T + "scaling: {num_workers: 2}\n", on("A100", 2), Demand(gpus=2)),
    # auto with fewer GPUs than workers: Ray Train's workers run on CPUs (the runner's rule)
    (T + "scaling: {num_workers: 2}\n", A100, Demand(cpus=2)),
    # asking for more than the workers use holds what was asked, as it was priced
    (T + "scaling: {num_workers: 3}\nresources: {cpus: 8}\n", ON_CPU,
     Demand(cpus=8)),
    (T + "scaling: {num_workers: 3}\nresources: {cpus: 2+}\n", ON_CPU,
     Demand(cpus=3)),
    (T + "scaling: {num_workers: 2}\nresources: {accelerators: A100:4}\n",
     on("A100", 4), Demand(gpus=4)),
    (T + "scaling: {num_workers: 2}\nresources: {accelerators: A100:1}\n", A100,
     Demand(cpus=2)),
    (T + "scaling: {num_workers: 2, use_gpu: true}\nresources: {accelerators: A100:1}\n", A100,
     Demand(gpus=2)),
    # run: one process; its accelerators, else resources.cpus (at least one)
    ("run: echo hi\n", None, Demand(cpus=1)),
    ("run: echo hi\n", ON_CPU, Demand(cpus=1)),
    ("run: make -j4\nresources: {cpus: 4}\n", None, Demand(cpus=4)),
    ("run: make\nresources: {cpus: 0.5}\n", None, Demand(cpus=1)),
    ("run: python t.py\nresources: {accelerators: {H100: 8}}\n", None, Demand(gpus=8)),
    ("run: python t.py\nresources: {accelerators: {H100: 8}}\n", on("H100", 8), Demand(gpus=8)),
    ("run: python t.py\nresources: {accelerators: [H100:2, A100:4]}\n", None, Demand(gpus=2)),
    ("run: python t.py\nresources: {accelerators: [H100:2, A100:4]}\n", on("A100", 4),
     Demand(gpus=4)),
    ("run: python t.py\nscaling: {use_gpu: true}\n", None, Demand(gpus=1)),
    ("run: python t.py\nscaling: {use_gpu: true}\n", on("A100", 1), Demand(gpus=1)),
    # use_gpu: false holds no GPU, whatever the accelerators steered placement to
    ("run: echo\nscaling: {use_gpu: false}\nresources: {accelerators: A100:1}\n", None,
     Demand(cpus=1)),
    (T + "scaling: {num_workers: 2, use_gpu: false}\n"
     "resources: {accelerators: A100:1}\n", A100, Demand(cpus=2)),
]


@pytest.mark.parametrize("text, choice, holds", TABLE)
def test_every_path_agrees_on_what_a_job_holds(tmp_path, text, choice, holds):
    spec = load_spec_text("name: j\n" + text)
    stored = redact.redact_spec(spec.model_dump(mode="json"))  # what the job store keeps
    decision = {"choice": choice, "estimate": {"hours": 1.0}}
    placed = None if choice is None else PlacedOffer(**choice)
    assert job_demand(spec, placed) == holds
    assert job_demand(stored, placed) == holds
    # What `orch serve`'s queue reserves for the recorded job.
    rec = {"id": "orch-j", "name": "j", "status": "PENDING", "target": "onprem", "spec": stored,
           "decision": decision, "priority": 0, "created_at": 0.0}
    assert queued_job(job_row(rec)).demand == holds
    # What orch submits as the Ray job's metadata, and what any orch reads back from the
    # cluster (for its wait estimate and, for another store's jobs, the queue).
    orch = Orch(Settings(home=tmp_path / "home", mode="hybrid"))
    meta = orch.launch_for("orch-j", spec, "onprem", Placement.read(decision), secrets={}).tags
    assert (meta.cpus, meta.gpus) == (holds.cpus, holds.gpus)
    seen = _job({"submission_id": "orch-j", "status": "RUNNING",
                 "metadata": meta.as_strings()})  # as Ray keeps it
    assert (seen.orch_id, seen.cpus, seen.gpus) == ("orch-j", holds.cpus, holds.gpus)


def test_a_stored_spec_with_keys_left_out_reads_as_the_defaults():
    assert job_demand({"train": {"job": "x"}}) == Demand(cpus=1)
    assert job_demand({"run": "x", "resources": {"accelerators": "A100"}}) == Demand(gpus=1)
    both = {"run": "x", "resources": {"accelerators": ["T4", "A100:2"]}}
    assert job_demand(both) == Demand(gpus=1)  # the first, until placement chooses


GPUS = OwnedGpus(gpu="A100", count=4, purchase_price=40000, watts=400)
CPUS = OwnedGpus(gpu="CPU", count=2, cpus=16, purchase_price=6000, watts=300)
# Every GPU held for 10 more minutes; every CPU free.
LOAD = ClusterLoad(free_cpus=16, free_gpus=0, jobs=(Running(0, 4, 600),))


def _plan(tmp_path, text: str):
    settings = Settings(home=tmp_path / "home", mode="hybrid", onprem=[GPUS, CPUS],
                        max_wait_minutes=5)
    spec = load_spec_text("name: j\nschedule: {kind: steady}\nplacement: {allow: [onprem]}\n"
                          "estimate: {hours: 1}\n" + text)
    capacity = Capacity(source="test", load=LOAD)
    offers = [onprem_offer(inv, 0.15) for inv in (GPUS, CPUS)]
    facts = Facts(offers=offers, capacity=capacity, history=(), spent_this_month=0.0)
    return spec, settings, decide_on(spec, settings, facts, fingerprint="fp", now=1_700_000_000.0)


def test_placement_estimates_each_offers_wait_with_what_the_job_would_hold_there(tmp_path):
    # use_gpu auto: on the GPUs it holds two (busy 10 min); on the CPU pool two CPUs (free).
    spec, settings, d = _plan(tmp_path, T + "scaling: {num_workers: 2}\n")
    waits = {a.offer.gpu: a.wait_minutes for a in d.alternatives}
    assert waits == {"A100": 10.0, None: 0.0}
    assert d.choice.offer.gpu is None and d.choice.wait_minutes == 0.0
    _agrees(tmp_path, spec, settings, d)


def test_a_job_placed_on_busy_gpus_waits_for_what_it_will_hold(tmp_path):
    # A job that can only use the GPUs queues for them; its record says what it waits for.
    spec, settings, d = _plan(tmp_path, "run: python t.py\nresources: {accelerators: A100:2}\n")
    assert d.target == "onprem" and d.choice.wait_minutes == 10.0, d.reasons
    _agrees(tmp_path, spec, settings, d)


def _agrees(tmp_path, spec, settings, d):
    """The chosen offer's wait was estimated with exactly what the Ray metadata records
    and the queue reserves."""
    decision = d.to_dict()
    meta = Orch(settings).launch_for("orch-j", spec, "onprem", Placement.read(decision),
                                     secrets={}).tags
    holds = Demand(meta.cpus, meta.gpus)
    rec = {"id": "orch-j", "name": "j", "status": "PENDING", "target": "onprem",
           "decision": decision, "priority": 0, "created_at": 0.0,
           "spec": redact.redact_spec(spec.model_dump(mode="json"))}
    assert queued_job(job_row(rec)).demand == holds
    again = LOAD.start(holds, "test")
    assert (0.0 if again.can_start_now else again.wait_minutes) == d.choice.wait_minutes


def test_what_running_jobs_hold_by_their_records_counts_when_ray_shows_less():
    # A run: job asks Ray for nothing, so Ray shows its 8 GPUs free; orch's record says
    # it holds them, and the estimate, like the queue, goes by the larger of the two.
    jobs = [Running(0, 8, 600), Running(0, 4, None, queued=True)]
    load = ClusterLoad.of(Demand(64, 8), Demand(2, 0), jobs)
    assert (load.free_cpus, load.free_gpus) == (62, 0)
    assert ClusterLoad.of(Demand(64, 8), Demand(2, 8), []).free_gpus == 0  # Ray's view, more


def test_the_cluster_estimate_reads_each_jobs_holdings_from_its_ray_metadata(tmp_path,
                                                                             monkeypatch):
    now = 1_700_000_000.0
    spec = load_spec_text("name: big\nrun: python t.py\nresources: {accelerators: A100:8}\n")
    meta = Orch(Settings(home=tmp_path / "home")).launch_for(
        "orch-old", spec, "onprem", Placement(choice=on("A100", 8), estimate={"hours": 1.0}),
        secrets={}).tags
    running = _job({"submission_id": "orch-old", "status": "RUNNING",
                    "start_time": (now - 3000) * 1000,  # 50 of its 60 minutes gone
                    "metadata": meta.as_strings()})
    snap = ClusterSnapshot("http://head:8265", (), {"CPU": 64.0, "GPU": 8.0},
                           {"CPU": 0.0, "GPU": 0.0}, (running,), now)
    monkeypatch.setattr(OnPremProvider, "capacity", lambda self: snap)  # as a plan reads it
    settings = Settings(home=tmp_path / "home", ray_address="http://head:8265")
    cap = cluster_capacity(spec, settings, now, known={"orch-old"})  # a job of this store
    assert cap.can_start_now is False and cap.wait_minutes == pytest.approx(10.0)
    assert "0/8 GPUs free" in cap.source
    # The same metadata on a Ray job this store never launched (a ghost another job
    # submitted with made-up `orch_job` and `gpus`): it holds what Ray reports, nothing.
    ghost = cluster_capacity(spec, settings, now, known={"orch-other"})
    assert ghost.can_start_now is True and "8/8 GPUs free" in ghost.source
    # 90 minutes into its 60: not "any moment now" but half its time so far again (an
    # estimate as written may run 2x long: decision.capacity.expected_remaining_s).
    over = _job({"submission_id": "orch-old", "status": "RUNNING", "start_time": (now - 5400) * 1000,
                 "metadata": meta.as_strings()})
    snap = ClusterSnapshot("http://head:8265", (), {"CPU": 64.0, "GPU": 8.0},
                           {"CPU": 0.0, "GPU": 0.0}, (over,), now)
    cap = cluster_capacity(spec, Settings(home=tmp_path / "home", ray_address="http://head:8265"),
                           now, known={"orch-old"})
    assert cap.wait_minutes == pytest.approx(45.0)
