"""jobs/forkserver.py and jobs/zygote.py without Ray: clients started as Ray's setup_worker starts a worker, the
first of them become the zygote, and what each forked worker and its client see.

A stand-in script takes default_worker.py's place (the client runs whatever its first
argument names); a sleeping process stands in for the raylet, whose end ends the zygote."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jobs import forkserver, zygote
from tests.conftest import short_tmp

CLIENT = [sys.executable, "-I", "-S", forkserver.__file__]

# The stand-in worker: what it is, then what the test asked of it (argv[1]).
WORKER = r"""
import json, os, sys, time
what = sys.argv[1]
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv,
                  "cwd": os.getcwd(), "env": os.environ.get("FS_TEST"),
                  "umask": os.umask(0o022),
                  "path0": sys.path[0]}), flush=True)
if what == "exit3":
    sys.exit(3)
if what == "sleep":
    time.sleep(60)
"""


@pytest.fixture
def node(tmp_path):
    """A folder laid out as a Ray session's, a stand-in raylet, and the env of its workers."""
    session = short_tmp("fs")
    (session / "sockets").mkdir(parents=True)
    raylet = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    worker = tmp_path / "default_worker.py"
    worker.write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(RAY_RAYLET_PID=str(raylet.pid), FS_TEST="one", PYTHONPATH=str(Path.cwd()))
    try:
        yield session, worker, env
    finally:
        raylet.kill()
        raylet.wait()
        _wait(lambda: not list((session / "sockets").glob("orch-fork-*[0-9a-f]")), 10)


