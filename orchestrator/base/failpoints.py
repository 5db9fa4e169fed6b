"""Crash points for testing: `ORCH_FAILPOINTS=recorded,launched` kills orch at those steps.

Each step of a submit calls `reached(step)`. Unset (always, outside tests), it does nothing;
set, the process kills itself with SIGKILL there, as a power cut or `kill -9` would, so the
tests can prove that every step leaves a state `orch status` reconciles.
"""

from __future__ import annotations

import os
import signal

SUBMIT_STEPS = ("planned", "recorded", "prepared", "launched", "stored")


def reached(step: str) -> None:
    wanted = os.environ.get("ORCH_FAILPOINTS")
    if wanted and step in wanted.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
