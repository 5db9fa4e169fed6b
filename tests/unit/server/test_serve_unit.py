"""`orch serve` without a process or a backend: the cron rule, tokens, the scheduler's tick
on a fake clock, the queue, and the API in-process (FastAPI's test client, no network)."""

from __future__ import annotations

import hashlib
import re
import time

import pytest

from orchestrator.base.errors import InputError
from orchestrator.records import JobRow
from orchestrator.records.caller import Caller, may_change
from orchestrator.server import auth
from orchestrator.server.scheduler import Scheduler, queue_info
from orchestrator.service.respec import spec_from_record
from orchestrator.spec import load_spec_text
from orchestrator.store import NameTaken, iso
from tests.conftest import job_row, store_at, store_text

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z, a whole minute
DAY = 86_400.0


# -- tokens and permissions -------------------------------------------------------------------

def test_tokens_are_random_and_kept_only_as_their_sha256():
    token, digest = auth.new_token()
    other, _ = auth.new_token()
    assert token != other and re.fullmatch(r"orch_[A-Za-z0-9_-]{43}", token)
    assert digest == hashlib.sha256(token.encode()).hexdigest() == auth.hash_token(token)
    assert auth.bearer(f"Bearer {token}") == token and auth.bearer(f"bearer  {token} ") == token
    for bad in (None, "", "Bearer", "Basic abc", f"Bearer {token} x", token):
        assert auth.bearer(bad) is None, bad


def test_only_the_owner_or_an_admin_may_cancel():
    alice, bob, root = Caller("alice"), Caller("bob"), Caller("root", admin=True)
    assert may_change(alice, "alice") and not may_change(bob, "alice")
    assert may_change(root, "alice") and may_change(root, None)
    assert not may_change(alice, None)  # submitted embedded: the server's, admins only
    assert auth.check_name("alice@lab") is None and auth.check_name("a b") and auth.check_name("")


def test_token_store_hashes_revokes_and_reissues(tmp_path):
    store = store_at(tmp_path)
    token, digest = auth.new_token()
    store.add_token("alice", digest)
    assert store.token_by_hash(digest)["name"] == "alice"
    assert digest in store_text(tmp_path) and token not in store_text(tmp_path)
    with pytest.raises(NameTaken, match="a token named 'alice' exists"):
        store.add_token("alice", auth.new_token()[1])
    store.revoke_token("alice")
    assert store.token_by_hash(digest) is None
    _, new = auth.new_token()
    store.add_token("alice", new, admin=True)  # a revoked name may get a new token
    assert store.token_by_hash(digest) is None and store.token_by_hash(new)["admin"] is True
    assert [t["name"] for t in store.tokens()] == ["alice"]


# -- the scheduler on a fake clock ------------------------------------------------------------

CRON_JOB = "name: tick\nrun: echo tick\nschedule: {cron: '* * * * *'}\n"


def _register(sched: Scheduler, text: str = CRON_JOB, now: float = T0 + 1, owner="alice"):
    from orchestrator.server.intake import register

    with sched.session() as orch:
        return register(orch, load_spec_text(text, "<job>"), text, None, owner, now=now)


def _jobs(settings) -> list[JobRow]:
    store = store_at(settings.home)
    try:
        return sorted(store.list(limit=100), key=lambda r: r.created_at)
    finally:
        store.close()


def _cron(sched: Scheduler, now: float) -> list[str]:
    with sched.session() as orch:
        return sched.run_cron(orch, now)


