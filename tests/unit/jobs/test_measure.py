"""A run's first minute measured (jobs/context.py: `measure`): what orch places a sweep's
later runs by before the first epoch's report."""

from __future__ import annotations

import types

import pytest
import torch

from jobs import context as C
from jobs import events
from jobs.context import WorkerContext


def test_rank_zero_measures_once_after_its_first_minute_of_steps(capsys):
    """`measure`: the throughput of the steps so far (all workers') and their data share,
    once a run, once MEASURE_AFTER_S of steps have passed; other ranks say nothing."""
    timer = types.SimpleNamespace(steps=10, samples=640, data_s=5.0, copy_s=0.0, compute_s=10.0)
    ctx = WorkerContext(job_id="t", rank=0, world_size=2, device=torch.device("cpu"),
                        precision="fp32", loader_workers=0, pin_memory=False, timer=timer)
    other = WorkerContext(job_id="t", rank=1, world_size=2, device=torch.device("cpu"),
                          precision="fp32", loader_workers=0, pin_memory=False, timer=timer)

    def measures():
        return [e for e in events.parse(capsys.readouterr().out) if e["event"] == "measure"]

    ctx.progress(1, 1, 10, 100)
    assert measures() == []  # 15 s of steps: too early
    timer.steps, timer.samples, timer.data_s, timer.compute_s = 60, 3840, 15.0, C.MEASURE_AFTER_S
    other.progress(1, 1, 60, 100)
    assert measures() == []
    ctx.progress(1, 1, 60, 100)
    ctx.progress(1, 1, 61, 100)
    (m,) = measures()
    busy = 15.0 + C.MEASURE_AFTER_S
    assert m["samples_per_sec"] == pytest.approx(3840 * 2 / busy)
    assert m["data_fraction"] == pytest.approx(15.0 / busy) and m["steps"] == 60


def test_the_simulators_first_report_is_the_runners_first_minute_and_a_serve_pass():
    from orchestrator.settings import Settings
    from orchestrator.simulate.engine import FIRST_REPORT_H

    assert FIRST_REPORT_H * 3600 == pytest.approx(C.MEASURE_AFTER_S + Settings().serve_period_s)
