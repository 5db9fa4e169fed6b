"""The preemption contract on owned hardware: a run that exits 75 is run again as the same
job, its output kept before the next run's, within `preemption_restarts`, with the values
it was given; never on the cloud (SkyPilot recovers those) or after a cancel. A backend
that replays scripted runs stands in for Ray (tests/integration runs one on a real Ray)."""

from __future__ import annotations

import pytest

from orchestrator.service.orch import Orch
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from providers.base import BackendState


class Runs:
    """A backend whose each submitted run ends as scripted: (status, exit code, output)."""

    address = "fake://"

    def __init__(self, ends: list[tuple[str, int, str]]):
        self.ends = list(ends)
        self.launches: list = []
        self.by_id: dict[str, tuple[str, int, str]] = {}

    def prepare(self) -> None:
        pass

    def gone(self):
        return None

    def submit(self, launch) -> str:
        run_id = launch.submission_id or launch.job_id
        self.launches.append(launch)
        self.by_id[run_id] = self.ends.pop(0)
        return run_id

    def state(self, backend_id, info=None) -> BackendState:
        status, code, _ = self.by_id[backend_id]
        n = list(self.by_id).index(backend_id)  # each run 100 s, 5 s after the one before
        times = {"backend_start": 1000.0 + 105 * n, "backend_end": 1100.0 + 105 * n}
        return BackendState(status, None if status == "SUCCEEDED" else f"exit code {code}",
                            times, exit_code=code)

    def logs(self, backend_id) -> str:
        return self.by_id[backend_id][2]

    def cancel(self, backend_id) -> None:
        pass


JOB = "name: p\nrun: python train.py\nsecrets: {HF_TOKEN: hf-given-inline}\n"


def _orch(tmp_path, runs: Runs, **settings) -> Orch:
    orch = Orch(Settings(home=tmp_path / "home", mode="local", **settings))
    orch.core.providers["local"] = runs
    return orch


def test_a_run_that_exits_75_runs_again_as_the_same_job(tmp_path):
    runs = Runs([("FAILED", 75, "run 1 at epoch 0\n"), ("SUCCEEDED", 0, "run 2 at epoch 2\n")])
    orch = _orch(tmp_path, runs)
    rec = orch.submit(load_spec_text(JOB, "p.yaml")).rec
    rec = orch.refresh(orch.get(rec.id))  # run 1 ended by the contract: run 2 launched
    assert rec.status == "RUNNING" and rec.backend_id == f"{rec.id}-r2"
    assert rec.info.preemptions == 1 and rec.info.earlier_runs == [rec.id]
    first, second = runs.launches
    assert (first.env["ORCH_PREEMPTED_EXIT_CODE"], "ORCH_RESTARTS" in first.env) == ("75", False)
    assert second.env["ORCH_RESTARTS"] == "1"
    assert second.env["ORCH_CHECKPOINT_PATH"] == first.env["ORCH_CHECKPOINT_PATH"]
    assert second.env["ORCH_CHECKPOINT_PATH"].endswith(f"/checkpoints/{rec.id}")
    assert second.secrets["HF_TOKEN"] == "hf-given-inline"  # held by this orch since its submit
    rec = orch.refresh(orch.get(rec.id))
    assert rec.status == "SUCCEEDED"
    # Priced from its first run's start to its last's end: every run held the hardware.
    assert (rec.info.backend_start, rec.info.backend_end) == (1000.0, 1205.0)
    log = orch.logs(rec)
    assert log.index("run 1 at epoch 0") < log.index("run 1 ended with exit 75") < log.index(
        "run 2 at epoch 2")
    assert [r.id for r in orch.core.store.list()] == [rec.id]  # recorded once
    assert "FAILED" not in {h["status"] for h in orch.core.store.history(rec.id)}


def test_a_job_that_keeps_exiting_75_fails_after_its_restarts(tmp_path):
    runs = Runs([("FAILED", 75, "a\n"), ("FAILED", 75, "b\n"), ("FAILED", 75, "c\n")])
    orch = _orch(tmp_path, runs, preemption_restarts=1)
    rec = orch.submit(load_spec_text(JOB, "p.yaml")).rec
    rec = orch.refresh(orch.get(rec.id))
    assert rec.status == "RUNNING" and len(runs.launches) == 2
    rec = orch.refresh(orch.get(rec.id))
    assert rec.status == "FAILED" and len(runs.launches) == 2
    assert rec.message == ("exit 75 (preempted) in each of its 2 runs: not run again after 1 "
                           "restarts (preemption_restarts)")


def test_values_held_by_another_orch_are_named_not_guessed(tmp_path):
    runs = Runs([("FAILED", 75, "a\n"), ("SUCCEEDED", 0, "b\n")])
    rec = _orch(tmp_path, runs).submit(load_spec_text(JOB, "p.yaml")).rec
    other = _orch(tmp_path, runs)  # a later `orch status`: it never had the values
    rec = other.refresh(other.get(rec.id))
    assert rec.status == "FAILED" and len(runs.launches) == 1
    assert "cannot run again: the secret values it was given (HF_TOKEN)" in rec.message


@pytest.mark.parametrize("code", [1, 137])
def test_any_other_exit_is_a_failure_as_before(tmp_path, code):
    runs = Runs([("FAILED", code, "boom\n")])
    orch = _orch(tmp_path, runs)
    rec = orch.submit(load_spec_text(JOB, "p.yaml")).rec
    rec = orch.refresh(orch.get(rec.id))
    assert rec.status == "FAILED" and len(runs.launches) == 1 and not rec.info.preemptions


def test_a_cancelled_job_that_exits_75_is_not_run_again(tmp_path):
    runs = Runs([("FAILED", 75, "a\n"), ("SUCCEEDED", 0, "b\n")])
    orch = _orch(tmp_path, runs)
    rec = orch.submit(load_spec_text(JOB, "p.yaml")).rec
    orch.core.store.update(rec.id, cancel_requested=1)
    rec = orch.refresh(orch.get(rec.id))
    assert rec.status in ("FAILED", "CANCELLED") and len(runs.launches) == 1