def test_every_minute_runs_each_slot_once_across_restarts_crashes_and_downtime(settings):
    sched = Scheduler(settings)
    s = _register(sched)
    assert s["next_at"] == iso(T0 + 60)
    assert _cron(sched, T0 + 30) == []
    first = _cron(sched, T0 + 65)
    assert len(first) == 1
    rec = _jobs(settings)[0]
    assert rec.idempotency_key == f"cron:{s['id']}:2027-01-15T08:01:00Z"
    assert rec.owner == "alice" and rec.info.queued is True
    assert _cron(sched, T0 + 80) == []  # the same minute again
    assert _cron(Scheduler(settings), T0 + 90) == []  # a restarted server: still nothing
    # A crash after the slot's job was recorded but before the schedule moved on:
    again = Scheduler(settings)
    with again.session() as orch:
        job_id, _ = again._submit_slot(orch, orch.core.store.schedule(s["id"]), T0 + 120)
    assert _cron(again, T0 + 125) == [job_id]  # found by its key, not recorded twice
    assert len(_jobs(settings)) == 2
    # Down from T0+125 to T0+605: slots 180..540 (7) are skipped, 600 runs once.
    assert len(_cron(Scheduler(settings), T0 + 605)) == 1
    jobs = _jobs(settings)
    assert [j.idempotency_key.rsplit(":", 3)[-3:] for j in jobs] == [
        ["2027-01-15T08", "01", "00Z"], ["2027-01-15T08", "02", "00Z"],
        ["2027-01-15T08", "10", "00Z"]]
    store = store_at(settings.home)
    log = [e["message"] for e in store.schedule_events(s["id"])]
    assert log[0] == "registered: cron '* * * * *'"
    assert log[1] == f"slot 2027-01-15T08:01:00Z: queued {jobs[0].id}"
    assert log[2] == (f"slot 2027-01-15T08:02:00Z: {jobs[1].id} was recorded for it before; "
                      "not run again")
    assert log[3] == ("skipped 7 slot(s), 2027-01-15T08:03:00Z to 2027-01-15T08:09:00Z: missed "
                      "while the server was down or busy (only the latest missed slot runs)")
    assert log[4] == f"slot 2027-01-15T08:10:00Z: queued {jobs[2].id}"
    assert store.schedule(s["id"]).next_at == T0 + 660


def test_a_cron_job_never_stores_a_secret_value(settings, monkeypatch):
    sched = Scheduler(settings)
    with pytest.raises(InputError) as e:
        _register(sched, CRON_JOB + "envs:\n  HF_TOKEN: hf_abcdef\n")
    assert e.value.message == ("<job>:5: envs.HF_TOKEN: a scheduled job cannot keep a secret "
                               "value in its job file: the server stores the file to run it again")
    assert "secrets: {HF_TOKEN: null}" in e.value.hint
    with pytest.raises(InputError, match=r"secrets\.KEY: a scheduled job cannot keep"):
        _register(sched, CRON_JOB + "secrets: {KEY: s3cret}\n")
    with pytest.raises(InputError, match=r"secrets\.KEY: this server fills only the names its admin lists"):
        _register(sched, CRON_JOB + "secrets: {KEY: null}\n")  # not in serve_env_secrets for alice
    sched = Scheduler(settings.model_copy(update={"serve_env_secrets": {"alice": ["KEY"]}}))
    with pytest.raises(InputError, match="secrets.KEY: listed in serve_env_secrets, but the server.s environment does not set it"):
        _register(sched, CRON_JOB + "secrets: {KEY: null}\n")
    monkeypatch.setenv("KEY", "from-the-server")
    s = _register(sched, CRON_JOB + "secrets: {KEY: null}\n")
    store = store_at(settings.home)
    assert "from-the-server" not in str(store.schedule(s["id"]))


# -- the queue --------------------------------------------------------------------------------

class FakeProvider:
    """Records launches instead of running them."""

    address = "fake://"
    running = True

    def __init__(self):
        self.launched: list = []

    def prepare(self):
        pass

    def submit(self, launch):
        self.launched.append(launch)
        return "b-" + launch.job_id


@pytest.fixture
def fake(monkeypatch):
    from orchestrator.service.core import Core

    provider = FakeProvider()
    monkeypatch.setattr(Core, "provider", lambda self, target: provider)
    return provider


def _queue(sched: Scheduler, text: str, priority: int = 0, owner: str = "alice") -> str:
    """What POST /v1/jobs does: record, queued, the spec held in memory."""
    with sched.session() as orch:
        spec = load_spec_text(text, "<job>")
        rec = orch.record(spec, owner=owner, priority=priority, info=queue_info(spec)).rec
        sched.hold(rec.id, spec)
        return rec.id


