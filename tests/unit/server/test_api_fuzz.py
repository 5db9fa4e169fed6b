"""The REST API fuzzed from its own OpenAPI document (schemathesis, in-process over ASGI):
valid and malformed parameters and bodies on every operation, with a valid token, must never
get a 5xx, and every answer must match the response schema the API declares. A second fuzzer feeds job files that are YAML but wrong in every way a person or
a script gets them wrong, since the schema only knows `spec` as a string."""

from __future__ import annotations

import json
import os

import pytest
import yaml

schemathesis = pytest.importorskip("schemathesis", reason="the test extras are not installed "
                                   "(pip install -e '.[test]')")
from hypothesis import HealthCheck, given, note
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import response_schema_conformance

from orchestrator.server import auth
from orchestrator.settings import Settings
from tests.conftest import store_at

# Deterministic: the same examples on every run, no example database carried between runs.
FUZZ = hsettings(derandomize=True, database=None, deadline=None, max_examples=40,
                 suppress_health_check=list(HealthCheck))


class Api:
    """The app with its scheduler stopped (nothing launches), a temporary store, a token,
    two jobs and a schedule, so the id lookups have something to find."""

    def __init__(self, home):
        from orchestrator.server.app import create_app
        from orchestrator.server.scheduler import Scheduler

        self.settings = Settings(home=home, mode="local", serve_local_trusted=True)
        store = store_at(home)
        self.token, digest = auth.new_token()
        store.add_token("alice", digest)
        job = store.create_job(name="done", spec={"run": "echo hi"}, kind="exploratory",
                               target="local", fingerprint=None, owner="alice")
        store.set_status(job.id, "SUCCEEDED", "seeded by the fuzz test")
        done = job.id
        # One that claims to run on a local Ray that is not there: a lookup finishes it.
        job = store.create_job(name="lost", spec={"run": "sleep 9"}, kind="exploratory",
                               target="local", fingerprint=None, owner="alice")
        store.update(job.id, backend_id="raysubmit_gone")
        store.set_status(job.id, "RUNNING", "seeded by the fuzz test")
        store.close()
        self.jobs = [done, job.id, "orch-"]  # two ids, and a prefix of both
        sched = Scheduler(self.settings)
        from orchestrator.server.intake import register
        from orchestrator.spec import load_spec_text

        text = "name: tick\nrun: echo tick\nschedule: {cron: '0 3 * * *'}\n"
        with sched.session() as orch:
            self.schedules = [register(orch, load_spec_text(text), text, None, "alice")["id"]]
        self.app = create_app(self.settings, sched, run_scheduler=False)
        self.headers = {"Authorization": f"Bearer {self.token}"}


@pytest.fixture
def api(tmp_path, monkeypatch):
    for k in list(os.environ):
        if k.startswith("ORCH_"):
            monkeypatch.delenv(k)
    from providers.local import LocalProvider

    def no_ray(self):
        raise AssertionError("the API fuzz test must never start a local Ray")
    monkeypatch.setattr(LocalProvider, "prepare", no_ray)
    return Api(tmp_path / "home")


OPERATIONS = [("POST", "/v1/jobs"), ("POST", "/v1/plan"), ("GET", "/v1/jobs"),
              ("GET", "/v1/jobs/{job_id}"), ("GET", "/v1/jobs/{job_id}/logs"),
              ("POST", "/v1/jobs/{job_id}/cancel"), ("GET", "/v1/cost"), ("GET", "/v1/schedules"),
              ("POST", "/v1/schedules/{sched_id}/pause"),
              ("POST", "/v1/schedules/{sched_id}/resume"), ("GET", "/v1/summary"),
              ("GET", "/healthz"), ("GET", "/v1/schedules/{sched_id}"),
              ("DELETE", "/v1/schedules/{sched_id}"), ("POST", "/v1/uploads"),
              ("GET", "/v1/uploads/{digest}"), ("GET", "/v1/jobs/{job_id}/progress"),
              ("GET", "/v1/fleet"), ("GET", "/v1/spend"), ("GET", "/v1/schedule-slots"),
              ("GET", "/v1/job-counts"), ("GET", "/v1/replicas"), ("GET", "/metrics")]


