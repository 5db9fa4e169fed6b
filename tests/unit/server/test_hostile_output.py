"""A running job's printed lines against `orch serve` (issue 47): a malformed `::orch::` line
costs that job alone, never the scheduler's pass nor another user's list."""

from __future__ import annotations

import pytest

from orchestrator.server.scheduler import Scheduler, queue_info
from orchestrator.spec import load_spec_text
from providers.base import BackendState

# What a hostile `run:` job printed at e407815: each one stopped every pass of the scheduler.
HOSTILE = [
    '::orch::{"event":"telemetry","rank":0,"summary":{"samples":1}}',
    '::orch::{"event":"telemetry","rank":"x","summary":{"samples":"many","mean_util":"a"}}',
    '::orch::{"event":"worker","rank":"zero","node_id":"n"}',
    '::orch::' + '[' * 100_000,  # deeper than json's recursion
    '::orch::{"event":"telemetry","rank":0,"summary":{"samples":2,"mean_util":1e999,'
    '"p10_util":1,"peak_mem_gb":1}}',
]


class HostileBackend:
    """Launches by recording; every launched job is running and printed the hostile lines."""

    address = "fake://"
    running = True

    def __init__(self, lines):
        self.launched: list = []
        self.text = "\n".join(["epoch 1", *lines, "epoch 2"]) + "\n"

    def prepare(self):
        pass

    def submit(self, launch):
        self.launched.append(launch.job_id)
        return "b-" + launch.job_id

    def gone(self):
        return None

    def state(self, backend_id, info=None):
        return BackendState("RUNNING", "running")

    def logs(self, backend_id):
        return self.text

    def cancel(self, backend_id):
        pass


def _queue(sched: Scheduler, name: str, owner: str = "alice") -> str:
    with sched.session() as orch:
        spec = load_spec_text(f"name: {name}\nrun: sleep 1000\n", "<job>")
        rec = orch.record(spec, owner=owner, info=queue_info(spec)).rec
        sched.hold(rec.id, spec)
        return rec.id


@pytest.mark.parametrize("line", HOSTILE, ids=["no-mean", "bad-types", "bad-rank", "deep",
                                               "infinite"])
def test_a_malformed_line_costs_its_job_alone(settings, monkeypatch, line):
    from orchestrator.service.core import Core

    backend = HostileBackend([line])
    monkeypatch.setattr(Core, "provider", lambda self, target: backend)
    sched = Scheduler(settings)
    hostile = _queue(sched, "hostile", owner="mallory")
    sched.tick()  # launches it: from now on it is RUNNING and prints the line
    assert backend.launched == [hostile]
    passes = []
    for i in range(3):  # each pass as the scheduler's loop runs it
        job = _queue(sched, f"next{i}")
        try:
            sched.tick()
        except Exception:
            pass
        passes.append(job in backend.launched)
    assert passes == [True, True, True]  # before issue 47: [False, False, False]
    with sched.session() as orch:
        rows = orch.list()  # what GET /v1/jobs does, for any user
        assert {r.id for r in rows} >= {hostile}
        rec = orch.get(hostile)
    assert rec.status == "RUNNING"
    dropped = rec.metrics.get("dropped_events") or {}
    assert dropped.get("count", 0) >= 1, rec.metrics  # the job carries a note of it
