"""When the client tries a request again: which failures are a lost connection (the next
replica, or the same load balancer, may answer), whether the server may have acted on the
request already, and how long to wait before the next try, within a bounded time.

The client (`remote.Remote`) does the requests; this module only decides, so a test is a
table of cases and a fake clock.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from orchestrator.base.errors import OrchError

RETRY_S = 30.0  # how long a request is tried again before the client gives up
# While every try was refused (nothing listens at any URL: no server, or one restarting on
# its machine), the tries stop sooner: a server that is simply not there says so at once.
REFUSED_S = 10.0
REFUSED = "connection refused"
FIRST_WAIT_S = 0.25  # the pause after the first round over every URL; it doubles after each
MAX_WAIT_S = 4.0


def server_urls(text: str) -> list[str]:
    """ORCH_SERVER's URLs: one (a server, or a load balancer before several), or several
    replicas' comma-separated, each without its trailing slash."""
    urls = [u.strip().rstrip("/") for u in text.split(",") if u.strip()]
    if not urls:
        raise OrchError("no orch server URL given", "set ORCH_SERVER to http://host:8765, or to "
                        "several replicas' URLs separated by commas")
    return urls


class Lost(Exception):
    """A request that got no answer from `url`. `sent`: the server may have received it
    whole, and may have acted on it; else it surely did not (refused, or cut off while
    connecting or sending). `said`: the server's own error, when it answered one."""

    def __init__(self, url: str, reason: str, sent: bool, said: Optional[OrchError] = None):
        super().__init__(reason)
        self.url, self.reason, self.sent = url, reason, sent
        self.said = said  # orch's own 503 (its store unreachable): said if no try succeeds


def proxy_failure(status: int, raw: bytes) -> bool:
    """Whether an HTTP answer (its status and body) means "this server is unreachable now",
    to try again: a proxy's 502/503/504 (its upstream down), or orch's own 503 (its store
    unreachable: the database restarting). orch's own 502 is a backend that failed: said at
    once."""
    if status in (503, 504):
        return True
    return status == 502 and not orch_shaped(raw)


def orch_shaped(raw: bytes) -> bool:
    """Whether an error's body is orch's own {"error", "hint"} (not a proxy's page)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return False
    return isinstance(body, dict) and "error" in body


def brief(raw: bytes) -> str:
    """An error body in a few words: orch's message, or a proxy page's first line."""
    try:
        body = json.loads(raw)
        if isinstance(body, dict) and body.get("error"):
            return str(body["error"])[:200]
    except ValueError:
        pass
    text = raw.decode(errors="replace").strip()
    return (text.splitlines()[0][:200] if text else "no body")


def why(e: BaseException) -> str:
    """A lost connection in a few words."""
    reason = getattr(e, "reason", None) or e
    if isinstance(reason, ConnectionRefusedError):
        return REFUSED
    if isinstance(reason, ConnectionResetError):
        return "connection reset"
    if isinstance(reason, TimeoutError):
        return "timed out"
    text = str(reason).strip()
    return text or type(reason).__name__


@dataclass
class Tries:
    """The tries of one request over `urls`, from `start`: each failure moves to the next
    URL; after a whole round of them failed, a pause (FIRST_WAIT_S, doubling up to
    MAX_WAIT_S, with jitter so that many clients do not come back at once); none after
    `budget_s` from the first try (REFUSED_S while every try was refused)."""

    urls: list[str]
    budget_s: float = RETRY_S
    start: int = 0
    clock: Callable[[], float] = time.monotonic
    index: int = field(init=False)
    failures: int = field(init=False, default=0)
    began: float = field(init=False)
    last: dict[str, str] = field(init=False, default_factory=dict)  # url -> its last failure
    refused_only: bool = field(init=False, default=True)  # every failure so far a refusal

    def __post_init__(self) -> None:
        self.index = self.start % len(self.urls)
        self.began = self.clock()

    @property
    def url(self) -> str:
        return self.urls[self.index]

    def failed(self, lost: Lost) -> Optional[float]:
        """Count `lost`, move to the next URL; the seconds to wait before the next try, or
        None when the time for tries is spent."""
        self.failures += 1
        self.last[lost.url] = lost.reason
        self.index = (self.index + 1) % len(self.urls)
        self.refused_only = self.refused_only and lost.reason == REFUSED and not lost.sent
        budget = min(self.budget_s, REFUSED_S) if self.refused_only else self.budget_s
        left = budget - (self.clock() - self.began)
        if left <= 0:
            return None
        if self.failures % len(self.urls):
            return 0.0  # the next URL at once: it is another replica
        rounds = self.failures // len(self.urls)
        wait = min(MAX_WAIT_S, FIRST_WAIT_S * 2 ** (rounds - 1)) * random.uniform(0.5, 1.0)
        return min(wait, left)

    def ok(self) -> None:
        """The request got through: a later loss (a followed log's) starts afresh."""
        self.failures, self.began, self.refused_only = 0, self.clock(), True
        self.last.clear()

    def spent(self) -> str:
        """What was tried, for the message that gives up."""
        took = self.clock() - self.began
        each = "; ".join(f"{u}: {r}" for u, r in self.last.items())
        return f"{self.failures} tries over {took:.0f} s ({each})"
