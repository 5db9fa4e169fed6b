"""The one-line event format a running job uses to tell orch its progress and metrics.

Events travel inside the job's ordinary log stream, so they reach orch the same way from
a local Ray, an on-prem cluster or a cloud VM, and survive in the saved log.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
import time
from typing import IO, Any, Iterator, Optional

MARKER = "::orch::"

# Where this thread's events and messages go: its job's log in the runner host
# (jobs/host.py), which runs several jobs in one process; stdout everywhere else.
_OUT = threading.local()


def stream(err: bool = False) -> IO[str]:
    """This thread's output: its job's log under `redirect`, else stdout (or stderr)."""
    out: Optional[IO[str]] = getattr(_OUT, "stream", None)
    if out is not None:
        return out
    return sys.stderr if err else sys.stdout


@contextlib.contextmanager
def redirect(out: IO[str]) -> Iterator[None]:
    """Send this thread's events and `say` lines to `out` while the block runs."""
    before = getattr(_OUT, "stream", None)
    _OUT.stream = out
    try:
        yield
    finally:
        _OUT.stream = before


def say(text: str, err: bool = False) -> None:
    """One line for the job's log (a message, not an event)."""
    out = stream(err)
    out.write(text + "\n")
    out.flush()


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    try:  # numpy / torch scalars
        return _clean(value.item())
    except Exception:
        return str(value)


def emit(event: str, /, **fields: Any) -> None:
    """Print one event line; flushed at once so a follower sees it live."""
    payload = json.dumps({"event": event, "t": round(time.time(), 3), **_clean(fields)},
                         separators=(",", ":"))
    out = stream()
    out.write(f"{MARKER}{payload}\n")
    out.flush()


def parse_line(line: str) -> dict | None:
    """The event in a log line, or None. Ray may prefix worker lines with '(Actor pid=..)'."""
    i = line.find(MARKER)
    if i < 0:
        return None
    try:
        event = json.loads(line[i + len(MARKER):].strip())
    except ValueError:
        return None
    return event if isinstance(event, dict) and "event" in event else None


def parse(text: str) -> Iterator[dict]:
    for line in text.splitlines():
        event = parse_line(line)
        if event is not None:
            yield event
