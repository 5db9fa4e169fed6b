"""The one-line event format a running job uses to tell orch its progress and metrics.

Events travel inside the job's ordinary log stream, so they reach orch the same way from
a local Ray, an on-prem cluster or a cloud VM, and survive in the saved log.

Anything the job runs can print such a line, so the events that set what orch shows as the
job's outcome (`result`, `verdict`: STATE_EVENTS) are signed by orch's runner with the
job's event key (KEY_VAR, one per job, made when orch records it and handed to the runner
among its secret values, never to its workers or the job's own code): orch reads a state
event of a job recorded with a key only with a good signature (`verified`).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import math
import sys
import threading
import time
from typing import IO, Any, Callable, Iterator, Optional, Union

from . import event_shapes

MARKER = "::orch::"
KEY_VAR = "ORCH_EVENT_KEY"  # the job's event key, among the runner's secret values
SIG = "sig"  # the field a signed event carries its HMAC-SHA256 in
STATE_EVENTS = frozenset({"result", "verdict"})  # counted only when signed, for a keyed job

# Where this thread's events and messages go: its job's log in the runner host
# (jobs/host.py), which runs several jobs in one process; stdout everywhere else.
_OUT = threading.local()
_WRITE = threading.Lock()  # one line at a time: a worker's telemetry thread emits too

# What signs a thread's state events: the job's event key, or (in the runner host, which
# holds no job's key) a function that hands each state event to the job's own runner,
# which signs it (jobs/hosted.py).
Signer = Union[str, Callable[[str, dict], None], None]


def stream(err: bool = False) -> IO[str]:
    """This thread's output: its job's log under `redirect`, else stdout (or stderr)."""
    out: Optional[IO[str]] = getattr(_OUT, "stream", None)
    if out is not None:
        return out
    return sys.stderr if err else sys.stdout


def current_key() -> Signer:
    """What this thread signs its state events with (`signing`), for a thread it starts."""
    key: Signer = getattr(_OUT, "key", None)
    return key


@contextlib.contextmanager
def signing(key: Signer) -> Iterator[None]:
    """Sign this thread's state events with `key` (the job's event key) while the block
    runs; a function: hand them to it instead of printing them (the runner host's way);
    None: leave them unsigned (a job recorded before keys, or none handed over)."""
    before = current_key()
    _OUT.key = key
    try:
        yield
    finally:
        _OUT.key = before


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


def _canonical(event: dict) -> bytes:
    """What a signature covers: the event without its signature, keys sorted, compact
    (the same bytes whether made from the emitted dict or from its parsed line)."""
    body = {k: v for k, v in event.items() if k != SIG}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def signature(event: dict, key: str) -> str:
    return hmac.new(key.encode(), _canonical(event), hashlib.sha256).hexdigest()


def verified(event: dict, key: str) -> bool:
    """Whether `event` (parsed from a line) carries `key`'s signature of itself."""
    sig = event.get(SIG)
    return isinstance(sig, str) and hmac.compare_digest(sig, signature(event, key))


def event_line(event: str, key: Optional[str], /, **fields: Any) -> str:
    """One event line (without its newline); a state event signed when `key` is given."""
    body = {"event": event, "t": round(time.time(), 3), **_clean(fields)}
    body.pop(SIG, None)  # a field of that name is the signature's alone
    if key and event in STATE_EVENTS:
        body[SIG] = signature(body, key)
    return MARKER + json.dumps(body, separators=(",", ":"))


def emit(event: str, /, **fields: Any) -> None:
    """Print one event line; flushed at once so a follower sees it live. A state event is
    signed with this thread's key (`signing`), where it has one."""
    key = current_key()
    if callable(key):
        if event in STATE_EVENTS:
            key(event, _clean(fields))
            return
        key = None
    text = event_line(event, key, **fields)
    out = stream()
    with _WRITE:
        out.write(text + "\n")
        out.flush()


def parse_line(line: str) -> dict | None:
    """The event in a log line, or None. Ray may prefix worker lines with '(Actor pid=..)'.
    Only an event of the shape orch's runner gives (jobs/event_shapes.py): anything a job
    runs prints here, and nothing it prints makes this raise."""
    return checked_line(line)[0]


def checked_line(line: str) -> tuple[Optional[dict], Optional[str]]:
    """(the line's event, None), (None, what is wrong with its event line), or (None, None)
    for a line that is not one."""
    i = line.find(MARKER)
    if i < 0:
        return None, None
    body = line[i + len(MARKER):]
    if len(body) > event_shapes.MAX_LINE:
        return None, "an event line too long"
    try:
        event = json.loads(body.strip())
    except (ValueError, RecursionError):
        return None, "not JSON"
    bad = event_shapes.problem(event)
    return (None, bad) if bad else (event, None)


def read(text: str) -> tuple[list[dict], list[str]]:
    """The events of a log, and what was wrong with each event line left out ("line N: ...")."""
    found: list[dict] = []
    dropped: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        event, bad = checked_line(line)
        if event is not None:
            found.append(event)
        elif bad:
            dropped.append(f"line {n}: {bad}")
    return found, dropped


def parse(text: str) -> Iterator[dict]:
    for line in text.splitlines():
        event = parse_line(line)
        if event is not None:
            yield event