STATUSES: dict[str, list[int]] = {}  # what each operation answered: the last test reads it
# ...so under `make test`'s two processes this file is one unit, run whole in one (tests/scheduling.py).


def _schema(app):
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def _no_server_error(response, what) -> None:
    assert response.status_code < 500, f"{what} -> {response.status_code}: {response.text[:2000]}"
    if response.status_code >= 400:  # every error is {"error": ..., "hint": ...}
        assert response.json().get("error"), response.text[:2000]


def test_the_fuzzer_covers_every_operation(api):
    found = {(r.ok().method.upper(), r.ok().path) for r in _schema(api.app).get_all_operations()}
    assert found == set(OPERATIONS)


@pytest.mark.parametrize("method,path", OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_no_operation_answers_a_server_error(api, method, path):
    """Both what the schema allows and what it forbids (wrong types, missing or extra
    fields, out-of-range numbers, bodies that are not JSON objects)."""
    op = _schema(api.app)[path][method]
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    # Random ids only ever get a 404: half the cases use the id of a job or schedule
    # that exists, so the handlers behind the lookup are fuzzed too.
    real = [{"job_id": i} for i in api.jobs] if "{job_id}" in path else (
        [{"sched_id": i} for i in api.schedules] if "{sched_id}" in path else [])
    cases = st.one_of(*(op.as_strategy(m) for m in modes),
                      *(op.as_strategy(m, path_parameters=p) for m in modes for p in real))

    @FUZZ
    @given(case=cases)
    def check(case):
        body = json.dumps(case.body, default=str)[:500] if case.body is not None else ""
        what = f"{case.method} {case.formatted_path} {case.query} {body}"
        note(what)  # shown with the failing example, an exception's too
        response = case.call(headers=api.headers, timeout=20)
        STATUSES.setdefault(f"{method} {path}", []).append(response.status_code)
        _no_server_error(response, what)
        # What it answered is what the schema says (a job: records.JobRecord and kin).
        case.validate_response(response, checks=[response_schema_conformance])

    check()


# -- job files that parse as YAML but are wrong -------------------------------------------------

KEYS = ["name", "run", "train", "resources", "scaling", "schedule", "envs", "secrets", "workdir",
        "file_mounts", "checkpoint", "budget", "target", "kind", "setup", "accelerators", "cron",
        "config", "job", "num_workers", "use_gpu", "cpus", "max_cost", "storage", "use_spot"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["* * * * *", "61 * * * *", "H100:1", "-1", "8+", "s3://",
                                     "/", "..", "~", "$HOME", "1e400", "0x10", "nan"]))
docs = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
    max_leaves=12)
wrong = st.dictionaries(st.sampled_from(KEYS), docs, min_size=1, max_size=5)
# A valid job with one or two keys changed: mostly still valid, so the handlers run on it.
nearly = st.builds(lambda base, change: {**base, **change}, st.sampled_from(
    [{"name": "fz", "run": "echo hi"}, {"name": "fz", "run": "echo hi", "resources": {"cpus": 1}},
     {"name": "fz", "run": "echo", "schedule": {"cron": "0 3 * * *"}},
     {"name": "fz", "train": {"job": "image-classification", "config": {"epochs": 1}}}]),
    st.dictionaries(st.sampled_from(KEYS), docs, max_size=2))
job_files = st.one_of(wrong, nearly)


@FUZZ
@given(doc=job_files, file=st.one_of(st.none(), st.sampled_from(
    ["", "/", "/etc/passwd", "/nonexistent/job.yaml", "rel/job.yaml", "\x00", "a" * 4000])),
       path=st.sampled_from(["/v1/plan", "/v1/jobs"]))
