"""Backends that fail, and crashed submits on the cloud: bounded retries, then a definite
state with a message naming the backend, and never a second launch."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from orchestrator.base.errors import BackendError
from orchestrator.service.processes import submitter
from orchestrator.spec import load_spec_text
from tests.unit.providers.test_cloud import JOB, T0, orch, use_fake  # noqa: F401 (fixture)

WHERE = {"cloud": "runpod", "region": "US", "resources": "1x runpod({'H100': 1})"}


@pytest.fixture
def quick(orch):  # noqa: F811 (the fixture imported above)
    orch.settings = orch.settings.model_copy(update={"backend_retries": 3, "backend_backoff_s": 0.01})
    return orch


def spec():
    return load_spec_text(JOB.format(accel="H100:1"), "explore.yaml")


def history(o, rec):
    return [(h["status"], h["message"]) for h in o.core.store.history(rec.id)]


def test_a_backend_that_comes_back_within_the_retries_is_not_an_error(quick):
    fake = use_fake(quick, [{"status": "RUNNING", "start_at": T0, **WHERE}])
    rec = quick.submit(spec()).rec
    fake.down_for, fake.calls = 2, 0  # the API server misses two calls, then answers
    rec = quick.refresh(quick.get(rec.id))
    assert rec.status == "RUNNING" and fake.calls == 3


def test_a_backend_down_mid_job_leaves_a_definite_state_and_says_so(quick):
    fake = use_fake(quick, [{"status": "RUNNING", "start_at": T0, **WHERE}])
    rec = quick.refresh(quick.get(quick.submit(spec()).rec.id))
    assert rec.status == "RUNNING"
    fake.down_for, fake.calls = 100, 0
    started = time.monotonic()
    with pytest.raises(BackendError) as e:
        quick.refresh(quick.get(rec.id))
    assert time.monotonic() - started < 1.0  # bounded: 3 attempts, 0.01 + 0.02 s apart
    assert fake.calls == 3
    assert "SkyPilot" in e.value.message and "after 3 attempts" in e.value.message
    assert "sky api info" in e.value.hint
    rec = quick.get(rec.id)
    assert rec.status == "RUNNING"  # the last state known: it may well still run there
    last = history(quick, rec)[-1]
    assert last[0] == "RUNNING" and last[1].startswith("last known RUNNING: cannot read managed job")
    fake.down_for = 0  # back: followed again from where it was
    assert quick.refresh(quick.get(rec.id)).status == "RUNNING"


def test_a_backend_that_hangs_is_reported_like_one_that_is_down(quick):
    fake = use_fake(quick, [{"status": "RUNNING", "start_at": T0, **WHERE}])
    rec = quick.refresh(quick.get(quick.submit(spec()).rec.id))
    quick.settings = quick.settings.model_copy(update={"backend_timeout_s": 0.1})
    fake.slow_s = 2.0  # an API server that accepts the call and never answers in time
    started = time.monotonic()
    with pytest.raises(BackendError) as e:
        quick.refresh(quick.get(rec.id))
    assert time.monotonic() - started < 1.5  # 3 x 0.1 s and the waits, not 3 x 2 s
    assert "did not answer within 0.1 s (after 3 attempts)" in e.value.message
    assert quick.get(rec.id).status == "RUNNING"


def test_a_launch_that_keeps_failing_ends_failed_with_the_next_step(quick):
    use_fake(quick, [{"status": "RUNNING"}], down_for=100)
    with pytest.raises(BackendError) as e:
        quick.submit(spec())
    assert "after 3 attempts" in e.value.message and "sky check" in e.value.hint
    (rec,) = quick.core.store.list()
    assert rec.status == "FAILED" and rec.message.startswith("launch failed: ")
    assert [s for s, _ in history(quick, rec)] == ["PENDING", "FAILED"]


def dead_submitter() -> dict:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    return {**submitter(), "pid": int(proc.stdout)}  # that process has ended


def test_a_cloud_job_launched_by_an_orch_that_died_is_found_and_followed(quick):
    fake = use_fake(quick, [{"status": "RUNNING", "start_at": T0, **WHERE}])
    # The dead orch had recorded the job and sent the launch, but stored no backend id.
    rec = quick.core.store.create_job(name="lost", spec={}, kind="exploratory", target="cloud",
                                 fingerprint="f", info={"submitter": dead_submitter()})
    fake.launch(None, rec.id)
    rec = quick.refresh(quick.get(rec.id))
    assert rec.backend_id == rec.id and rec.status == "RUNNING"
    assert any("found on the backend" in (m or "") for _, m in history(quick, rec))


def test_a_cloud_job_never_launched_is_failed_only_after_the_launch_window(quick):
    use_fake(quick, [{"status": "RUNNING", "start_at": T0, **WHERE}])
    rec = quick.core.store.create_job(name="lost", spec={}, kind="exploratory", target="cloud",
                                 fingerprint="f", info={"submitter": dead_submitter()})
    # SkyPilot's queue can lag its launch request by minutes: not yet.
    assert quick.refresh(quick.get(rec.id)).status == "PENDING"
    quick.core.store.update(rec.id, created_at=time.time() - 700)
    rec = quick.refresh(quick.get(rec.id))
    assert rec.status == "FAILED" and rec.message.startswith("never launched")


def test_the_same_key_never_launches_a_cloud_job_twice(quick):
    fake = use_fake(quick, [{"status": "RUNNING", "start_at": T0, **WHERE}])
    first, _ = quick.submit(spec(), idempotency_key="k1")
    again, existing = quick.submit(spec(), idempotency_key="k1")
    assert again.id == first.id and existing and len(fake.launched) == 1
    # Killed after the launch but before storing it: a resubmit asks SkyPilot first.
    quick.core.store.update(first.id, backend_id=None, info={"submitter": dead_submitter()})
    again = quick.submit(spec(), idempotency_key="k1").rec
    assert len(fake.launched) == 1 and again.backend_id == first.id


def test_a_live_submitter_is_left_to_finish_its_launch(quick):
    use_fake(quick, [{"status": "RUNNING", "start_at": T0, **WHERE}])
    rec = quick.core.store.create_job(name="busy", spec={}, kind="exploratory", target="cloud",
                                 fingerprint="f", info={"submitter": submitter()},
                                 idempotency_key="k2")
    assert quick.refresh(quick.get(rec.id)).status == "PENDING"  # this process: alive
    again = quick.submit(spec(), idempotency_key="k2").rec
    assert again.id == rec.id and again.backend_id is None  # not launched behind its back
