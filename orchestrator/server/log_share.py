"""One read of a running job's log for all who follow it: each follower of `GET
/v1/jobs/ID/logs?follow=true` asks once a second, and N followers of one job cost one read
of its backend's log (and one redaction) a second, not N. Thirty followers re-reading one
log each second made another user's list take 6.8 s."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

FRESH_S = 1.0  # a read younger than this is shared
KEEP_S = 30.0  # a job no one asked about for this long is forgotten


class LogShare:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, dict] = {}  # job id -> {"lock", "at", "value", "asked"}

    def read(self, job_id: str, fetch: Callable[[], Any]) -> Any:
        """`fetch()`'s answer for this job, as read by any caller within FRESH_S: a caller
        that comes while a read is under way waits for it rather than reading again. A
        read that raises is not kept."""
        now = self._clock()
        with self._lock:
            for jid in [j for j, e in self._jobs.items() if now - e["asked"] > KEEP_S]:
                del self._jobs[jid]
            entry = self._jobs.setdefault(job_id, {"lock": threading.Lock(), "at": None,
                                                   "value": None, "asked": now})
            entry["asked"] = now
        with entry["lock"]:
            if entry["at"] is not None and self._clock() - entry["at"] < FRESH_S:
                return entry["value"]
            value = fetch()
            entry["value"], entry["at"] = value, self._clock()
            return value

    def __len__(self) -> int:
        return len(self._jobs)
