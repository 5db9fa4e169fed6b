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
    from orchestrator.service.following import Following

    events.emit("report", metrics={"epoch": 1}, index=1)
    running = "workers ready\n" + capsys.readouterr().out
    assert not Following.ending(running)
    events.emit("result", ok=True, metrics={})
    ended = running + capsys.readouterr().out + "orch runner: compute-bound\n"
    assert Following.ending(ended)
    assert not Following.ending("")
