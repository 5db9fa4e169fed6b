"""Ray worker processes forked from one that has already imported what they import.

Why: every run takes fresh processes (jobs/warm.py says why Ray cannot reuse them): a
controller, a synchronization actor and a worker each, and each imported torch and Ray Train
anew, 3.4-3.9 CPU-s here (1.7-2.0 for the synchronization actor's lighter set), most of a
short run's cost on a 2-core machine, whether the runner host started them ahead or a run
waited for them. A process forked from one that imported them costs what Ray's own
`setup_worker.py` costs before it (0.4 CPU-s) and a few milliseconds more.

How: the runner host (jobs/host.py) gives each run's controller a runtime env whose
`py_executable` is this file, run as `python -I -S forkserver.py`; Ray's `setup_worker.py`
execs it with `default_worker.py` and that worker's arguments where it would exec python.
This client then asks the *zygote* of its environment (one per Ray node and exact worker
environment: the setup hook, the job, the runtime env's variables all in the key) to fork
a child that runs `default_worker.py` with this process's arguments, working folder, umask
and standard streams, and the zygote's environment (this one: the socket is named by its
digest), and stands in for it: its signals go to the child, its exit
status is the child's, and the zygote kills the child when the client goes. The child
registers with the raylet under its own pid (Ray matches a worker by the startup token in
its arguments, not by pid), so the raylet kills, watches and accounts for the child itself.

The first client of an environment becomes its zygote (jobs/zygote.py): it execs into it,
so the zygote is a process the raylet started, as a worker is, and every worker it forks
has the raylet among its ancestors (the job values' check, jobs/job_values.py). The zygote
imports the worker's modules and runs the setup hook its environment names, as a warm
worker would, then forks the worker that client was started as; clients that come while it
imports wait for it rather than import side by side. Where no zygote can be had, a client
runs its worker plain: nothing here can make a worker fail that would have started without
it. The zygote listens on a socket in the Ray session's `sockets` folder (mode 0600), ends
with its raylet or once it has had no worker for a minute, and holds nothing of any job: the
environment it was started with is every client's of its key, and a job's values reach its
workers after they start.

Standard library only, and no import of the package: the client runs with `-I -S`.
"""

from __future__ import annotations

import array
import contextlib
import hashlib
import json
import os
import signal
import socket
import struct
import sys
import time
from typing import Optional

# Unix socket paths are at most 107 bytes here; a longer one is no zygote (plain workers).
_MAX_PATH = 107
# How long a client waits for the zygote another client is becoming, at most, seconds: Ray
# kills a worker process that has not registered within 60 s.
_AWAIT_S = 30.0
# Signals a client passes on to its child, as if it were the worker.
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
              signal.SIGUSR2)


def py_executable() -> str:
    """The `py_executable` of a runtime env whose workers are forked: this file, run by
    this interpreter in isolated mode (no site, no script folder on its path)."""
    import shlex

    return " ".join(shlex.quote(a) for a in (sys.executable, "-I", "-S", os.path.abspath(__file__)))


def socket_path(argv: list, env: dict) -> Optional[str]:
    """The zygote socket of a worker with these arguments and environment: in its Ray
    session's sockets folder (from `--raylet-name`), named by a digest of the environment.
    None where the arguments name no raylet socket or the path would be too long."""
    raylet = next((a.split("=", 1)[1] for a in argv if a.startswith("--raylet-name=")), None)
    if not raylet:
        return None
    key = json.dumps(sorted(env.items()))  # Ray gives all workers of a job one environment
    digest = hashlib.sha256(f"{os.getuid()}\0{sys.executable}\0{key}".encode()).hexdigest()[:16]
    path = os.path.join(os.path.dirname(raylet), f"orch-fork-{digest}")
    return path if len(path.encode()) <= _MAX_PATH else None


# -- the client ------------------------------------------------------------------------------


