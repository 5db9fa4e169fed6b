"""The runner host (jobs/host.py) and the runner's thin side of it (jobs/hosted.py), without
Ray: the protocol, the log relay, the fallback, cancel and the runtime envs of the warm
processes. A real job through the host runs in tests/integration/test_local_jobs.py."""

from __future__ import annotations

import io
import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jobs import controller, events, host, hosted, job_values
from jobs.request import RunRequest
from tests.conftest import ROOT


def test_the_controllers_runtime_env_is_written_as_ray_writes_it():
    # A warm process serves only the runtime env string it was started with: the
    # controller's must be Ray's own serialization of the env it is given.
    from ray.runtime_env import RuntimeEnv

    env = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2", "B": "2", "A": "1"}
    spaced, compact = host.runtime_env_strings(env)
    assert spaced == RuntimeEnv(**controller.hosted_runtime_env(env)).serialize()
    assert json.loads(spaced)["py_executable"].endswith("forkserver.py")
    assert json.loads(compact) == json.loads(spaced) and ", \"" not in compact and "\": " not in compact


def test_every_controller_gets_the_same_env_with_the_setup_hook():
    env = host.controller_env()
    assert env == host.controller_env()
    assert env["__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"] == "jobs.host.preload"
    assert env["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] == "0.2"
    assert env["RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"] == "0"


def _writer(path, chunks, then):
    def go():
        for chunk in chunks:
            with open(path, "ab") as f:
                f.write(chunk)
            time.sleep(0.05)
        then()
    t = threading.Thread(target=go)
    t.start()
    return t


def test_relay_copies_the_log_without_rays_markers_and_returns_the_exit_code(tmp_path):
    log = tmp_path / "job.log"
    log.write_bytes(b"")
    ours, theirs = socket.socketpair()
    chunks = [b":actor_name:RayTrainWorker\nfirst line\nhalf ", b"a line\n", b":task_name:x\nlast"]
    t = _writer(log, chunks, lambda: theirs.sendall(b'{"exit": 3}\n'))
    out = io.BytesIO()
    assert hosted.relay(ours, str(log), out) == 3
    t.join()
    assert out.getvalue() == b"first line\nhalf a line\nlast\n"


def test_relay_says_why_when_the_host_goes_before_the_end(tmp_path, capsys):
    log = tmp_path / "job.log"
    log.write_bytes(b"")
    ours, theirs = socket.socketpair()
    t = _writer(log, [b"step 1\n"], theirs.close)
    out = io.BytesIO()
    assert hosted.relay(ours, str(log), out) == 1
    t.join()
    assert out.getvalue() == b"step 1\n"
    result = [e for e in events.parse(capsys.readouterr().out) if e["event"] == "result"]
    assert result and result[0]["ok"] is False and "runner host stopped" in result[0]["error"]


def test_without_a_host_the_runner_runs_the_job_itself(tmp_path, monkeypatch, capsys):
    req = RunRequest(job_id="orch-1", target="image-classification")
    monkeypatch.delenv(hosted.HOST_VAR, raising=False)
    assert hosted.delegate(req, {}) is None
    # A socket nobody listens on, and no live host process: no wait, no host.
    monkeypatch.setenv(hosted.HOST_VAR, str(tmp_path / "gone.sock"))
    started = time.monotonic()
    assert hosted.delegate(req, {}) is None
    assert time.monotonic() - started < 2
    assert "no runner host answers" in capsys.readouterr().err


def test_a_starting_host_is_waited_for(tmp_path):
    sock = str(tmp_path / "h.sock")
    with open(hosted.pid_file(sock), "w") as f:
        f.write(str(os.getpid()))  # alive: the host is importing, not listening yet

    servers = []

    def later():
        time.sleep(0.6)
        servers.append(host.listen(sock))
    thread = threading.Thread(target=later)
    thread.start()
    conn = hosted.connect(sock, wait_s=10)
    thread.join()
    assert conn is not None
    conn.close()
    servers[0].close()
    assert oct(os.stat(sock).st_mode & 0o777) == "0o600"  # secret values travel here


class FakePool:
    def __init__(self):
        self.added = []

    def add(self, runs, workers):
        self.added.append((runs, workers))


def _serve(tmp_path, monkeypatch, fake_run):
    """A Host on a real unix socket whose runs are `fake_run`; returns (host, socket path)."""
    import jobs.runner

    monkeypatch.setattr(jobs.runner, "run", fake_run)
    # This test's process plays the Ray node above the job's runner (jobs/job_values.py
    # answers its descendants alone): the fake run's "workers" fetch from this process.
    monkeypatch.setattr(job_values, "raylet_above", lambda pid: os.getpid())
    the_host = host.Host(FakePool(), {"E": "1"})
    sock = str(tmp_path / "h.sock")
    server = host.listen(sock)

    def accept():
        conn, _ = server.accept()
        the_host.serve(conn)
        server.close()
    threading.Thread(target=accept, daemon=True).start()
    return the_host, sock


def test_a_job_through_the_host(tmp_path, monkeypatch, capfdbinary):
    seen = {}

    def fake_run(req, hidden=None, hosted=None):
        seen.update(req=req, hosted=hosted, fetched=hosted.values.values)  # as a worker fetches them
        events.emit("start", num_workers=req.num_workers)
        hosted.on_controller("controller-handle")
        events.say("training")
        return 0

    the_host, sock = _serve(tmp_path, monkeypatch, fake_run)
    aborted = []
    monkeypatch.setattr(host, "abort", aborted.append)
    monkeypatch.setattr(host, "_release", lambda controllers: None)
    monkeypatch.setenv(hosted.HOST_VAR, sock)
    monkeypatch.setenv("MY_VALUE", "public")
    monkeypatch.setenv(hosted.PUBLIC_VAR, "MY_VALUE,NOT_SET")
    monkeypatch.chdir(tmp_path)
    req = RunRequest(job_id="orch-2", target="image-classification", num_workers=3)
    assert hosted.delegate(req, {"API_TOKEN": "s3cret"}) == 0
    assert seen["req"] == req
    h = seen["hosted"]
    assert h.env == {"MY_VALUE": "public"}  # the secret value never reaches the host
    assert h.values.names() == ["API_TOKEN", "MY_VALUE"] and "s3cret" not in pickle.dumps(h.values).decode("latin1")
    assert seen["fetched"] == {"MY_VALUE": "public", "API_TOKEN": "s3cret"}  # from the job's runner
    assert not os.path.exists(h.values.path)  # served while the run lasted
    assert h.cwd == str(tmp_path) and h.controller_env == {"E": "1"}
    out = capfdbinary.readouterr().out
    assert b"training\n" in out and [e["event"] for e in events.parse(out.decode())] == ["start"]
    assert not os.path.exists(h.log_path)  # the job's log goes with the job
    assert the_host.pool.added == [(1, 3)]  # what the run took (1 run, 3 workers), started again after it
    assert aborted == [] and the_host.running == 0


def test_a_runner_that_goes_away_aborts_its_run(tmp_path, monkeypatch):
    release = threading.Event()

    def fake_run(req, hidden=None, hosted=None):
        hosted.on_controller("controller-handle")
        release.wait(10)
        return 1

    _, sock = _serve(tmp_path, monkeypatch, fake_run)
    aborted = []
    monkeypatch.setattr(host, "abort", lambda c: (aborted.append(c), release.set()))
    monkeypatch.setattr(host, "_release", lambda controllers: None)
    log = tmp_path / "job.log"
    log.write_text("")
    conn = hosted.connect(sock, wait_s=5)
    req = RunRequest(job_id="orch-3", target="image-classification")
    conn.sendall(json.dumps({"request": req.__dict__ | {"budget": None}, "env": {}, "cwd": None,
                             "log": str(log)}).encode() + b"\n")
    time.sleep(0.3)
    conn.close()  # what `orch cancel` does to the runner: stop_job kills it
    assert release.wait(10)
    assert aborted == ["controller-handle"]
    deadline = time.monotonic() + 10
    while log.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not log.exists()  # the killed runner could not remove the job's log: the host does


@pytest.mark.parametrize("message", [b"not json\n", b'{"request": {"job_id": "x"}, "log": "/tmp/x"}\n'])
def test_a_bad_request_is_refused_and_the_host_goes_on(tmp_path, monkeypatch, message, capsys):
    ran = []
    _, sock = _serve(tmp_path, monkeypatch, lambda *a, **k: ran.append(1) or 0)
    conn = hosted.connect(sock, wait_s=5)
    conn.sendall(message)
    assert conn.recv(100) == b""  # closed with no exit code
    assert ran == []
    assert "refused a request" in capsys.readouterr().err


def test_a_look_whether_the_host_answers_is_no_request(tmp_path, monkeypatch, capsys):
    from providers.local_ray import host_state

    ran = []
    _, sock = _serve(tmp_path, monkeypatch, lambda *a, **k: ran.append(1) or 0)
    assert host_state(sock) == "ready"  # connects and closes, as `orch local status` does
    time.sleep(0.3)
    assert ran == [] and "refused" not in capsys.readouterr().err
    assert host_state(None) == "off"
    assert host_state(str(tmp_path / "none.sock")) == "stopped"


def test_the_synchronization_actor_asks_for_the_light_warm_process():
    env = host.controller_env()
    light = host.sync_actor_env(env)
    assert light["__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"] == "jobs.host.preload_light"
    assert {k: v for k, v in light.items() if not k.startswith("__RAY")} == \
        {k: v for k, v in env.items() if not k.startswith("__RAY")}
    asked = []

    class Base:
        def options(self, **kwargs):
            asked.append(kwargs)
            return "handle"

    wrapped = controller.LightSyncActor(Base())
    assert wrapped.options(label_selector={"node": "n1"}) == "handle"
    assert asked == [{"label_selector": {"node": "n1"}, "runtime_env": {
        "env_vars": {"__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR": "jobs.host.preload_light"}}}]


def test_the_light_preload_leaves_torch_out():
    sync = "ray.train.v2._internal.execution.checkpoint.sync_actor"
    code = f"import sys; from jobs import host; host.preload_light(); print({sync!r} in sys.modules, 'torch' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.stdout.split() == ["True", "False"], proc.stdout + proc.stderr


def test_the_local_ray_starts_no_idle_workers_for_the_runner_hosts_job(tmp_path):
    from providers.local_ray import LocalRay

    assert LocalRay(tmp_path).job_env()["RAY_prestart_worker_first_driver"] == "0"


def _sleeper(tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """A process standing for a runner host: its pid in the host's pid file."""
    sock = str(tmp_path / "orch-host.sock")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    Path(hosted.pid_file(sock)).write_text(str(proc.pid))
    return proc, sock


def test_a_host_of_another_runner_version_is_replaced_only_when_no_job_runs(tmp_path,
                                                                          monkeypatch):
    # An upgrade (or an edited checkout) leaves the local Ray's runner host on the old code,
    # which speaks the old protocol to the new jobs' drivers: `up` stops it and starts a new
    # one, unless jobs still run on it (then it says what to do and touches nothing).
    from orchestrator.base.errors import BackendError
    from providers import local_ray
    from providers.runner_package import runner_digest

    old, sock = _sleeper(tmp_path)
    procs = [old]
    ray = local_ray.LocalRay(tmp_path / "home")
    state = {"runner": 1, "host_socket": sock, "host_runner": "an-older-runner",
             "dashboard_url": "http://127.0.0.1:9"}
    jobs = [{"status": "RUNNING", "type": "SUBMISSION"}, {"status": "RUNNING", "type": "DRIVER"}]
    started = []
    monkeypatch.setattr(ray, "status", lambda details=True: dict(state))
    monkeypatch.setattr(ray, "_jobs", lambda st: jobs)
    monkeypatch.setattr(ray, "_write", lambda st: None)
    monkeypatch.setattr(ray, "_start_host", lambda st, env: started.append(1) or sock)
    try:
        with pytest.raises(BackendError, match="another version of orch, and 1 job"):
            ray.up()
        assert old.poll() is None and started == []  # its job keeps its host
        jobs[:] = [{"status": "SUCCEEDED"}, {"status": "RUNNING", "type": "DRIVER"}]  # the host
        ray.up()
        assert old.wait(15) is not None and started == [1]  # stopped, and a new one started
        now, sock = _sleeper(tmp_path)
        procs.append(now)
        state.update(host_socket=sock, host_runner=runner_digest())
        ray.up()
        assert now.poll() is None and started == [1]  # this version's host is kept
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_the_runner_digest_is_of_the_runners_modules():
    import hashlib

    from providers.runner_package import SOURCE, runner_digest

    h = hashlib.sha256()
    for path in sorted(SOURCE.rglob("*.py")):
        h.update(str(path.relative_to(SOURCE)).encode() + b"\0" + path.read_bytes() + b"\0")
    assert runner_digest() == h.hexdigest()[:16] and (SOURCE / "host.py").exists()
