"""A run's metrics as a typed record: read leniently from any stored row, shown as stored."""

from __future__ import annotations

import json

from orchestrator.records import JobRecord, JobRow
from orchestrator.records.metrics import RunMetrics

STORED = {"epoch": 3, "epochs": 3, "loss": 0.1234, "samples_per_sec": 1234.5, "workers": 2,
          "reports": 3, "checkpoint": "/ckpt/c3", "wall_s": 42.5,
          "verdict": {"kind": "input-bound", "reasons": ["41% waits"], "advice": ["cache data"],
                      "scaling_efficiency": 0.88},
          "telemetry": {"workers": {"0": {"summary": {"mean_util": 50}}},
                        "summary": {"source": "nvml", "mean_util": 51.2, "workers": 2,
                                    "energy_wh": 12.5, "new_figure": [1]}},
          "device_now": {"0": {"util": 12.0, "mem_gb": 1.5, "since_s": 30.0}},
          "run_settings": {"precision": "bf16", "gpu_name": "H100", "loader_workers": 2},
          "phases": {"training": 30.0, "submit_to_recorded": 0.4},
          "scaling": {"workers": 2, "one_worker_samples_per_sec": 700.0, "speedup": 1.76,
                      "efficiency": 0.88},
          "failure": {"lines": ["ValueError"], "hint": "fix it"},
          "dropped_events": {"count": 1, "first": ["line 3"]}, "zz_custom": None, "a": "x"}


def test_a_stored_row_reads_typed_and_shows_byte_for_byte_as_stored():
    m = RunMetrics.read(json.loads(json.dumps(STORED)))
    assert json.dumps(m.to_json()) == json.dumps(STORED)  # key order and int/float kept
    assert m.verdict is not None and m.verdict.kind == "input-bound"
    summary = m.summary()
    assert summary is not None and summary.mean_util == 51.2 and summary.energy_wh == 12.5
    assert m.scaling is not None and m.scaling.speedup == 1.76
    assert m.run_settings is not None and m.run_settings.gpu_name == "H100"
    assert m.failure is not None and m.failure.lines == ["ValueError"]
    assert m.number("loss") == 0.1234 and m.number("a") is None and m.wall_s == 42.5
    assert set(m.reported()) == {"epoch", "epochs", "loss", "samples_per_sec", "workers",
                                 "zz_custom", "a"}
    row = JobRow(id="j", name="n", status="SUCCEEDED", metrics=STORED)
    shown = JobRecord.from_row(row).model_dump_json()
    assert json.dumps(json.loads(shown)["metrics"]) == json.dumps(STORED)
    assert JobRecord.model_validate_json(shown).metrics.to_json() == STORED  # the client's read


def test_an_old_or_forged_row_reads_without_a_crash_and_is_shown_as_stored():
    old = {"verdict": "old-string", "telemetry": [1], "scaling": {"workers": 2}, "wall_s": "x",
           "device_now": {"0": "busy"}, "phases": {"training": True},
           "run_settings": {"gpu_name": 7, "precision": "fp32"}, "loss": "nan?", "workers": True,
           "dropped_events": {"count": "many"}, "failure": {"lines": "x", "hint": "h"}}
    m = RunMetrics.read(old)
    assert m.verdict is None and m.telemetry is None and m.scaling is None and m.wall_s is None
    assert m.device_now is None and m.phases is None and m.dropped_events is None
    assert m.run_settings is not None and m.run_settings.precision == "fp32"
    assert m.run_settings.gpu_name is None  # the key that did not fit, alone
    assert m.failure is not None and m.failure.lines == [] and m.failure.hint == "h"
    assert m.number("loss") is None and m.number("workers") is None  # a bool is no figure
    assert m.to_json() == old  # what does not fit is read as unset, and shown as it was
    for raw in (None, [], "x", 3):
        assert RunMetrics.read(raw).to_json() == {} and not RunMetrics.read(raw)
    row = JobRow(id="j", name="n", status="SUCCEEDED", metrics=old)  # a store row's read
    assert row.metrics.verdict is None


def test_a_derived_record_keeps_its_keys_in_the_order_stored():
    m = RunMetrics.read({"run_settings": {"loader_workers": 2, "precision": "bf16",
                                          "gpu_name": "L4"}})
    assert m.run_settings is not None
    assert list(m.run_settings.to_dict()) == ["loader_workers", "precision", "gpu_name"]