def client(argv: list) -> None:
    """Run `argv` (default_worker.py and its arguments) as a child of this environment's
    zygote; or become that zygote, where there is none yet; or run it as this process
    itself. Does not return."""
    env = dict(os.environ)
    path = socket_path(argv, env)
    if path and not os.path.exists(path + ".off"):  # .off: a zygote found it cannot serve
        conn = _connect(path) or _become_or_await(path, argv, env)
        if conn is not None:
            _stand_in(conn, argv)  # returns only if the zygote refused before forking
    _exec_plain(argv)


def _become_or_await(path: str, argv: list, env: dict) -> Optional[socket.socket]:
    """No zygote answers: become it (the first client), or wait while another client
    becomes it (a zygote's imports take as long as a plain worker's; several plain workers
    importing side by side on a small machine take longer). None: run plain."""
    lock = path + ".lock"
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        deadline = time.monotonic() + _AWAIT_S
        while time.monotonic() < deadline and _alive(lock) and not os.path.exists(path + ".off"):
            conn = _connect(path)
            if conn is not None:
                return conn
            time.sleep(0.05)
        if not _alive(lock):
            with contextlib.suppress(OSError):
                os.unlink(lock)  # a zygote that died: the next client becomes one again
        return None
    except OSError:
        return None
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    # Still Ray's worker process, the raylet's child: the zygote and so every worker it
    # forks keep the raylet among their ancestors (jobs/job_values.py answers only those).
    # Exec'd without -I -S, to import Ray and torch; the worker's arguments come along.
    zygote = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")
    os.execve(sys.executable, [sys.executable, zygote, "--serve", path, "--", *argv], env)
    return None


def _exec_plain(argv: list) -> None:
    """What Ray's setup_worker.py would have run: this interpreter, without -I -S."""
    os.execv(sys.executable, [sys.executable, *argv])


def _connect(path: str) -> Optional[socket.socket]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return s
    except OSError:
        s.close()
        return None


def _stand_in(conn: socket.socket, argv: list, env_fd: Optional[int] = None) -> None:
    """Hand the worker to the zygote and be it until its child ends. A worker's environment
    is not sent: the socket's name is its digest, so the zygote's own is this one (a warm
    Python's, jobs/warm_python.py, is: in the file `env_fd`, for the child to read)."""
    umask = os.umask(0o022)
    os.umask(umask)
    body = json.dumps({"argv": argv, "cwd": os.getcwd(), "umask": umask}).encode()
    fds = [0, 1, 2] + ([env_fd] if env_fd is not None else [])
    try:
        conn.sendmsg([struct.pack("!I", len(body)) + body],
                     [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        replies = conn.makefile("rb")
        first = replies.readline()
        child = int(first)
    except (OSError, ValueError):
        conn.close()
        return  # not forked: run plain

    # A warm Python's command is a session of its own: a signal to this process (a cancel
    # signals the job's whole group) goes to all of it, as it would have reached all of a
    # command started in the job's group.
    send = os.kill if env_fd is None else os.killpg

    def forward(sig: int, _frame: object) -> None:
        with contextlib.suppress(OSError):
            send(child, sig)

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    try:
        status = int(replies.readline())
    except (OSError, ValueError):  # the zygote is gone (its raylet ended): wait for the child
        while os.path.exists(f"/proc/{child}"):
            time.sleep(0.2)
        os._exit(1)
    if os.WIFSIGNALED(status):
        died_of = os.WTERMSIG(status)
        signal.signal(died_of, signal.SIG_DFL)
        os.kill(os.getpid(), died_of)
    os._exit(os.waitstatus_to_exitcode(status) if status >= 0 else 1)


def _alive(lock: str) -> bool:
    try:
        with open(lock) as f:
            text = f.read().strip()
        if not text:  # being written
            return time.time() - os.path.getmtime(lock) < 30
        os.kill(int(text), 0)
        return True
    except (OSError, ValueError):
        return False


if __name__ == "__main__":
    client(sys.argv[1:])
