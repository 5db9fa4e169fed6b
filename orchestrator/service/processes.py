"""Which orch process submitted a job, and whether it still lives: how a job recorded but
never launched is told from one still being launched."""

from __future__ import annotations

import os


def submitter() -> dict:
    """Who is submitting: enough to tell later whether that process still lives."""
    import socket

    import psutil

    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": round(psutil.Process().create_time(), 2)}


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
