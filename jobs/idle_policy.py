"""`utilization_policy` over a whole run: warn about, or stop, a run whose every device has
stayed below `min_utilization` for `window_minutes` (dstack's name and meaning).

Each worker judges its own device (jobs/telemetry.py, `idle_peak`) and posts whether it is
idle, with its highest reading over the window, to a board in the cluster's key-value
store (Ray's GCS, which every worker and the driver already talk to: no process more per
run). The driver watches the board: once every worker's device is idle, it warns (a log
line and a `utilization` event the job's record keeps) or stops the run (its Ray Train
controller aborted as a Ctrl-C does; the runner then ends the run FAILED with the reason).
One busy device of two keeps the run going: the others may wait on it.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Callable, Optional

from . import events
from .telemetry import IdlePolicy, idle_text

NAMESPACE = "orch_utilization"


def _kv() -> Any:
    from ray.experimental import internal_kv

    return internal_kv


def post(board: str, rank: int, peak: Optional[float]) -> None:
    """A worker's device: idle with this peak over the window, or (None) not idle."""
    _kv()._internal_kv_put(f"{board}/{rank}", json.dumps({"peak": peak}), overwrite=True,
                           namespace=NAMESPACE)


def read(board: str) -> dict[int, Optional[float]]:
    """Each worker's last post: rank -> its idle peak, or None while it is not idle."""
    kv = _kv()
    out: dict[int, Optional[float]] = {}
    for key in kv._internal_kv_list(f"{board}/", namespace=NAMESPACE):
        raw = kv._internal_kv_get(key, namespace=NAMESPACE)
        name = key.decode() if isinstance(key, bytes) else str(key)
        try:
            out[int(name.rsplit("/", 1)[1])] = json.loads(raw)["peak"]
        except (ValueError, KeyError, TypeError, IndexError):
            continue  # not a post of this module's
    return out


def clear(board: str) -> None:
    _kv()._internal_kv_del(f"{board}/", del_by_prefix=True, namespace=NAMESPACE)


def run_idle(policy: IdlePolicy, posts: dict[int, Optional[float]], workers: int) -> Optional[str]:
    """Why the run is idle, or None: every one of its `workers` has posted an idle device."""
    peaks = [posts.get(rank) for rank in range(workers)]
    if workers < 1 or any(p is None for p in peaks):
        return None
    return idle_text(policy, workers, max(p for p in peaks if p is not None))


class Watch:
    """The driver's side: reads the board every `poll_s` seconds in a daemon thread. An idle
    run is warned about once per idle spell (`action: warn`), or stopped once (`action:
    stop`: `on_stop(reason)`, then `stopped` holds the reason). Its events go where the
    thread that made the Watch sends its own (the job's log, signed as it signs)."""

    def __init__(self, policy: IdlePolicy, board: str, workers: int, on_stop: Callable[[str], None],
                 poll_s: float = 1.0, reader: Callable[[str], dict] = read):
        self.policy, self.board, self.workers = policy, board, workers
        self.on_stop, self.poll_s, self._read = on_stop, poll_s, reader
        self.stopped: Optional[str] = None
        self.warned = 0
        self._idle = False
        self._out = events.stream(), events.current_key()
        self._done = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> Watch:
        self._thread = threading.Thread(target=self._run, name="orch-utilization", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        stream, key = self._out
        with events.redirect(stream), events.signing(key):
            while not self._done.wait(self.poll_s):
                try:
                    if self.check():
                        return
                except Exception as e:  # noqa: BLE001  (a board that fails to answer is skipped)
                    events.say(f"orch runner: utilization_policy: could not read the workers' "
                               f"devices: {type(e).__name__}: {e}", err=True)

    def check(self) -> bool:
        """One look at the board; True once the run is stopped."""
        reason = run_idle(self.policy, self._read(self.board), self.workers)
        if reason is None:
            self._idle = False
            return False
        if self._idle:
            return False  # warned about this idle spell already
        self._idle = True
        action = self.policy.action
        events.emit("utilization", action=action, reason=reason,
                    min_utilization=self.policy.min_utilization,
                    window_minutes=self.policy.window_minutes)
        if action != "stop":
            self.warned += 1
            events.say(f"orch runner: warning: {reason} (utilization_policy)", err=True)
            return False
        self.stopped = f"stopped by utilization_policy: {reason}"
        events.say(f"orch runner: {self.stopped}", err=True)
        self.on_stop(self.stopped)
        return True

    def close(self) -> None:
        self._done.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.poll_s + 1.0)
