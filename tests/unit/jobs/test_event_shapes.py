"""Event lines as a hostile job prints them (issue 47): read by code that never raises, each
malformed one left out with a note on the job, and every line orch's runner prints still read."""

from __future__ import annotations

import json

from jobs import events
from jobs.telemetry import Sample, Series, summarize
from orchestrator.records.metrics import RunMetrics
from orchestrator.service.dashboard import series, worker_nodes
from orchestrator.service.run_metrics import from_log

M = events.MARKER
HOSTILE = [
    M + '{"event":"telemetry","rank":0,"summary":{"samples":1}}',
    M + '{"event":"telemetry","rank":0,"summary":{"samples":2,"mean_util":"x","p10_util":1,'
        '"peak_mem_gb":1}}',
    M + '{"event":"telemetry","rank":0,"summary":{"samples":2,"mean_util":1e999,"p10_util":1,'
        '"peak_mem_gb":1,"energy_wh":1}}',
    M + '{"event":"telemetry","rank":0,"summary":{"samples":2,"mean_util":5,"p10_util":1,'
        '"peak_mem_gb":1,"energy_wh":NaN}}',
    M + '{"event":"telemetry","rank":-1,"summary":{}}',
    M + '{"event":"telemetry","rank":0,"summary":"all"}',
    M + '{"event":"telemetry","rank":0}',
    M + '{"event":"worker","rank":"zero","node_id":"n"}',
    M + '{"event":"progress","epoch":1}',
    M + '{"event":"progress","epoch":"1","epochs":2,"step":0,"steps":3}',
    M + '{"event":"report","index":1,"metrics":[1,2]}',
    M + '{"event":"report","index":1,"metrics":{"loss":' + "9" * 5000 + '}}',
    M + '{"event":"result","ok":"yes"}',
    M + '{"event":"device","rank":0,"util":-5}',
    M + "[" * 200_000,
    M + '{"event":"report","metrics":{"a":' + '{"b":' * 50 + '1' + '}' * 51 + '}',
    M + json.dumps({"event": "report", "metrics": {str(i): i for i in range(20_000)}}),
    M + json.dumps({"event": "report", "metrics": {"x": "y" * 300_000}}),
    M + '{"event":"report","metrics":{"x":1}',  # cut short
    M + json.dumps({"event": "report", "metrics": {"x": "y" * (2 << 20)}}),  # over a line's bound
    M + '"result"',
    M + '{"event":"shell","cmd":"rm -rf /"}',
    M + '{"event":"measure","samples_per_sec":100}',  # no data share
    M + '{"event":"measure","samples_per_sec":-1,"data_fraction":0.2}',
    M + '{"event":"measure","samples_per_sec":100,"data_fraction":3}',
]


def _runner_lines() -> list[str]:
    """What orch's runner and workers print, made as they make it."""
    samples = [Sample(t, 40.0 + t, 1.5, 250.0, 1000.0 * t) for t in range(0, 60, 5)]
    s = Series(every_s=10.0)
    for x in samples:
        s.add(x)
    summary = summarize(samples, "nvml", "NVIDIA H100", 80.0)
    return [
        events.event_line("start", None, num_workers=2, use_gpu=True, target="local",
                          storage_path="/tmp/x", run_name="r"),
        events.event_line("worker", None, rank=0, node_id="abc"),
        events.event_line("worker_setup", None, device="cuda:0", gpu_name="NVIDIA H100",
                          precision="bf16", precision_requested="auto", loader_workers=4,
                          pin_memory=True, world_size=2),
        events.event_line("precision", None, chosen="bf16", requested="auto", reason="fast"),
        events.event_line("loader_tuned", None, chosen=4, seconds_per_batch={"2": 0.1}),
        events.event_line("progress", None, epoch=1, epochs=2, step=3, steps=10),
        events.event_line("report", None, index=1, metrics={"loss": 0.5, "epoch": 1},
                          checkpoint="/tmp/c"),
        events.event_line("device", None, rank=0, since_s=10.0, util=50.0, mem_gb=1.0,
                          power_w=200.0, source="nvml"),
        events.event_line("telemetry", None, rank=0, summary=summary, series=s.dump()),
        events.event_line("utilization", None, action="warn", reason="idle",
                          min_utilization=10, window_minutes=5),
        events.event_line("stopped", None, reason="budget", detail="spent", epoch=1),
        events.event_line("verdict", "k" * 64, kind="ok", reasons=["fine"], advice=[]),
        events.event_line("worker_error", None, rank=1, error="ValueError: x"),
        events.event_line("result", "k" * 64, ok=True, metrics={"loss": 0.4}, wall_s=12.5,
                          checkpoint="/tmp/c"),
    ]


def test_every_hostile_line_is_left_out_with_a_note_and_nothing_raises():
    text = "\n".join(["hello", *HOSTILE, "bye"])
    found, dropped = events.read(text)
    assert found == [] and len(dropped) == len(HOSTILE)
    assert all(d.startswith("line ") for d in dropped)
    assert not any("rm -rf" in d or "yyyy" in d for d in dropped)  # never quotes the line
    metrics = from_log(text)
    assert metrics == {"dropped_events": {"count": len(HOSTILE), "first": dropped[:5]}}
    assert series(text) == [] and worker_nodes(text) == []


def test_a_reports_metrics_never_stand_in_for_what_orch_derives():
    forged = events.event_line("report", None, index=1, metrics={
        "telemetry": "all", "dropped_events": 0, "run_settings": 7, "wall_s": 1e12, "acc": 0.9})
    metrics = from_log(forged)
    assert metrics == {"acc": 0.9, "reports": 1}


def test_every_line_the_runner_prints_is_read():
    lines = _runner_lines()
    found, dropped = events.read("\n".join(lines))
    assert dropped == [] and [e["event"] for e in found] == [
        json.loads(x[len(M):])["event"] for x in lines]
    metrics = from_log("\n".join(lines), key="k" * 64)
    assert metrics["telemetry"]["summary"]["energy_wh"] > 0 and "dropped_events" not in metrics


def test_a_first_minutes_measure_stands_until_a_report_says_more():
    """A run's `measure` (jobs/context.py, after its first minute of steps) gives its
    throughput and data share while no report has: the store has them for placing the
    job's later runs; a report's figures then win, whatever order the log is read in."""
    measure = events.event_line("measure", None, samples_per_sec=250.0, data_fraction=0.3, steps=40)
    assert from_log(measure) == {"samples_per_sec": 250.0, "data_fraction": 0.3}
    report = events.event_line("report", None, index=1, metrics={"samples_per_sec": 240.0, "epoch": 1})
    both = from_log("\n".join([measure, report]))
    assert (both["samples_per_sec"], both["data_fraction"]) == (240.0, 0.3)
    again = from_log("\n".join([measure, report]), previous=RunMetrics.read(both))
    assert again["samples_per_sec"] == 240.0  # read again with what was kept: the report's
    forged = events.event_line("measure", None, samples_per_sec=9e9, data_fraction=1.0)
    late = from_log("\n".join([measure, report, forged]))  # the job's own line, after a report
    assert (late["samples_per_sec"], late["data_fraction"]) == (240.0, 0.3)
