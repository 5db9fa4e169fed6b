"""A running job's printed lines against `orch serve` (issue 47): a malformed `::orch::` line
costs that job alone, never the scheduler's pass nor another user's list."""

from __future__ import annotations

import pytest

from orchestrator.server.scheduler import Scheduler, queue_info
from orchestrator.service import following
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
        rows = orch.job_records()  # what GET /v1/jobs does, for any user
        assert {r.id for r in rows} >= {hostile}
        rec = orch.get(hostile)
    assert rec.status == "RUNNING"
    dropped = rec.metrics.dropped_events
    assert dropped is not None and dropped.count >= 1, rec.metrics  # the job carries a note of it


VALUE = "hf_Secret_Value_9x"
ESCAPED = "".join(f"\\u{ord(c):04x}" for c in VALUE)  # as a `run:` job can write it


def test_a_secret_written_json_escaped_is_redacted_in_metrics_stored_and_served(
        settings, monkeypatch, api):
    from orchestrator.service import dashboard, views
    from orchestrator.service.core import Core

    lines = ['::orch::{"event":"report","index":1,"metrics":{"' + ESCAPED + '":1.5,'
             '"tok":"' + ESCAPED + '","glued":"x' + ESCAPED + 'y","list":["' + ESCAPED + '"]}}']
    backend = HostileBackend(lines)
    monkeypatch.setattr(Core, "provider", lambda self, target: backend)
    sched = api.sched
    with sched.session() as orch:
        spec = load_spec_text(f"name: leak\nrun: sleep 1000\nenvs: {{HF_TOKEN: {VALUE}}}\n",
                              "<job>")
        job = orch.record(spec, owner="mallory", info=queue_info(spec)).rec.id
        sched.hold(job, spec)
    sched.tick()  # launched, then checked: its metrics read from its lines and stored
    sched.tick()
    assert backend.launched == [job]
    # Before issue 47 the decoded value was stored as a metric's name and value.
    assert VALUE not in api.store.get(job).model_dump_json()
    served = [api("GET", p, "bob").text for p in (f"/v1/jobs/{job}", "/v1/jobs",
                                                   f"/v1/jobs/{job}/progress")]
    assert all(VALUE not in s for s in served) and "<redacted>" in served[0], served[0]
    # A row stored before (as e407815 stored it) is redacted again on the way out, by digest
    # where the server holds the value no longer.
    api.store.update(job, metrics={VALUE: 1.0, "tok": VALUE, "url": f"https://h/?t={VALUE}&a=1"})
    sched.forget(job)
    with sched.session() as orch:
        orch.core.secrets.pop(job, None)
        shown = views.shown(orch.core, orch.core.store.get(job))
        points = dashboard.series(backend.text, following.redactor(orch.core, orch.core.store.get(job)))
    assert VALUE not in shown.model_dump_json(), shown.metrics
    assert VALUE not in str([p.model_dump() for p in points])


def test_a_finished_jobs_kept_log_is_served_as_kept(settings, monkeypatch, api):
    """A finished job's log was redacted whole when it was kept: reading it searches it no
    more (a digest search of 2 MB of `a-a-a-...` cost 4.7 CPU s a read here, 74 s on the
    red team's server), and holds no value."""
    from orchestrator.base import redact

    def searched(self, text):
        raise AssertionError("a kept log was searched by digest again")

    key = redact.store_key(settings.home)
    salt = redact.new_salt()
    rec = api.store.create_job(
        name="loud", spec={}, kind=None, target="local", fingerprint=None, owner="alice",
        info={"secret_salt": salt, "secret_hmacs": redact.digests([VALUE], salt, key),
              "secret_lengths": redact.lengths([VALUE])})
    text = "a-" * 50_000 + "\ntoken is <redacted>.\n"
    api.store.keep_log(rec.id, text)
    api.store.set_status(rec.id, "SUCCEEDED", "done")
    monkeypatch.setattr(redact.Redactor, "_search", searched)
    got = api("GET", f"/v1/jobs/{rec.id}/logs", "bob")
    assert got.status_code == 200 and got.text == text


class EndedBackend(HostileBackend):
    def state(self, backend_id, info=None):
        return BackendState("SUCCEEDED", "ended")


def test_the_replica_holding_a_jobs_values_finishes_it_and_keeps_its_log_redacted_by_them(
        settings, monkeypatch):
    """Issue 47: the lease holder finished a job a standby launched with values given to the
    standby, and kept its log redacted by digest alone: glued forms (xVALUE) were kept."""
    from orchestrator.records import with_info
    from orchestrator.service.core import Core

    backend = EndedBackend([f"token x{VALUE}y", f"pw:{VALUE}"])
    monkeypatch.setattr(Core, "provider", lambda self, target: backend)
    leader, standby = Scheduler(settings), Scheduler(settings)
    standby.me = "otherhost/2/2.0"  # another host: alive as far as this one can tell
    with standby.session() as orch:
        spec = load_spec_text(f"name: s\nrun: sleep 1\nenvs: {{HF_TOKEN: {VALUE}}}\n", "<job>")
        rec = orch.record(spec, owner="alice", info=queue_info(spec)).rec
        standby.hold(rec.id, spec)
        orch.core.store.update(rec.id, info=with_info(rec, held_by=standby.me))  # as POST does
        job = rec.id
    with leader.session() as orch:
        assert leader.launch_queue(orch) == []  # handed to the standby
    with standby.session() as orch:
        assert standby.launch_held(orch) == [job]
    with leader.session() as orch:
        leader.reconcile(orch)  # the job ended: the lease holder leaves it to its holder
        assert orch.get(job).status != "SUCCEEDED"
        orch.job_records()  # nor does any user's list finish it there
        assert orch.get(job).status != "SUCCEEDED"
    with standby.session() as orch:
        standby.reconcile_held(orch)
        done = orch.get(job)
        kept = orch.core.store.kept_log(job)
    assert done.status == "SUCCEEDED" and kept is not None
    assert VALUE not in kept and "token x<redacted>y" in kept, kept


def test_one_user_cannot_fill_the_queue(api):
    """Issue 47: 315 jobs queued by one user in 35 s; now serve_queued_per_user (100 by
    default) at once, then 429 for that user alone."""
    api.sched.settings = api.sched.settings.model_copy(update={"serve_queued_per_user": 2})
    job = {"spec": "name: q\nrun: sleep 1\n"}
    codes = [api("POST", "/v1/jobs", "alice", json=job).status_code for _ in range(2)]
    r = api("POST", "/v1/jobs", "alice", json=job)
    assert codes == [201, 201], codes
    assert r.status_code == 429 and "serve_queued_per_user 2" in r.json()["error"], r.json()
    assert api("POST", "/v1/jobs", "bob", json=job).status_code == 201