def test_the_queue_launches_by_priority_then_age_each_job_once(settings, fake):
    sched = Scheduler(settings)
    a = _queue(sched, "name: a\nrun: echo a\n")
    b = _queue(sched, "name: b\nrun: echo b\n", priority=5)
    c = _queue(sched, "name: c\nrun: echo c\n")
    with sched.session() as orch:
        assert [r.id for r in orch.core.store.queued()] == [b, a, c]
        assert orch.refresh(orch.get(a)).status == "PENDING"  # queued: left alone
        assert sched.launch_queue(orch) == [b, a, c]
        assert sched.launch_queue(orch) == []
        assert orch.get(a).backend_id == "b-" + a
        assert "queued" not in orch.get(a).info.model_dump(exclude_unset=True)
    assert [launch.job_id for launch in fake.launched] == [b, a, c]


def test_a_second_server_never_launches_a_claimed_job(settings, fake):
    sched = Scheduler(settings)
    job = _queue(sched, "name: a\nrun: echo a\n")
    store = store_at(settings.home)
    assert store.claim(job, "otherhost/1/1.0")  # a server on another host has it
    assert not store.claim(job, sched.me)  # taken: only from its launcher
    with sched.session() as orch:
        assert sched.launch_queue(orch) == []  # another host's launcher counts as alive
    assert fake.launched == []


def test_after_a_restart_a_queued_job_launches_from_the_store_unless_it_held_a_secret(
        settings, fake, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "from-env-1234")
    settings = settings.model_copy(update={"serve_env_secrets": {"alice": ["WANDB_API_KEY"]}})
    first = Scheduler(settings)
    plain = _queue(first, "name: p\nrun: echo $SEED\nenvs: {SEED: 3}\nsecrets: {WANDB_API_KEY: null}\n")
    literal = _queue(first, "name: l\nrun: echo hi\nenvs: {HF_TOKEN: hf_literal_value}\n")
    restarted = Scheduler(settings)  # nothing in memory
    with restarted.session() as orch:
        assert restarted.launch_queue(orch) == [plain]
        lost = orch.get(literal)
    launch = fake.launched[0]
    assert launch.env["SEED"] == "3" and launch.secrets == {"WANDB_API_KEY": "from-env-1234"}
    assert lost.status == "FAILED" and lost.message == (
        f"launch failed: {literal}: it launches after its submit (queued, or a later stage of a "
        "pipeline), and the secret values it was given (HF_TOKEN) are never stored")


def test_a_spec_survives_its_stored_form(settings):
    from orchestrator.base import redact

    text = ("name: full\ntrain: {job: image-classification, config: {epochs: 2, lr: 0.1}}\n"
            "resources: {accelerators: {H100: 1, A100-80GB: 2}, cpus: 8+, use_spot: true}\n"
            "scaling: {num_workers: 2, use_gpu: false}\nfile_mounts: {/data: 's3://b/d'}\n"
            "checkpoint: {storage: /tmp/c, num_to_keep: 1}\nbudget: {max_cost: 3}\n")
    spec = load_spec_text(text, "/srv/jobs/full.yaml")
    rec = job_row({"id": "orch-x", "name": "full", "status": "PENDING",
                   "spec": redact.redact_spec(spec.model_dump(mode="json")),
                   "info": queue_info(spec), "source_file": "/srv/jobs/full.yaml"})
    again = spec_from_record(rec)
    assert again.model_dump(mode="json") == spec.model_dump(mode="json")
    assert again.source_file == "/srv/jobs/full.yaml"


# -- the API in-process ------------------------------------------------------------------------

def test_every_endpoint_but_health_and_the_page_needs_a_valid_token(api):
    assert api("GET", "/healthz").status_code == 200
    page = api("GET", "/")
    assert page.status_code == 200 and '<script type="module" src="/static/app.js">' in page.text
    assert "script-src 'self'; style-src 'self'" in page.headers["content-security-policy"]
    assert "inline" not in page.headers["content-security-policy"]
    for name in ("app.js", "app.css", "jobs.js"):  # its files need no token: they hold no data
        assert api("GET", f"/static/{name}").status_code == 200
    for name in ("nope.js", "..%2Fpage.py", "index.py", "App.js"):
        assert api("GET", f"/static/{name}").status_code == 404, name
    for method, path in (("GET", "/v1/jobs"), ("GET", "/v1/jobs/x"), ("GET", "/v1/jobs/x/logs"),
                         ("POST", "/v1/jobs/x/cancel"), ("GET", "/v1/cost"),
                         ("GET", "/v1/schedules"), ("GET", "/v1/summary"), ("POST", "/v1/plan"),
                         ("POST", "/v1/jobs"), ("GET", "/v1/jobs/x/progress"), ("GET", "/v1/fleet"),
                         ("GET", "/v1/spend"), ("GET", "/v1/schedule-slots"),
                         ("GET", "/v1/job-counts"), ("GET", "/v1/replicas")):
        r = api(method, path)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", (method, path)
        assert r.json()["error"] == "this request needs a token: Authorization: Bearer <token>"
    r = api("GET", "/v1/jobs", headers={"Authorization": "Bearer orch_nope"})
    assert r.status_code == 401 and r.json()["error"] == "unknown or revoked token"
    api.store.revoke_token("bob")
    assert api("GET", "/v1/jobs", "bob").status_code == 401
    assert api("GET", "/v1/jobs", "alice").json() == []
    assert "/v1/jobs/{job_id}/logs" in api("GET", "/openapi.json").json()["paths"]


