"""A hosted run's secret values, from the job's own runner to its workers, never through the host.

The runner host (jobs/host.py) runs every job's Ray Train driver in one process, and Ray
Train unpickles each worker's results there: a worker's code can run inside the host. So
the host holds no job's values. The job's runner (jobs/hosted.py, a process of that job
alone) serves them on a unix socket of its own (0600, in a 0700 folder), and each worker
of the run fetches them as it starts; the host hands on only the socket's path and the
values' names. The runner answers a Ray worker process alone (the raylet that started the
runner is among its ancestors) and none that the host started (the host is not among
them), so code run inside the host cannot fetch the values itself. Standard library only:
this runs on the target.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import tempfile
import threading
from typing import Mapping, Optional

from .secret_env import Hidden

_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def parent(pid: int) -> Optional[int]:
    """`pid`'s parent, from /proc; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def ancestors(pid: int) -> list[int]:
    """`pid`'s parent, its parent's parent, ... up to init."""
    chain: list[int] = []
    while len(chain) < 64:
        up = parent(pid)
        if up is None or up <= 0:
            break
        chain.append(up)
        if up == 1:
            break
        pid = up
    return chain


def raylet_above(pid: int) -> Optional[int]:
    """The raylet among `pid`'s ancestors (the one that started a Ray job's processes)."""
    for up in ancestors(pid):
        with contextlib.suppress(OSError):
            with open(f"/proc/{up}/comm") as f:
                if f.read().strip() == "raylet":
                    return up
    return None


def named_raylet(pid: Optional[str]) -> Optional[int]:
    """`pid` (text) where it names a running raylet; None otherwise."""
    try:
        number = int(pid or "")
        with open(f"/proc/{number}/comm") as f:
            return number if f.read().strip() == "raylet" else None
    except (OSError, ValueError):
        return None


class Server:
    """The values of one job, served to its run's workers while the run lasts."""

    def __init__(self, values: Mapping[str, str], host_pid: Optional[int], folder: Optional[str],
                 node: Optional[int]):
        """`node`: the process whose descendants may ask (the raylet above the runner,
        `raylet_above`); required: without one no process could be told from another."""
        if node is None:
            raise ValueError("no Ray node process to answer the workers of")
        self.dir = tempfile.mkdtemp(prefix="orch-values-", dir=folder)  # 0700
        self.path = os.path.join(self.dir, "s")
        self._payload = json.dumps(dict(values)).encode()
        self._host = host_pid
        self._node = node
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self._sock.bind(self.path)
        finally:
            os.umask(old)
        self._sock.listen(16)
        self.refused = 0
        threading.Thread(target=self._loop, daemon=True, name="orch-values").start()

    def allowed(self, pid: int) -> bool:
        """Whether process `pid` may have the values: a Ray worker of this raylet, not the
        host nor anything the host started."""
        chain = [pid, *ancestors(pid)]
        if self._host is not None and self._host in chain:
            return False
        return self._node in chain

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            with conn, contextlib.suppress(OSError):
                pid = _CRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size))[0]
                if self.allowed(pid):
                    conn.sendall(self._payload)
                else:
                    self.refused += 1

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept
        self._sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def fetch(path: str, timeout_s: float = 10.0) -> dict[str, str]:
    """The values the job's runner serves at `path` (a worker of its run asks)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout_s)
    data = b""
    try:
        conn.connect(path)
        while chunk := conn.recv(65536):
            data += chunk
    except OSError as e:
        raise RuntimeError(f"orch: cannot fetch the job's secret values from its runner: {e}") from None
    finally:
        conn.close()
    if not data:
        raise RuntimeError("orch: the job's runner refused this process its secret values "
                           "(it answers the run's Ray workers alone)")
    values = json.loads(data)
    return {str(k): str(v) for k, v in values.items()}


class Remote(Hidden):
    """A hosted run's values as its workers get them: the public ones here, the secret ones
    fetched from the job's runner (`values`) in the worker, never held by the host."""

    def __init__(self, public: Mapping[str, str], path: str, names: list[str]):
        super().__init__(public)
        self.path = path
        self._secret_names = sorted(str(n) for n in names)

    @property
    def values(self) -> dict[str, str]:
        return {**self._values, **(fetch(self.path) if self._secret_names else {})}

    def names(self) -> list[str]:
        return sorted({*self._values, *self._secret_names})
