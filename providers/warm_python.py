"""The local Ray's warm Python (jobs/warm_python.py): its zygote started beside the Ray the
first time a `run:` job needs it, and what such a job's environment says of it.

The zygote is a process of this Ray (its socket in the Ray's temporary folder, so `orch
local down` finds it by its arguments) that ends with the raylet; it is started from the
environment a job of this Ray gets (the raylet's allowlist, never orch's own), without
PYTHONPATH, so that a child's path is the command's: it holds no job's value (each child
gets its command's environment). A job whose `envs` say `ORCH_WARM_PYTHON: "0"` runs every
`python` plain.
"""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from jobs.warm_python import BIN_VAR, SOCKET_VAR
from providers.process_jobs import read_file
from providers.runner_package import NAME

SOCKET = "orch-python.sock"
BIN = "orch-python-bin"
_START_S = 60.0  # a start older than this that made no socket is tried again


def job_env(temp_dir: Path, runner: Path, env: dict, raylet: Optional[int]) -> dict:
    """What a local `run:` job's environment needs for its `python` to be warm: the
    zygote's socket and the folder of the `python` shims, the zygote started (in the
    background, from `env`: the Ray's, never a job's values) where none runs."""
    if not raylet:
        return {}
    sock = temp_dir / SOCKET
    script = runner / NAME / "warm_python.py"
    if not _listening(sock):
        _start(sock, script, env, raylet)
    return {SOCKET_VAR: str(sock), BIN_VAR: str(_shims(temp_dir / BIN, script))}


def _listening(sock: Path) -> bool:
    from jobs.forkserver import _connect

    conn = _connect(str(sock))
    if conn is not None:
        conn.close()
    return conn is not None


def _start(sock: Path, script: Path, env: dict, raylet: int) -> None:
    """The zygote, once: a second submit while it imports torch does not start another."""
    marker = sock.with_name(sock.name + ".starting")
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        try:
            if time.time() - marker.stat().st_mtime < _START_S:
                return
            marker.unlink()
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except OSError:
            return
    os.close(fd)
    zygote_env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", SOCKET_VAR, BIN_VAR)}
    zygote_env["RAY_RAYLET_PID"] = str(raylet)
    subprocess.Popen([sys.executable, str(script), "--serve", str(sock)], env=zygote_env,
                     cwd=str(script.parent.parent), stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, close_fds=True)


def _shims(folder: Path, script: Path) -> Path:
    """`python`, `python3` and `torchrun` (`python -m torch.distributed.run`) in `folder`:
    each runs jobs/warm_python.py's client."""
    client = f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S {shlex.quote(str(script))}"
    folder.mkdir(mode=0o700, exist_ok=True)
    for name, args in (("python", ""), ("python3", ""), ("torchrun", " -m torch.distributed.run")):
        line = f'{client}{args} "$@"\n'
        path = folder / name
        if read_file(path, len(line.encode()) + 1) == line:  # a job may have put a FIFO there
            continue
        tmp = folder / f".{name}.{secrets.token_hex(8)}"  # a new file, never one put there
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o755)
        with os.fdopen(fd, "w") as f:
            f.write(line)
        tmp.replace(path)
    return folder
