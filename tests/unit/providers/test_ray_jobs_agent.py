"""The submit as plain HTTP does what Ray's client does: a job posted to a Ray whose job
agent has not registered yet (a Ray started a moment ago answers `No available agent to
submit job`) is posted again until it has, within a bound, and any other refusal is not
retried; a package is asked for before it is sent (the question pins it in Ray, and one
Ray holds is not sent again). A real HTTP server on loopback plays Ray's dashboard."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from orchestrator.base.errors import BackendError
from providers import ray_jobs
from providers.base import Launch


class _Dashboard(http.server.BaseHTTPRequestHandler):
    refusals: list = []  # what to answer before accepting: (code, text)
    posts: list = []
    packages: dict = {}  # name -> bytes
    asked: list = []

    def do_GET(self):  # noqa: N802
        name = self.path.rsplit("/", 1)[-1]
        type(self).asked.append(name)
        self.send_response(200 if name in type(self).packages else 404)
        self.end_headers()

    def do_PUT(self):  # noqa: N802
        type(self).packages[self.path.rsplit("/", 1)[-1]] = self.rfile.read(
            int(self.headers["Content-Length"]))
        self.send_response(200)
        self.end_headers()

    def do_POST(self):  # noqa: N802  (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).posts.append(body["submission_id"])
        code, text = type(self).refusals.pop(0) if type(self).refusals else (200, None)
        answer = (json.dumps({"submission_id": body["submission_id"]}) if code == 200 else text)
        self.send_response(code)
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def dashboard():
    _Dashboard.refusals, _Dashboard.posts, _Dashboard.packages, _Dashboard.asked = [], [], {}, []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dashboard)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def _launch() -> Launch:
    return Launch(job_id="orch-agent1", entrypoint="echo hi", env={})


def test_a_job_posted_before_rays_agent_registered_is_posted_again(dashboard):
    _Dashboard.refusals = [(503, "No available agent to submit job, please try again later.")] * 2
    provider = ray_jobs.RayJobsProvider("local", dashboard)
    assert provider.submit(_launch()) == "orch-agent1"
    assert _Dashboard.posts == ["orch-agent1"] * 3


def test_another_refusal_is_said_at_once_and_the_wait_is_bounded(dashboard, monkeypatch):
    _Dashboard.refusals = [(400, "entrypoint is not valid")]
    provider = ray_jobs.RayJobsProvider("local", dashboard)
    with pytest.raises(BackendError, match="entrypoint is not valid"):
        provider.submit(_launch())
    assert len(_Dashboard.posts) == 1
    monkeypatch.setattr(ray_jobs, "_AGENT_WAIT_S", 0.6)
    _Dashboard.refusals = [(503, "No available agent to submit job")] * 50
    with pytest.raises(BackendError, match="No available agent"):
        provider.submit(_launch())
    assert 2 <= len(_Dashboard.posts) - 1 <= 4  # every half second, then said


def test_a_package_is_asked_for_first_and_sent_only_when_ray_lacks_it(dashboard):
    provider = ray_jobs.RayJobsProvider("local", dashboard)
    first = provider._upload(b"PK-one", "a workdir")
    assert first.startswith("gcs://_ray_pkg_") and len(_Dashboard.packages) == 1
    assert provider._upload(b"PK-one", "a workdir") == first  # held: asked, not sent
    assert len(_Dashboard.asked) == 2 and list(_Dashboard.packages.values()) == [b"PK-one"]
