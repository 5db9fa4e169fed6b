"""`orch serve` places a queued exploratory job again once its expected start has passed
(issue 49): `Store.replace_queued` changes a queued job's placement in one transaction, on
SQLite and on PostgreSQL (`--store both`), and the scheduler's pass calls it before it
launches. The planner is the real one (owned A100s, the example catalog's clouds); only
the backends are fakes that record launches, and the onprem one cannot be read (busy)."""

from __future__ import annotations

import os
import time

import pytest

from orchestrator.base.errors import BackendError
from orchestrator.server.scheduler import Scheduler, queue_info
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from providers.base import HasCapacity
from tests.unit.service.test_plan_is_submit import A100S, EXPLORE, HYBRID, NIGHTLY, TIGHT


class Backend:
    """Records launches; rents what each job needs (the cloud)."""

    address = "fake://"
    running = True

    def __init__(self):
        self.launched: list[str] = []

    def prepare(self):
        pass

    def submit(self, launch):
        self.launched.append(launch.job_id)
        return "b-" + launch.job_id


class Cluster(Backend, HasCapacity):
    """A fixed-size target whose capacity cannot be read now: its queue waits."""

    def capacity(self):
        raise BackendError("the cluster is busy (test)")


@pytest.fixture
def world(tmp_path, monkeypatch, store_kind):
    """Settings with four owned A100s and the example clouds (credentials everywhere, no
    GPU here), on this run's store; the backends by target."""
    monkeypatch.setattr("orchestrator.service.fingerprint.fingerprint",
                        lambda spec, **_: ("fp-explore", False))
    monkeypatch.setattr("orchestrator.offers.local.detect_gpus", lambda: {})
    monkeypatch.setattr("providers.cloud.enabled_clouds", lambda cs: (list(cs), {}))
    backends = {"onprem": Cluster(), "cloud": Backend()}
    monkeypatch.setattr("orchestrator.service.core.Core.provider",
                        lambda self, target: backends[target])
    settings = Settings(home=tmp_path / "home", **{**HYBRID, "onprem": [A100S]},
                        database_url=os.environ.get("ORCH_DATABASE_URL"))
    assert (settings.database_url is not None) == (store_kind == "postgresql")
    return settings, backends


def _queue(sched: Scheduler, text: str = EXPLORE) -> str:
    with sched.session() as orch:
        spec = load_spec_text(text, "job.yaml")
        rec = orch.record(spec, owner="alice", info=queue_info(spec)).rec
        sched.hold(rec.id, spec)
        return rec.id


def _claim_the_owned_gpus(sched: Scheduler) -> None:
    """A cron run due in 30 minutes on all four A100s, with no slack: owned GPUs are no
    longer the exploratory job's best choice."""
    with sched.session() as orch:
        orch.core.store.add_schedule(name="nightly", owner=None, cron="0 3 * * *", source_text=NIGHTLY,
                                source_file=None, next_at=time.time() + 1800,
                                spec=load_spec_text(TIGHT, "nightly.yaml").model_dump(mode="json"))


def test_a_late_exploratory_job_is_placed_again_and_launched_in_the_same_pass(world):
    settings, backends = world
    now = [time.time()]
    sched = Scheduler(settings, clock=lambda: now[0])
    job = _queue(sched)
    steady = _queue(sched, NIGHTLY)  # steady work waits for the owned GPUs: never moved
    with sched.session() as orch:
        rec = orch.get(job)
        assert (rec.kind, rec.target, rec.choice.wait_minutes) == ("exploratory", "onprem", 0)
        assert sched.launch_queue(orch) == []  # the cluster cannot be read: it waits
    _claim_the_owned_gpus(sched)
    with sched.session() as orch:
        assert sched.launch_queue(orch) == []  # not late yet: its promise stands
        assert orch.get(job).target == "onprem"
        now[0] += 120  # its expected start (now + 0 min) passed over a minute ago
        assert sched.launch_queue(orch) == [job]
        rec, kept = orch.get(job), orch.get(steady)
        history = orch.core.store.history(job)
    assert backends["cloud"].launched == [job] and backends["onprem"].launched == []
    assert rec.target == "cloud" and rec.decision.target == "cloud" and rec.info.placed_at
    assert rec.backend_id == "b-" + job and "queued" not in rec.info.model_dump(exclude_unset=True)
    moved = [h["message"] for h in history if h["message"].startswith("placed again on ")]
    assert len(moved) == 1 and "x1): its expected start on onprem (" in moved[0], history
    assert (kept.target, kept.backend_id, kept.info.placed_at) == ("onprem", None, None)


def test_a_queued_placement_changes_only_while_nobody_launches_it(world):
    settings, _ = world
    sched = Scheduler(settings)
    job = _queue(sched)
    with sched.session() as orch:
        store = orch.core.store
        onprem = store.get(job).decision
        cloud = onprem.model_copy(update={"target": "cloud"})
        assert not store.replace_queued(job, cloud, "cloud")  # moved by another server meanwhile
        assert store.replace_queued(job, onprem, "onprem")  # a new expected start, no news
        assert [h["message"] for h in store.history(job)] == ["recorded"]
        assert store.get(job).info.placed_at is not None
        assert store.claim(job, "otherhost/1/1.0")  # being launched: left as it is
        assert not store.replace_queued(job, cloud, "onprem", "moved")
        other = _queue(sched)
        store.update(other, cancel_requested=True)
        assert not store.replace_queued(other, cloud, "onprem", "moved")
        assert store.replace_queued(_queue(sched), cloud, "onprem", "moved")
        assert (store.get(job).target, store.get(other).target) == ("onprem", "onprem")
