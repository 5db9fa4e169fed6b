"""Which orch process submitted a job, and whether it still lives: how a job recorded but
never launched is told from one still being launched."""

from __future__ import annotations

import os


def submitter() -> dict:
    """Who is submitting: enough to tell later whether that process still lives."""
    import socket

    import psutil

    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": round(psutil.Process().create_time(), 2), "began": began()}


def began() -> float:
    """When this process started, to 10 ms where Linux says: psutil's create_time counts
    from the boot time the kernel gives in whole seconds, up to a second early (the phases
    of a job's record start here). Elsewhere, psutil's."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        import time

        return round(time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, ValueError, IndexError):
        import psutil

        return round(psutil.Process().create_time(), 2)


def alive(sub: dict) -> bool:
    """Whether the submitting orch still runs; True when it cannot be told (another host)."""
    import socket

    import psutil

    if sub.get("host") != socket.gethostname():
        return True
    try:
        return round(psutil.Process(int(sub["pid"])).create_time(), 2) == sub.get("started")
    except (psutil.Error, KeyError, ValueError, TypeError):
        return False
