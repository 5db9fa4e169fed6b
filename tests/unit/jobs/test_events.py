"""Event lines in job logs, and the per-worker precision/loader choices."""

from __future__ import annotations

import math

import pytest

from jobs import events
from jobs.context import resolve_loader_workers, resolve_pin_memory, resolve_precision


def test_emit_and_parse_through_a_ray_prefix(capsys):
    events.emit("report", metrics={"loss": 0.5, "bad": math.nan}, index=1)
    line = capsys.readouterr().out.strip()
    prefixed = f"\x1b[36m(TrainController pid=12)\x1b[0m {line}"
    ev = events.parse_line(prefixed)
    assert ev.pop("t") > 0
    assert ev == {"event": "report", "metrics": {"loss": 0.5, "bad": None}, "index": 1}
    assert events.parse_line("plain log line") is None
    assert events.parse_line("::orch::{not json") is None
    assert [e["metrics"] for e in events.parse(f"a\n{line}\nb\n")] == [ev["metrics"]]


@pytest.mark.parametrize("requested,device,cuda_bf16,cpu_bf16,expected", [
    ("auto", "cuda", True, False, "bf16"),
    ("auto", "cuda", False, False, "fp16"),
    ("auto", "cpu", False, True, "bf16"),
    ("auto", "cpu", False, False, "fp32"),
    ("fp32", "cuda", True, True, "fp32"),
    ("fp16", "cpu", False, True, "bf16"),
    ("bf16", "cpu", False, False, "bf16"),
])
def test_precision(requested, device, cuda_bf16, cpu_bf16, expected):
    assert resolve_precision(requested, device, cuda_bf16, cpu_bf16) == expected


def test_loader_choices():
    assert resolve_loader_workers("auto", "cpu", 8) == 0
    assert resolve_loader_workers("auto", "cuda", 8) == 4
    assert resolve_loader_workers(3, "cpu", 1) == 3
    assert resolve_pin_memory("auto", "cuda") is True
    assert resolve_pin_memory("auto", "cpu") is False
    assert resolve_pin_memory(True, "cpu") is False


def test_a_follower_looks_sooner_once_the_result_is_in_the_log(capsys):
    from orchestrator.service import following

    events.emit("report", metrics={"epoch": 1}, index=1)
    running = "workers ready\n" + capsys.readouterr().out
    assert not following.ending(running)
    events.emit("result", ok=True, metrics={})
    ended = running + capsys.readouterr().out + "orch runner: compute-bound\n"
    assert following.ending(ended)
    assert not following.ending("")


def test_a_follower_looks_sooner_once_a_run_jobs_command_has_exited(capsys):
    """A `run:` job has no runner and so no `result`: its wrapper's `end` (jobs/workspace.py)
    says the command exited, and the job's record ends a moment later."""
    from orchestrator.service import following

    events.emit("start", kind="run")
    events.emit("first_output")
    running = capsys.readouterr().out + "loss 0.1\n"
    assert not following.ending(running)
    events.emit("end", exit_code=0)
    assert following.ending(running + capsys.readouterr().out)


def _line(event: str, t: float, **fields) -> str:
    import json

    return events.MARKER + json.dumps({"event": event, "t": t, **fields})


def test_a_finished_jobs_phases_from_its_record_and_events():
    from orchestrator.service.run_metrics import PHASES, phases

    log = "\n".join([
        "Runtime env is setting up.",
        _line("start", 104.0),
        _line("worker", 112.5, rank=1), _line("worker_setup", 113.0),
        _line("progress", 116.0, epoch=1, epochs=2, step=1, steps=9),
        _line("report", 117.0, index=1), _line("progress", 117.2, epoch=2, epochs=2, step=1, steps=9),
        _line("report", 118.5, index=2), _line("result", 118.9, ok=True)])
    got = phases(log, submitted=100.0, recorded=100.5, launched=101.5, ended=119.5)
    assert list(got) == list(PHASES)
    assert got == {"submit_to_recorded": 0.5, "recorded_to_launched": 1.0,
                   "launched_to_driver": 2.5, "driver_to_workers": 9.0,
                   "workers_to_first_step": 3.0, "training": 2.5, "last_step_to_ended": 1.0}
    # A run: job (no events) and a submit from a server: what is known, nothing made up.
    assert phases("plain output", submitted=None, recorded=100.0, launched=100.8,
                  ended=130.0) == {"recorded_to_launched": 0.8}


def test_a_submit_counts_from_its_process_start_to_the_hundredth():
    """Issue 34: psutil's start time counts from the kernel's boot time in whole seconds,
    so `submit->recorded` read up to a second long; `began` reads the start to 10 ms."""
    import subprocess
    import sys
    import time

    code = ("import time; from orchestrator.service.processes import submitter; "
            "s = submitter(); print(s['began'], s['started'], time.time())")
    start = time.time()
    began, started, now = map(float, subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert start - 0.05 <= began <= now and 0 <= began - started < 1.02
    from orchestrator.records import JobInfo, JobRow
    from orchestrator.service import following

    rec = JobRow(id="orch-1", name="j", status="RUNNING", created_at=100.3, info=JobInfo(
        submitter={"pid": 1, "host": "h", "started": 99.4, "began": 100.0}, launched_at=100.8))
    assert following.phases(rec, "")["submit_to_recorded"] == 0.3
    older = rec.model_copy(update={"info": JobInfo(submitter={"pid": 1, "started": 99.4})})
    assert following.phases(older, "")["submit_to_recorded"] == 0.9  # recorded before `began`


def test_status_shows_the_phases_in_one_line():
    from orchestrator.cli.render import phase_summary

    text = phase_summary({"submit_to_recorded": 0.5, "recorded_to_launched": 1.0,
                          "launched_to_driver": 2.5, "training": 2.5, "last_step_to_ended": 1.0})
    assert text == ("submit→recorded 0.5s  →launched 1.0s  →driver 2.5s  training 2.5s  "
                    "last step→ended 1.0s  (fixed 5.0s of 7.5s)")
