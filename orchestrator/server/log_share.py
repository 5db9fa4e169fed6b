"""One read of a running job's log for all who follow it: each follower of `GET
/v1/jobs/ID/logs?follow=true` asks once a second, and N followers of one job cost one read
of its backend's log (and one redaction) a second, not N. Thirty followers re-reading one
log each second made another user's list take 6.8 s (issue 47)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

FRESH_S = 1.0  # a read younger than this is shared
KEEP_S = 30.0  # a job no one asked about for this long is forgotten


@dataclass
class _Read:
    asked: float  # when a follower last asked
    at: Optional[float] = None  # when the value was read; None: not yet
    value: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class LogShare:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[str, _Read] = {}

    def read(self, job_id: str, fetch: Callable[[], Any]) -> Any:
        """`fetch()`'s answer for this job, as read by any caller within FRESH_S: a caller
        that comes while a read is under way waits for it rather than reading again. A
        read that raises is not kept."""
        now = self._clock()
        with self._lock:
            for jid in [j for j, r in self._jobs.items() if now - r.asked > KEEP_S]:
                del self._jobs[jid]
            read = self._jobs.setdefault(job_id, _Read(asked=now))
            read.asked = now
        with read.lock:
            if read.at is not None and self._clock() - read.at < FRESH_S:
                return read.value
            read.value, read.at = fetch(), self._clock()
            return read.value

    def __len__(self) -> int:
        return len(self._jobs)
