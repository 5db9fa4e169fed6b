"""A job's state and log read from a Ray cluster's Jobs API as plain HTTP (providers/ray_jobs.py),
so `orch status` and `orch logs` do not import Ray: against a loopback server that answers as
Ray's dashboard does, hostile answers included."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestrator.base.errors import BackendError
from providers.ray_jobs import RayJobsProvider
from tests.conftest import ROOT

JOBS = {
    "orch-ok": {"status": "SUCCEEDED", "message": "Job finished successfully.",
                "start_time": 1_700_000_000_000, "end_time": 1_700_000_010_000, "driver_exit_code": 0},
    "orch-bad": {"status": "FAILED", "message": "Job entrypoint command failed with exit code 3, "
                 "last available logs (truncated to 20,000 chars):\nTOKEN=s3cret",
                 "start_time": 1_700_000_000_000, "end_time": None, "driver_exit_code": 3},
    "orch-odd": {"status": ["RUNNING"], "message": {"x": 1}, "start_time": "soon",
                 "driver_exit_code": True},
    "orch-secret": {"status": "STOPPED", "runtime_env": {
        "working_dir": "gcs://_ray_pkg_abc.zip", "env_vars": {"ORCH_ENV_FILE": ".orch-env-1"}}},
}


class _Ray(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        seen.append((self.path, self.headers.get("Authorization")))
        parts = self.path.strip("/").split("/")  # api, jobs, id[, logs]
        job = JOBS.get(parts[2]) if len(parts) >= 3 else None
        if self.path.endswith("/refuse/logs"):
            return self._answer(401, {"error": "no token"})
        if job is None:
            return self._answer(404, {"error": "does not exist"})
        return self._answer(200, {"logs": "line 1\nline 2\n"} if parts[-1] == "logs" else job)

    def do_PUT(self):  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        seen.append(("PUT " + self.path, body))
        self._answer(200, {})

    def _answer(self, code, doc):
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


seen: list = []


@pytest.fixture
def ray_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ray)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    seen.clear()
    yield RayJobsProvider("test", f"http://127.0.0.1:{server.server_port}",
                          {"Authorization": "Bearer tok"})
    server.shutdown()
    server.server_close()


def test_a_jobs_state_and_times_come_from_the_jobs_api(ray_api):
    state = ray_api.state("orch-ok")
    assert (state.status, state.message, state.exit_code) == ("SUCCEEDED", "Job finished successfully.", 0)
    assert state.info == {"backend_start": 1_700_000_000.0, "backend_end": 1_700_000_010.0}
    assert seen == [("/api/jobs/orch-ok", "Bearer tok")]


def test_a_failed_jobs_message_leaves_out_the_output_ray_quotes(ray_api):
    state = ray_api.state("orch-bad")
    assert state.status == "FAILED" and state.exit_code == 3
    assert "s3cret" not in state.message and "orch logs orch-bad" in state.message


def test_an_unknown_job_is_failed_and_odd_fields_are_ignored(ray_api):
    assert ray_api.state("orch-none").status == "FAILED"
    odd = ray_api.state("orch-odd")
    assert (odd.status, odd.message, odd.info, odd.exit_code) == ("FAILED", None, None, None)


def test_a_log_comes_from_the_jobs_api_and_a_refusal_says_what_to_check(ray_api):
    assert ray_api.logs("orch-ok") == "line 1\nline 2\n"
    with pytest.raises(BackendError, match="HTTP 401"):
        ray_api.logs("refuse")
    with pytest.raises(BackendError, match="no such job"):
        ray_api.logs("orch-none")
    ray_api.state("a/../../x")  # an id is one path segment, whatever it holds
    assert seen[-1][0] == "/api/jobs/a%2F..%2F..%2Fx"


def test_reading_a_state_and_a_log_imports_no_ray(ray_api):
    code = ("import sys; from providers.ray_jobs import RayJobsProvider as P; "
            f"p = P('t', {ray_api.address!r}, {{}}); p.state('orch-ok'); p.logs('orch-ok'); "
            "print('ray' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.stdout.strip() == "False", proc.stdout + proc.stderr


def test_a_stopped_jobs_package_with_its_secret_file_is_overwritten_without_ray(ray_api):
    from jobs import secret_env

    assert secret_env.FILE_VAR == "ORCH_ENV_FILE"
    ray_api.forget_secrets("orch-secret")
    assert seen[-1][0] == "PUT /api/packages/gcs/_ray_pkg_abc.zip" and seen[-1][1].startswith(b"PK")
    seen.clear()
    ray_api.forget_secrets("orch-ok")  # no secret file in its package: left alone
    assert [s for s in seen if s[0].startswith("PUT")] == []


def test_a_run_jobs_workdir_is_a_package_of_its_own_while_it_is_submitted(tmp_path):
    """Ray unpacks one folder per package content and hands it to every job of that content:
    a run: job's workdir gets a file with its id while it is submitted (so Ray unpacks it
    afresh, never into a folder an earlier job wrote in), removed after; a train: job's is
    left as it is (its warm processes match its runtime env)."""
    from jobs.request import ENV_VAR
    from providers.base import Launch
    from providers.ray_jobs import _own_package

    run = Launch(job_id="orch-r1", entrypoint="echo", workdir=str(tmp_path))
    with _own_package(run):
        assert (tmp_path / ".orch-job-orch-r1").read_text() == "orch-r1\n"
    assert not list(tmp_path.iterdir())
    train = Launch(job_id="orch-t1", entrypoint="x", workdir=str(tmp_path), env={ENV_VAR: "{}"})
    with _own_package(train):
        assert not list(tmp_path.iterdir())


def test_the_package_file_never_writes_through_a_link_a_client_left(tmp_path):
    """A folder a client chose (a root's, an upload) holding a link by that name: nothing is
    written through it, and the job is submitted as it is."""
    from providers.base import Launch
    from providers.ray_jobs import _own_package

    target = tmp_path / "server-file"
    target.write_text("the server's\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / ".orch-job-orch-r2").symlink_to(target)
    with _own_package(Launch(job_id="orch-r2", entrypoint="echo", workdir=str(work))):
        pass
    assert target.read_text() == "the server's\n" and (work / ".orch-job-orch-r2").is_symlink()