def test_wrong_job_files_are_a_400_never_a_server_error(api_client, doc, file, path):
    client, headers = api_client
    body = {"spec": yaml.safe_dump(doc, allow_unicode=True)}
    if file is not None:
        body["file"] = file
    response = client.post(path, json=body, headers=headers)
    STATUSES.setdefault(f"POST {path} (job files)", []).append(response.status_code)
    _no_server_error(response, f"POST {path} {json.dumps(body)[:800]}")


@pytest.fixture
def api_client(api):
    from fastapi.testclient import TestClient

    with TestClient(api.app) as client:
        yield client, api.headers


def test_starlettes_own_refusals_have_the_api_error_shape(api_client):
    """A body that is not JSON, an unknown path, a wrong method: {"error", "hint"} too, as
    the CLI shows `error` (FastAPI's default is {"detail"}: found by the fuzzer)."""
    client, headers = api_client
    bad = client.post("/v1/plan", content=b"\x00" * 5, headers={**headers,  # not UTF-8/16/32
                      "content-type": "application/json"})
    assert bad.status_code == 400 and bad.json() == {
        "error": "POST /v1/plan: There was an error parsing the body",
        "hint": "GET /openapi.json describes every request"}
    bad = client.post("/v1/plan", content=b"{spec: 1", headers={**headers,
                      "content-type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"] == (
        "body: not valid JSON (Expecting property name enclosed in double quotes)")
    assert client.get("/v1/nothing", headers=headers).json()["error"] == "GET /v1/nothing: Not Found"
    wrong = client.delete("/v1/jobs", headers=headers)
    assert wrong.status_code == 405 and wrong.json()["error"] == "DELETE /v1/jobs: Method Not Allowed"


def test_the_fuzzer_reached_past_validation():
    """Not only 400s and 404s: the requests also got answers from the handlers themselves."""
    if len(STATUSES) < len(OPERATIONS) + 2:
        pytest.skip("runs after the fuzz tests above (run the whole file)")
    got = {op: set(codes) for op, codes in STATUSES.items()}
    for op in ("GET /v1/jobs/{job_id}", "GET /v1/jobs/{job_id}/logs", "POST /v1/jobs/{job_id}/cancel",
               "POST /v1/schedules/{sched_id}/pause", "POST /v1/schedules/{sched_id}/resume",
               "GET /v1/schedules/{sched_id}", "DELETE /v1/schedules/{sched_id}"):
        assert {200, 404} <= got[op], (op, got[op])
    assert {200, 400} <= got["GET /v1/jobs"] and {200, 400} <= got["GET /v1/cost"]
    assert 400 in got["POST /v1/uploads"] and {400, 404} <= got["GET /v1/uploads/{digest}"]
    assert {201, 400} <= got["POST /v1/jobs (job files)"]
    assert {200, 400} <= got["POST /v1/plan (job files)"]
    assert sum(map(len, STATUSES.values())) >= 300  # 40 examples for most operations


def test_env_and_secret_values_in_the_body_fill_the_job_file(api_client):
    """What `orch plan --env` / `--secret` send through ORCH_SERVER."""
    client, headers = api_client
    spec = "name: e\nrun: echo $MODEL\nenvs: {MODEL: null}\nsecrets: {HF_TOKEN: null}\n"
    missing = client.post("/v1/plan", json={"spec": spec}, headers=headers)
    assert missing.status_code == 400 and "envs.MODEL" in missing.json()["error"]
    given = client.post("/v1/plan", json={"spec": spec, "env": {"MODEL": "llama"},
                                          "secrets": {"HF_TOKEN": "hf_NotARealToken123"}},
                        headers=headers)
    assert given.status_code == 200, given.json()
    assert "hf_NotARealToken123" not in given.text
    no_secret = spec.replace("secrets: {HF_TOKEN: null}\n", "")  # not a listed server name
    cron = client.post("/v1/jobs", json={"spec": no_secret + "schedule: {cron: '0 3 * * *'}\n",
                                         "env": {"MODEL": "llama"}}, headers=headers)
    assert cron.status_code == 400 and "not kept with a schedule" in cron.json()["error"]
