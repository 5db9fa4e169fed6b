"""Backend calls are typed (issue 50): the service calls a backend through `Retrying`, itself
a `Backend`, and reads "the backend does not know this job" from a typed field, never from
the words of a message (which may quote a job's own output)."""

from __future__ import annotations

import time
from typing import Optional

import pytest

from orchestrator.base.errors import BackendError
from orchestrator.service import following
from orchestrator.service.orch import Orch
from orchestrator.service.retrying import Retrying
from orchestrator.settings import Settings
from providers.base import Backend, BackendState, Launch


class Flaky(Backend):
    """Refuses its first `fails` calls, then answers; `state` as told."""

    name, address = "flaky", "here"

    def __init__(self, fails: int = 0, answer: Optional[BackendState] = None, hang_s: float = 0.0):
        self.fails, self.calls, self.answer, self.hang_s = fails, [], answer, hang_s

    def _once(self, what: str) -> None:
        self.calls.append(what)
        if self.hang_s:
            time.sleep(self.hang_s)
        if len(self.calls) <= self.fails:
            raise BackendError(f"{what} refused", "try later")

    def prepare(self) -> None:
        pass

    def submit(self, launch: Launch) -> str:
        self._once("submit")
        return launch.job_id

    def state(self, backend_id: str, info: Optional[dict] = None) -> BackendState:
        self._once("state")
        return self.answer or BackendState("RUNNING")

    def logs(self, backend_id: str) -> str:
        self._once("logs")
        return "a line\n"

    def cancel(self, backend_id: str) -> None:
        self._once("cancel")


def _settings(tmp_path, **kw) -> Settings:
    return Settings(home=tmp_path / "home", mode="local", backend_backoff_s=0, **kw)


def test_retrying_is_a_backend_whose_calls_are_retried_then_named(tmp_path):
    inner = Flaky(fails=2)
    calls = Retrying(inner, _settings(tmp_path))
    assert isinstance(calls, Backend) and calls.name == "flaky" and calls.address == "here"
    assert calls.submit(Launch(job_id="orch-1", entrypoint="true")) == "orch-1"
    assert inner.calls == ["submit"] * 3  # two refusals, then the answer
    assert calls.logs("orch-1") == "a line\n" and calls.state("orch-1").status == "RUNNING"
    calls.cancel("orch-1")
    with pytest.raises(BackendError, match=r"state refused \(after 3 attempts\)"):
        Retrying(Flaky(fails=9), _settings(tmp_path)).state("orch-1")


def test_a_backend_call_that_hangs_is_bounded(tmp_path):
    calls = Retrying(Flaky(hang_s=5.0), _settings(tmp_path, backend_retries=1,
                                                  backend_timeout_s=0.2))
    began = time.monotonic()
    with pytest.raises(BackendError, match="flaky at here did not answer within 0.2 s"):
        calls.logs("orch-1")
    assert time.monotonic() - began < 2.0  # not the 5 s the call takes


def _unlaunched(tmp_path, answer: BackendState):
    orch = Orch(_settings(tmp_path))
    orch.core.providers["local"] = Flaky(answer=answer)
    rec = orch.core.store.create_job(name="j", spec={}, kind="exploratory", target="local",
                                     fingerprint="f")
    orch.core.store.update(rec.id, created_at=time.time() - 3600)  # its submit is long gone
    return following.recover_launch(orch.core, orch.get(rec.id))


def test_a_job_the_backend_knows_is_adopted_whatever_its_message_quotes(tmp_path):
    # The job's own output, quoted by its backend's message (Ray's does), says the words
    # the service once read as "never launched".
    said = BackendState("FAILED", "Traceback: Ray at x has no job orch-y", unknown=False)
    rec = _unlaunched(tmp_path, said)
    assert rec.backend_id == rec.id and rec.status == "PENDING"  # found on the backend


def test_a_job_the_backend_does_not_know_is_failed_by_the_typed_field(tmp_path):
    rec = _unlaunched(tmp_path, BackendState("FAILED", "404", unknown=True))
    assert rec.status == "FAILED" and rec.message.startswith("never launched")
    assert rec.backend_id is None