def test_the_replicas_are_listed_as_their_last_looks_recorded_them(api, settings):
    from orchestrator.server.replicas import Heartbeat

    assert api("GET", "/v1/replicas", "bob").json() == []  # its scheduler (and beat) not started
    Heartbeat(settings, api.sched.me, api.sched.role, "http://10.0.0.7:8765").beat()
    api.store.replica_seen("elsewhere/9/9.0", "leading", "http://10.0.0.8:8765")
    got = api("GET", "/v1/replicas", "root").json()
    assert [(r["id"], r["role"], r["url"], r["this"]) for r in got] == [
        ("elsewhere/9/9.0", "leading", "http://10.0.0.8:8765", False),
        (api.sched.me, "standby", "http://10.0.0.7:8765", True)]
    assert got[0]["seen_at"].endswith("Z")
    # A user sees no host name, pid or internal URL (issue 47).
    got = api("GET", "/v1/replicas", "bob").json()
    assert [(r["id"], r["role"], r["url"], r["this"]) for r in got] == [
        ("replica 1", "leading", None, False), ("replica 2", "standby", None, True)]


def test_a_schedule_registered_twice_with_one_key_is_one_schedule(api):
    cron = {"spec": "name: tick\nrun: echo tick\nschedule: {cron: '0 3 * * *'}\n",
            "idempotency_key": "k-1"}
    first = api("POST", "/v1/jobs", "alice", json=cron)
    again = api("POST", "/v1/jobs", "alice", json=cron)
    assert first.status_code == again.status_code == 201, (first.text, again.text)
    one, two = first.json()["schedule"], again.json()["schedule"]
    assert "existing" not in one and two["existing"] is True and two["id"] == one["id"]
    other = api("POST", "/v1/jobs", "bob", json=cron).json()["schedule"]  # keys are per user
    assert other["id"] != one["id"] and "existing" not in other
    assert len(api("GET", "/v1/schedules", "root").json()) == 2


def test_submit_queues_with_owner_and_only_owner_or_admin_cancels(api):
    r = api("POST", "/v1/jobs", "alice", json={"spec": "name: q\nrun: echo hi\n", "priority": 3})
    assert r.status_code == 201, r.text
    job = r.json()
    assert (job["owner"], job["priority"], job["status"], job["existing"]) == ("alice", 3, "PENDING", False)
    queue = api("GET", "/v1/summary", "bob").json()["queue"]
    assert [(q["position"], q["id"], q["owner"]) for q in queue] == [(1, job["id"], "alice")]
    r = api("POST", f"/v1/jobs/{job['id']}/cancel", "bob")
    assert r.status_code == 403 and r.json()["error"] == (
        f"{job['id']} belongs to alice: bob may not cancel it")
    r = api("POST", f"/v1/jobs/{job['id'][:9]}/cancel", "alice")
    assert r.status_code == 200 and r.json()["status"] == "CANCELLED"
    assert api.sched.pending == {}
    history = api("GET", f"/v1/jobs/{job['id']}", "bob").json()["history"]
    assert [h["message"] for h in history] == [
        "recorded", "queued by orch serve (priority 3, submitted by alice)", "cancelled before launch"]
    # A job submitted without the server (no owner): an admin's to cancel.
    embedded = api.store.create_job(name="e", spec={}, kind=None, target="local", fingerprint=None,
                                    info={"queued": True})
    assert api("POST", f"/v1/jobs/{embedded.id}/cancel", "alice").status_code == 403
    assert api("POST", f"/v1/jobs/{embedded.id}/cancel", "root").json()["status"] == "CANCELLED"


