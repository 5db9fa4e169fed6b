"""The run verdict and the step timer, without a cluster."""

from __future__ import annotations

import time

import pytest

from jobs.profile import StepTimer
from jobs.verdict import diagnose


@pytest.mark.parametrize("metrics,single,kind,advice", [
    ({"data_fraction": 0.6, "copy_fraction": 0.0, "loader_workers": 0}, None, "input-bound",
     "raise data.loader_workers from 0 to 2"),
    ({"data_fraction": 0.5, "loader_workers": 4, "device": "cuda:0", "pin_memory": False}, None,
     "input-bound", "pin_memory: true"),
    ({"data_fraction": 0.4, "loader_workers": 2, "loader_auto": True}, None, "input-bound",
     "auto already chose 2"),
    ({"data_fraction": 0.05, "precision": "fp32", "device": "cuda:0"}, None, "compute-bound",
     "precision: auto times bf16 and fp16"),
    ({"data_fraction": 0.05, "precision": "bf16", "workers": 4, "samples_per_sec": 250}, 100.0,
     "communication-bound", "fewer workers"),
    ({"data_fraction": 0.05, "precision": "bf16", "workers": 4, "samples_per_sec": 380}, 100.0,
     "compute-bound", "larger batch"),
])
def test_diagnose(metrics, single, kind, advice):
    verdict = diagnose(metrics, single)
    assert verdict["kind"] == kind
    assert any(advice in a for a in verdict["advice"]), verdict


def test_no_breakdown_no_verdict():
    assert diagnose({"loss": 0.1}) is None


def test_step_timer_splits_wait_from_compute():
    def slow_loader():
        for i in range(4):
            time.sleep(0.02)
            yield i

    timer = StepTimer()
    for _ in timer.batches(slow_loader()):
        time.sleep(0.005)  # "compute"
        timer.step_done(8)
    s = timer.summary()
    assert timer.steps == 4 and timer.samples == 32
    assert s["time_data_s"] > s["time_compute_s"] > 0
    assert 0.6 < s["data_fraction"] < 1.0


# Seconds per step measured on this kind of machine (AMD EPYC, AVX2, no native bf16).
CPU_TRIALS = {"fp32": 0.0055, "bf16": 0.061}


def test_an_explicit_precision_much_slower_than_another_gets_one_line():
    m = {"data_fraction": 0.05, "precision": "bf16", "precision_trials": CPU_TRIALS}
    lines = [a for a in diagnose(m)["advice"] if a.startswith("precision")]
    assert lines == ["precision: fp32 (or auto): a step took 11.1x as long in bf16 as in fp32 "
                     "on this device, measured at the start of the run"]
    # The same line on an input-bound run: its steps would still be shorter.
    m["data_fraction"] = 0.5
    assert any(a.startswith("precision: fp32") for a in diagnose(m)["advice"])


def test_no_precision_line_when_the_run_used_the_fastest_or_close_to_it():
    for m in ({"data_fraction": 0.05, "precision": "fp32", "precision_trials": CPU_TRIALS},
              {"data_fraction": 0.05, "precision": "fp32",
               "precision_trials": {"fp32": 0.010, "bf16": 0.008}},  # 1.25x: not wide
              {"data_fraction": 0.05, "precision": "fp32"}):  # CPU, no figures: no guess
        assert not [a for a in diagnose(m)["advice"] if "precision" in a], m


def test_on_cuda_one_step_in_ten_is_synchronized_and_splits_the_time(monkeypatch):
    from jobs import profile

    syncs = []
    monkeypatch.setattr(profile.StepTimer, "_sync", lambda self: syncs.append(self.steps))
    # No GPU here: NVML and CUDA's memory counter are not what this test is about (asking
    # torch for the latter without CUDA took seconds).
    monkeypatch.setattr(profile, "gpu_utilization", lambda device: None)
    import torch

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 0)
    timer = profile.StepTimer()
    timer._cuda = True  # as on a GPU, without one: only the synchronizing is watched
    class Batch:
        def to(self, device, non_blocking=False):
            return self

    for _ in timer.batches(range(25)):
        timer.to_device(Batch())
        time.sleep(0.002)  # "compute"
        timer.step_done(4)
    assert syncs == [0, 0, 10, 10, 20, 20]  # after the copy and after the step, of 3 steps
    s = timer.summary()
    assert timer.steps == 25 and timer.samples == 100
    assert s["time_compute_s"] > s["time_copy_s"] >= 0
    total = s["time_data_s"] + s["time_copy_s"] + s["time_compute_s"]
    assert abs(total * 25 - (timer.data_s + timer.copy_s + timer.compute_s)) < 1e-9