def _wait(ready, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(0.1)
    return False


def _args(session: Path, worker: Path, what: str) -> list:
    return [str(worker), what, f"--raylet-name={session}/sockets/raylet"]


def _start(session, worker, env, what="run", cwd=None, **kw) -> subprocess.Popen:
    return subprocess.Popen(CLIENT + _args(session, worker, what), env=env, cwd=cwd,
                            stdout=subprocess.PIPE, text=True, **kw)


def _zygote_ready(session: Path, env: dict, worker: Path) -> bool:
    path = forkserver.socket_path(_args(session, worker, "run"), env)
    return _wait(lambda: os.path.exists(path), 60)


def _first(session, worker, env) -> tuple[subprocess.Popen, dict]:
    """The first client: it becomes the zygote (it lives on) and forks its worker."""
    first = _start(session, worker, env)
    seen = json.loads(first.stdout.readline())  # the worker's output: in the stream Ray gave
    assert seen["pid"] != first.pid and seen["ppid"] == first.pid
    assert _zygote_ready(session, env, worker)
    assert first.poll() is None
    return first, seen


def test_the_first_worker_becomes_the_zygote_and_the_next_are_forked_with_their_settings(
        node, tmp_path):
    session, worker, env = node
    first, _ = _first(session, worker, env)
    path = forkserver.socket_path(_args(session, worker, "run"), env)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    second = _start(session, worker, env, cwd=elsewhere, preexec_fn=lambda: os.umask(0o027))
    out = json.loads(second.communicate(timeout=60)[0])  # its stdout is the client's
    assert second.returncode == 0
    assert out["pid"] != second.pid and out["ppid"] == first.pid
    assert out["argv"] == _args(session, worker, "run")
    assert out["cwd"] == str(elsewhere) and out["umask"] == 0o027 and out["env"] == "one"
    assert out["path0"] == str(worker.parent)  # as `python default_worker.py` has it

    third = _start(session, worker, env, what="exit3")
    third.communicate(timeout=60)
    assert third.returncode == 3  # the child's exit status is the client's


def test_signals_reach_the_child_and_a_killed_client_takes_its_child_along(node):
    session, worker, env = node
    _first(session, worker, env)

    termed = _start(session, worker, env, what="sleep")
    child = json.loads(termed.stdout.readline())["pid"]
    termed.send_signal(signal.SIGTERM)
    termed.wait(timeout=30)
    assert termed.returncode == -signal.SIGTERM  # died of the signal its child died of
    assert _wait(lambda: not zygote._running(child), 10)

    killed = _start(session, worker, env, what="sleep")
    child = json.loads(killed.stdout.readline())["pid"]
    killed.kill()  # as the raylet may kill the process it started
    killed.wait(timeout=30)
    assert _wait(lambda: not zygote._running(child), 10), "the zygote left the child running"


def test_another_environment_gets_a_zygote_of_its_own_and_the_zygote_ends_with_its_raylet(node):
    session, worker, env = node
    other = {**env, "FS_TEST": "two"}
    assert forkserver.socket_path(_args(session, worker, "run"), env) != \
        forkserver.socket_path(_args(session, worker, "run"), other)
    zygotes = [_first(session, worker, e)[0] for e in (env, other)]
    forked = _start(session, worker, other)
    out = json.loads(forked.communicate(timeout=60)[0])
    assert out["ppid"] == zygotes[1].pid and out["env"] == "two"  # never the first's env

    os.kill(int(env["RAY_RAYLET_PID"]), signal.SIGKILL)
    for started in zygotes:  # they end with their raylet, their sockets gone
        started.wait(timeout=15)
    assert not list((session / "sockets").glob("orch-fork-*[0-9a-f]"))


def test_no_raylet_socket_or_too_long_a_path_means_no_zygote():
    assert forkserver.socket_path(["w.py", "--node-id=x"], {}) is None
    assert forkserver.socket_path(["w.py", f"--raylet-name=/{'x' * 120}/raylet"], {}) is None
    one = forkserver.socket_path(["w.py", "--raylet-name=/tmp/s/sockets/raylet"], {"A": "1"})
    assert one and one.startswith("/tmp/s/sockets/orch-fork-")
    assert one == forkserver.socket_path(["w.py", "--raylet-name=/tmp/s/sockets/raylet"], {"A": "1"})


def test_children_of_a_preloaded_zygote_draw_different_ray_ids(tmp_path):
    # An import that defines a @ray.remote class draws from Ray's C++ generator; a zygote
    # that let it would fork children drawing the same ids (two workers' task ids equal).
    hook = tmp_path / "remote_at_import.py"
    hook.write_text("import ray\n\n@ray.remote\nclass Defined:\n    pass\n\ndef setup():\n    pass\n")
    code = ("import sys; from jobs import zygote as f; "
            "f.preload({f.SETUP_HOOK_VAR: 'remote_at_import.setup'}); "
            "assert 'remote_at_import' in sys.modules; print(f.children_draw_apart())")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path.cwd())])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["True"], done.stdout + done.stderr
    # The check itself: the same import without the preload's care gives equal ids.
    plain = ("import ray._raylet, remote_at_import; from jobs import zygote as f; "
             "print(f.children_draw_apart())")
    done = subprocess.run([sys.executable, "-c", plain], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["False"], done.stdout + done.stderr


def test_a_silent_or_garbled_connection_holds_up_no_worker(node):
    # A job's code can reach the zygote's socket (its user's): what it sends, or does not,
    # costs the workers nothing.
    import socket

    session, worker, env = node
    first, _ = _first(session, worker, env)
    path = forkserver.socket_path(_args(session, worker, "run"), env)
    silent = socket.socket(socket.AF_UNIX)
    silent.connect(path)  # says nothing, never closes
    for garbage in (b"\x00\x00\x00\x05{}{}{", b"\xff\xff\xff\xff", b"\x00\x00\x00\x02[]"):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.sendall(garbage)
        s.close()
    # A request that names an environment of its own gets the zygote's (its clients'):
    # no caller chooses what a forked worker's environment holds.
    r, w = os.pipe()
    body = json.dumps({"argv": _args(session, worker, "run"), "cwd": str(session), "umask": 0o22,
                       "env": {"FS_TEST": "chosen"}}).encode()
    asker = socket.socket(socket.AF_UNIX)
    asker.connect(path)
    socket.send_fds(asker, [len(body).to_bytes(4, "big") + body], [0, w, 2])
    os.close(w)
    with os.fdopen(r) as out:
        assert json.loads(out.readline())["env"] == "one"
    asker.close()
    started = time.monotonic()
    next_one = _start(session, worker, env)
    out = json.loads(next_one.communicate(timeout=60)[0])
    assert out["ppid"] == first.pid and time.monotonic() - started < 3
    silent.close()


def test_a_zygote_that_cannot_serve_runs_its_worker_plain_and_so_do_the_next(node, tmp_path):
    session, worker, env = node
    hook = tmp_path / "draws_at_import.py"  # draws from Ray's generator itself: no care helps
    hook.write_text("import ray._raylet\n\ndef setup():\n    ray._raylet.UniqueID.from_random()\n")
    env = {**env, zygote.SETUP_HOOK_VAR: "draws_at_import.setup",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])}
    first = _start(session, worker, env)
    seen = json.loads(first.communicate(timeout=60)[0])
    assert first.returncode == 0 and seen["pid"] == first.pid  # exec'd as the worker itself
    path = forkserver.socket_path(_args(session, worker, "run"), env)
    assert os.path.exists(path + ".off") and "share Ray's random ids" in Path(path + ".log").read_text()
    later = _start(session, worker, env)
    assert json.loads(later.communicate(timeout=60)[0])["pid"] == later.pid


def test_a_zygote_left_without_workers_ends_and_the_next_worker_starts_a_new_one(node):
    # The runner host keeps warm workers while it lives; once its Ray job is gone (a host
    # restarted is a new job, so a new environment), its zygote has none and ends.
    session, worker, env = node
    env = {**env, "ORCH_ZYGOTE_IDLE_S": "1"}
    first, _ = _first(session, worker, env)  # its worker ends at once
    first.wait(timeout=20)
    path = forkserver.socket_path(_args(session, worker, "run"), env)
    assert not os.path.exists(path) and "no worker for 1 s" in Path(path + ".log").read_text()
    again, _ = _first(session, worker, env)
    assert again.pid != first.pid


def test_a_zygote_checks_cuda_in_a_child_only_where_the_machine_has_gpus(tmp_path):
    none = tmp_path / "gpus"
    assert zygote.cuda_works_in_a_child(str(none))  # no driver folder: nothing to check
    none.mkdir()
    assert zygote.cuda_works_in_a_child(str(none))  # the driver, no GPU
    (none / "0000:00:1e.0").mkdir()
    # A GPU listed: a forked child must put a tensor on it. This machine's torch has no
    # CUDA, so the child fails and the zygote would not serve (its workers start plain).
    import torch

    assert zygote.cuda_works_in_a_child(str(none)) is torch.cuda.is_available()