def test_bad_input_is_400_unknown_is_404_and_the_same_key_is_the_same_job(api):
    r = api("POST", "/v1/jobs", "alice", json={"spec": "run: echo\nscalng: {}\n", "file": "/x/j.yaml"})
    assert r.status_code == 400 and r.json() == {
        "error": "/x/j.yaml:2: scalng: unknown key 'scalng'",
        "hint": r.json()["hint"]} and "did you mean 'scaling'" in r.json()["hint"]
    for body in ({"spec": 5}, {"spec": "run: x", "priority": 10**6}, {"spec": "run: x", "extra": 1}):
        assert api("POST", "/v1/jobs", "alice", json=body).status_code == 400, body
    assert api("POST", "/v1/jobs", "alice", content=b"{not json").status_code == 400
    r = api("GET", "/v1/jobs/orch-nothere", "alice")
    assert r.status_code == 404 and r.json()["error"] == "no job 'orch-nothere'"
    assert api("GET", "/v1/cost?by=weekday", "alice").json()["error"] == "--by 'weekday': not a grouping"
    one = api("POST", "/v1/jobs", "alice", json={"spec": "run: echo\n", "idempotency_key": "k"}).json()
    two = api("POST", "/v1/jobs", "alice", json={"spec": "run: echo\n", "idempotency_key": "k"}).json()
    bobs = api("POST", "/v1/jobs", "bob", json={"spec": "run: echo\n", "idempotency_key": "k"}).json()
    assert one["id"] == two["id"] != bobs["id"] and two["existing"] is True


def test_a_cron_job_file_registers_a_schedule(api):
    r = api("POST", "/v1/jobs", "alice", json={"spec": CRON_JOB})
    assert r.status_code == 201, r.text
    s = r.json()["schedule"]
    assert (s["name"], s["cron"], s["owner"]) == ("tick", "* * * * *", "alice")
    listed = api("GET", "/v1/schedules", "bob").json()
    assert [x["id"] for x in listed] == [s["id"]] and listed[0]["log"][0]["message"].startswith("registered")
    assert api("GET", "/v1/jobs", "bob").json() == []  # nothing runs until its first slot


def test_a_paused_schedule_skips_its_slots_and_resumes_from_the_next_one(api):
    s = api("POST", "/v1/jobs", "alice", json={"spec": CRON_JOB}).json()["schedule"]
    assert api("POST", f"/v1/schedules/{s['id']}/pause", "bob").status_code == 403
    paused = api("POST", f"/v1/schedules/{s['id']}/pause", "alice").json()
    assert paused["paused"] is True and paused["log"][-1]["message"] == "paused by alice"
    assert _cron(api.sched, T0 + 10**6) == []  # far past many slots: nothing while paused
    api.sched.clock = lambda: T0 + 10**6  # the scheduler's clock, later
    resumed = api("POST", f"/v1/schedules/{s['id']}/resume", "root").json()
    assert resumed["paused"] is False and resumed["next_at"] == iso(T0 + 10**6 + 20)
    assert len(_cron(api.sched, T0 + 10**6 + 25)) == 1  # the next slot, not the missed ones


def test_a_heartbeat_stopped_from_another_thread_leaves_its_row_without_an_error(api, settings):
    """Issue 48: stopping `orch serve` printed `sqlite3.ProgrammingError ... Application
    shutdown failed`: the heartbeat's SQLite connection was used from the stopping thread."""
    import threading

    from orchestrator.server.replicas import Heartbeat

    beat = Heartbeat(settings, "me/1/1.0", lambda: "standby", "http://10.0.0.7:8765")
    beat.start()
    deadline = time.monotonic() + 10
    while not api.store.replicas() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r.id for r in api.store.replicas()] == ["me/1/1.0"]
    errors: list = []
    stopper = threading.Thread(target=lambda: _catching(beat.stop, errors))
    stopper.start()
    stopper.join(20)
    assert errors == [] and api.store.replicas() == []


def _catching(fn, errors: list) -> None:
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        errors.append(e)
