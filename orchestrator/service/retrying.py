"""`Retrying`: a backend that calls another one with bounded retries and a time limit on
each call, itself a `Backend` (providers/base.py), so each call is a typed method call that
mypy, grep and a reader can follow. The service launches and follows jobs through it."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable, Optional, TypeVar

from orchestrator.base.errors import BackendError
from providers.base import Backend, BackendState, Launch

if TYPE_CHECKING:
    from orchestrator.settings import Settings

T = TypeVar("T")


class Retrying(Backend):
    """`inner`'s submit, state, logs and cancel, each retried `backend_retries` times with
    doubling waits and bounded by `backend_timeout_s` (a submit, which may upload a
    workdir, by five times that); the last error raised naming the backend, the attempts
    and what to do. Every call is safe to repeat: submit is idempotent by job id, the rest
    read or stop. What a launch looks like there (class facts) is read from `inner`."""

    def __init__(self, inner: Backend, settings: Settings):
        self.inner = inner
        self.settings = settings

    @property
    def name(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "name", "the backend")

    @property
    def address(self) -> str:  # type: ignore[override]
        return getattr(self.inner, "address", "") or ""

    def prepare(self) -> None:
        self.inner.prepare()  # may start a local Ray: its own time, not a call to bound

    def submit(self, launch: Launch) -> str:
        return self._call(lambda: self.inner.submit(launch), timeout_factor=5)

    def state(self, backend_id: str, info: Optional[dict] = None) -> BackendState:
        return self._call(lambda: self.inner.state(backend_id, info))

    def logs(self, backend_id: str) -> str:
        return self._call(lambda: self.inner.logs(backend_id))

    def cancel(self, backend_id: str) -> None:
        self._call(lambda: self.inner.cancel(backend_id))

    def gone(self) -> Optional[str]:
        return self.inner.gone()

    def _call(self, fn: Callable[[], T], timeout_factor: float = 1) -> T:
        attempts, wait = self.settings.backend_retries, self.settings.backend_backoff_s
        timeout = self.settings.backend_timeout_s * timeout_factor
        for i in range(attempts):
            try:
                return call_within(fn, timeout, f"{self.name} at {self.address or '?'}")
            except BackendError as e:
                if i == attempts - 1:
                    raise BackendError(f"{e.message} (after {attempts} attempts)", e.hint) from None
                time.sleep(wait * 2 ** i)
        raise AssertionError("backend_retries is at least 1")  # settings check it


def call_within(fn: Callable[[], T], timeout_s: float, who: str) -> T:
    """fn(), or BackendError when it has not returned within `timeout_s`: a backend that
    hangs is reported like one that refuses. The call is left to finish in a daemon
    thread; every provider call is safe to have twice (submit is idempotent by job id)."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=run, daemon=True, name="orch-backend-call")
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise BackendError(f"{who} did not answer within {timeout_s:g} s",
                           "the backend is overloaded or hanging; `orch doctor` checks it")
    if "error" in box:
        raise box["error"]
    return box.get("value")  # type: ignore[return-value]
