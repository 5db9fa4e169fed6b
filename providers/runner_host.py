"""The local Ray's runner host (jobs/host.py) seen from orch: whether it runs, how it
answers, and stopping one that another version of orch's runner started (its protocol with
the jobs' drivers would be the old one), never while a job still runs on it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

from jobs.hosted import host_alive as _host_alive
from jobs.hosted import pid_file
from orchestrator.base.errors import BackendError


def host_alive(sock: Optional[str]) -> bool:
    """Whether the runner host of that socket runs (its pid file names a live process)."""
    return bool(sock) and _host_alive(str(sock))


def host_state(sock: Optional[str]) -> str:
    """The runner host: ready (it answers), starting (it runs, importing torch), stopped,
    or off (this instance was started without one)."""
    if not sock:
        return "off"
    from jobs.hosted import connect

    try:
        conn = connect(sock, wait_s=0)
    except Exception:  # noqa: BLE001  (a status line never fails the caller)
        return "unknown"
    if conn is not None:
        conn.close()
        return "ready"
    return "starting" if host_alive(sock) else "stopped"


def stop_stale_host(sock: str, running_jobs: int) -> None:
    """Stop the host of `sock`, started by another version of the runner; refused (with what
    to do) while `running_jobs` run on its Ray. The next `up` starts a new one."""
    import psutil

    if running_jobs:
        raise BackendError(
            f"the local Ray's runner host was started by another version of orch, and "
            f"{running_jobs} job(s) still run on it",
            "let them finish (the next job then starts a new host), or `orch local down`")
    with contextlib.suppress(OSError, ValueError, psutil.Error):
        host = psutil.Process(int(Path(pid_file(sock)).read_text()))
        host.terminate()
        try:
            host.wait(10)
        except psutil.TimeoutExpired:
            host.kill()
            host.wait(5)
