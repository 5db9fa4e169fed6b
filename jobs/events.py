"""The one-line event format a running job uses to tell orch its progress and metrics.

Events travel inside the job's ordinary log stream, so they reach orch the same way from
a local Ray, an on-prem cluster or a cloud VM, and survive in the saved log.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any, Iterator

MARKER = "::orch::"


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
    sys.stdout.write(f"{MARKER}{payload}\n")
    sys.stdout.flush()


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
