"""The runner's side of a job that the target's runner host (jobs/host.py) runs.

On a target with a runner host, orch sets ORCH_RUNNER_HOST to the host's socket. The
runner (`python -m _orch_runner.runner`, still one Ray job per orch job, so the Jobs API keeps
each job's state, log, exit code and cancel) then imports neither Ray nor torch: it hands
the request, the job's public environment and its working_dir to the host, relays the
job's log to its own output, and exits with the run's exit code. The host, where every
job's driver runs and Ray Train unpickles what workers return, gets none of the job's
secret values and not its event key: the run's workers fetch the values from this runner
(jobs/job_values.py), and the host sends the run's state events (`result`, `verdict`) here
over the socket, where this runner signs them into the log it relays. Killing it
(a cancel) closes the connection, and the host aborts the run. When no host answers, the
runner runs the job itself, as on a target without one. Standard library only: this runs on the target.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import socket
import sys
import tempfile
import time
from typing import Optional

from . import events, job_values, secret_env
from .request import RunRequest

HOST_VAR = "ORCH_RUNNER_HOST"  # the host's unix socket, set by orch where the target has one
PUBLIC_VAR = "ORCH_ENV_PUBLIC"  # the names of the job's public environment values
# A job orch started without a Ray job (providers/process_jobs.py): its local Ray's raylet,
# whose workers the job's values are for (a Ray job's driver has it among its parents).
RAYLET_VAR = "ORCH_RAYLET_PID"
# How long a job waits for a host that is still starting (importing torch and Ray Train).
WAIT_S = 60.0
# Lines Ray's worker processes print for its log monitor, which the host's do not pass.
_RAY_MARKERS = (b":actor_name:", b":task_name:", b":job_id:")


def pid_file(sock: str) -> str:
    return sock + ".pid"


def host_alive(sock: str) -> bool:
    try:
        with open(pid_file(sock)) as f:
            os.kill(int(f.read().strip()), 0)
        return True
    except (OSError, ValueError):
        return False


def connect(sock: str, wait_s: float = WAIT_S) -> Optional[socket.socket]:
    """A connection to the host at `sock`, waiting while it starts; None when none answers."""
    deadline = time.monotonic() + wait_s
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(sock)
            return conn
        except OSError:
            conn.close()
            if time.monotonic() > deadline or not host_alive(sock):
                return None
            time.sleep(0.2)


def delegate(req: RunRequest, hidden: dict) -> Optional[int]:
    """Run `req` in the host named by ORCH_RUNNER_HOST: its exit code, or None when there is
    no host to run it (the caller then runs it itself)."""
    sock = os.environ.get(HOST_VAR)
    if not sock:
        return None
    secret = secret_env.for_workers(hidden)
    node = job_values.raylet_above(os.getpid()) or job_values.named_raylet(os.environ.get(RAYLET_VAR))
    if secret and node is None:  # the values' socket could not tell the host from a worker
        events.say("orch runner: no Ray node among this runner's parents to tell the job's "
                   "workers from the runner host; the job runs in this process", err=True)
        return None
    conn = connect(sock)
    if conn is None:
        events.say(f"orch runner: no runner host answers at {sock}; the job runs in this process", err=True)
        return None
    names = [n for n in os.environ.get(PUBLIC_VAR, "").split(",") if n]
    env = {n: os.environ[n] for n in names if n in os.environ and n not in secret}
    fd, log = tempfile.mkstemp(prefix=f"{req.job_id}-", suffix=".log", dir=os.path.dirname(sock))  # 0600
    os.close(fd)
    values = job_values.Server(secret, _host_pid(sock), os.path.dirname(sock), node) \
        if secret else None
    try:
        with conn:
            message = {"request": dataclasses.asdict(req), "env": env, "cwd": os.getcwd(), "log": log}
            if values is not None:
                message["values"] = {"socket": values.path, "names": sorted(secret)}
            conn.sendall(json.dumps(message).encode() + b"\n")
            return relay(conn, log, key=secret_env.event_key(hidden))
    finally:
        if values is not None:
            values.close()
        with contextlib.suppress(OSError):
            os.unlink(log)


def _host_pid(sock: str) -> Optional[int]:
    try:
        with open(pid_file(sock)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def relay(conn: socket.socket, log: str, out=None, key: Optional[str] = None) -> int:
    """Copy the job's log to `out` (stdout) as it grows, and the run's state events the host
    sends, signed here with the job's event key `key`, until the host sends the exit code."""
    out = out or sys.stdout.buffer
    reply = b""
    with open(log, "rb") as f, _Lines(out) as lines:
        while True:
            ready, _, _ = select.select([conn], [], [], 0.1)
            lines.feed(f.read())
            if not ready:
                continue
            data = conn.recv(4096)
            if data:
                reply += data
                while b"\n" in reply:
                    line, reply = reply.split(b"\n", 1)
                    lines.feed(f.read())  # what the run wrote before it
                    message = json.loads(line)
                    if "exit" in message:
                        return int(message["exit"])
                    lines.state(message.get("state"), key)
                continue
            lines.feed(f.read())  # the host is gone before the run ended
            error = "orch runner: the runner host stopped during the run (`orch local up` starts it again)"
            lines.close()
            events.emit("result", ok=False, error=error)
            events.say(error, err=True)
            return 1


class _Lines:
    """Whole lines to `out`, Ray's log-monitor markers left out."""

    def __init__(self, out):
        self.out = out
        self.rest = b""

    def feed(self, data: bytes) -> None:
        if not data:
            return
        *whole, self.rest = (self.rest + data).split(b"\n")
        kept = [ln for ln in whole if not ln.startswith(_RAY_MARKERS)]
        if kept:
            self.out.write(b"\n".join(kept) + b"\n")
            self.out.flush()

    def state(self, event: object, key: Optional[str]) -> None:
        """A state event the host sent, as one line of its own, signed with `key`."""
        if not isinstance(event, dict) or event.get("event") not in events.STATE_EVENTS:
            return
        fields = event.get("fields")
        fields = {k: v for k, v in fields.items() if k not in ("event", "t")} if isinstance(fields, dict) else {}
        self.out.write(events.event_line(str(event["event"]), key, **fields).encode() + b"\n")
        self.out.flush()

    def close(self) -> None:
        if self.rest and not self.rest.startswith(_RAY_MARKERS):
            self.out.write(self.rest + b"\n")
            self.out.flush()
        self.rest = b""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
