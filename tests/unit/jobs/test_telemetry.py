"""Device telemetry (jobs/telemetry.py): the idle policy's decision as a table, the bounded
series, the summary, the CPU reader on this machine and NVML's own error without a driver."""

from __future__ import annotations

import time

import pytest

from jobs import events
from jobs.idle_policy import run_idle
from jobs.telemetry import (
    CpuReader,
    IdlePolicy,
    NvmlReader,
    Sample,
    Sampler,
    Series,
    combine,
    idle_peak,
    reader_for,
    summarize,
)

POLICY = IdlePolicy(min_utilization=20, window_minutes=1, action="stop")


def flat(util: float, until_s: float, every_s: float = 5.0) -> list[Sample]:
    return [Sample(t, util, 1.0) for t in [i * every_s for i in range(int(until_s / every_s) + 1)]]


@pytest.mark.parametrize("devices, now_s, idle", [
    ([flat(90, 120)], 120, False),  # busy
    ([flat(3, 120)], 120, True),  # idle after the grace window
    ([flat(3, 55)], 55, False),  # idle, but within the first window after start
    ([flat(3, 120), flat(80, 120)], 120, False),  # one busy device of two
    ([flat(3, 120), flat(5, 120)], 120, True),  # both idle
    # a busy moment at 65 s keeps the run busy until the window has passed it
    ([flat(3, 60) + [Sample(65, 25, 1.0)] + [Sample(t, 3, 1.0) for t in (70, 100, 130)]], 130, True),
    ([flat(3, 60) + [Sample(65, 25, 1.0)] + [Sample(t, 3, 1.0) for t in (70, 100)]], 100, False),
    ([[Sample(t, 3, 1.0) for t in (90, 100, 120)]], 120, False),  # readings do not span the window
    ([], 120, False),
])
def test_the_policy_decides_idle_only_when_every_device_stayed_below_for_the_window(devices, now_s, idle):
    # Each worker's own judgement (idle_peak), then the driver's over all of them (run_idle).
    reason = run_idle(POLICY, {rank: idle_peak(POLICY, samples, now_s)
                               for rank, samples in enumerate(devices)}, len(devices))
    assert (reason is not None) == idle
    if idle:
        assert "below 20% busy for 1 min" in reason
        assert reason.startswith("the device" if len(devices) == 1 else "all 2 devices")


def test_the_series_is_bounded_and_keeps_the_whole_span():
    series = Series(every_s=30, limit=8)
    for i in range(3600):  # one hour, a sample a second, busy in its second half
        series.add(Sample(float(i), 0.0 if i < 1800 else 100.0, i / 3600, 200.0))
    pts = series.dump()
    assert 4 <= len(pts) <= 9
    assert pts[0]["t"] == 0 and pts[-1]["t"] + series.every_s > 3599  # coarser, but start to end
    assert pts[0]["util"] == 0 and pts[-1]["util"] == 100
    assert pts[-1]["mem_gb"] == pytest.approx(3599 / 3600, abs=1e-3)  # the bucket's most
    assert all(p["power_w"] == 200 for p in pts)


def test_the_summary_uses_the_energy_counter_where_there_is_one_else_mean_power():
    with_counter = [Sample(t, u, 2.0 + t / 100, 300.0, 1000.0 + 250.0 * t)
                    for t, u in ((0, 10), (10, 50), (20, 90), (30, 90), (3600, 90))]
    s = summarize(with_counter, "nvml", "NVIDIA H100", 80.0)
    assert s["energy_basis"] == "counter" and s["energy_wh"] == pytest.approx(250.0)
    assert s["mean_util"] == 66.0 and s["p10_util"] == pytest.approx(26.0)
    assert s["peak_mem_gb"] == pytest.approx(38.0) and s["mem_total_gb"] == 80
    no_counter = [Sample(t, 50, 1.0, 200.0) for t in (0, 1800, 3600)]
    s = summarize(no_counter, "nvml", "NVIDIA T4", None)
    assert s["energy_basis"] == "mean power x time" and s["energy_wh"] == pytest.approx(200.0)
    cpu = summarize([Sample(0, 50, 1.0), Sample(60, 70, 1.5)], "psutil", "cpu", None)
    assert "energy_wh" not in cpu and cpu["mean_util"] == 60


def test_the_cpu_reader_sees_this_process_busy_and_idle():
    reader = CpuReader(threads=1)
    began = time.monotonic()
    end = time.process_time() + 0.3  # 0.3 s of this process's CPU, however loaded the machine
    while time.process_time() < end:
        pass
    busy, rss, power, energy = reader.read()
    # What share of the wall clock this process had: all of it on a quiet machine, far less
    # on a loaded one (the suite once ran at load 40 and this process got 15%).
    had = 100 * 0.3 / (time.monotonic() - began)
    time.sleep(0.3)
    idle, _, _, _ = reader.read()
    assert busy > had / 2 and busy > idle + 5 and idle < 10, (busy, had, idle)
    assert rss > 0.01 and power is None and energy is None


def test_nvml_without_a_driver_raises_nvmls_own_error_and_the_reader_falls_back_to_cpu():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pytest.skip("this machine has an NVIDIA driver")
    with pytest.raises(pynvml.NVMLError):
        NvmlReader(0)

    class Cuda:
        type, index = "cuda", 0

    assert isinstance(reader_for(Cuda()), CpuReader)


def test_the_sampler_says_when_its_device_turns_idle_and_busy_again_and_summarizes_the_run():
    now = [0.0]

    class Idle:
        source, device, mem_total_gb = "psutil", "cpu", 8.0

        def read(self):
            return (2.0 if not 120 <= now[0] < 130 else 50.0), 0.5, None, None

    fired = []
    sampler = Sampler(Idle(), interval_s=5, policy=POLICY, on_idle=fired.append, clock=lambda: now[0])
    for t in range(0, 200, 5):
        now[0] = float(t)
        sampler.sample()
    out = sampler.stop()
    # idle at 60 s (the first window over), busy at 120 s, idle again a window later
    assert fired == [2.0, None, 2.0]
    assert sampler.idle == 2.0 and "idle" not in out
    assert len(sampler.samples) <= 60 / 5 + 5  # the window and two intervals, not the whole run
    assert out["summary"]["samples"] == 41 and out["summary"]["seconds"] == 195
    assert out["series"][0]["util"] == 2.0


def test_the_sampler_closes_a_live_point_each_point_every_s():
    now = [0.0]

    class Busy:
        source, device, mem_total_gb = "psutil", "cpu", 8.0

        def read(self):
            return 40.0 + now[0], 0.5, None, None

    points: list = []
    sampler = Sampler(Busy(), interval_s=1, on_point=points.append, clock=lambda: now[0],
                      point_every_s=2)
    for t in range(0, 7):
        now[0] = float(t)
        sampler.sample()
    # Buckets [0, 2), [2, 4), [4, 6) closed by the samples at 2, 4 and 6: each one's mean.
    assert [(p["t"], p["util"]) for p in points] == [(0.0, 40.5), (2.0, 42.5), (4.0, 44.5)]
    assert {p["source"] for p in points} == {"psutil"}
    assert Sampler(Busy()).series.every_s == 30.0  # the default grain


def test_a_runs_workers_combine_and_orch_keeps_them_from_the_log():
    from orchestrator.service.run_metrics import from_log

    def line(event, **fields):
        return events.event_line(event, None, **fields)

    w0 = {"source": "nvml", "device": "NVIDIA H100", "samples": 40, "seconds": 195.0, "mean_util": 60.0,
          "p10_util": 20.0, "peak_mem_gb": 30.0, "mem_total_gb": 80.0, "energy_wh": 10.0,
          "energy_basis": "counter"}
    w1 = dict(w0, mean_util=40.0, p10_util=10.0, peak_mem_gb=31.0, energy_wh=12.0)
    assert combine({"0": w0, "1": w1}) == {
        "source": "nvml", "device": "NVIDIA H100", "workers": 2, "mean_util": 50.0, "p10_util": 10.0,
        "peak_mem_gb": 31.0, "seconds": 195.0, "mem_total_gb": 80.0, "energy_wh": 22.0,
        "energy_basis": "counter"}
    assert "energy_wh" not in combine({"0": w0, "1": {k: v for k, v in w1.items() if k != "energy_wh"}})
    assert combine({}) == {} and combine({"0": {"samples": 0}}) == {}

    running = "\n".join([line("device", rank=0, since_s=0.0, util=55.0, mem_gb=30.0),
                         line("device", rank=1, since_s=0.0, util=35.0, mem_gb=31.0),
                         line("device", rank=0, since_s=30.0, util=65.0, mem_gb=30.0)])
    m = from_log(running)
    assert m["device_now"] == {"0": {"since_s": 30.0, "util": 65.0, "mem_gb": 30.0},
                               "1": {"since_s": 0.0, "util": 35.0, "mem_gb": 31.0}}
    ended = "\n".join([running,
                       line("report", index=1, metrics={"data_fraction": 0.4, "copy_fraction": 0.05,
                                                         "loader_workers": 4, "device": "cuda:0"}),
                       line("verdict", kind="input-bound", reasons=["40% of each step waits"], advice=[]),
                       line("telemetry", rank=0, summary=w0, series=[{"t": 0.0, "util": 60.0, "mem_gb": 30.0}]),
                       line("telemetry", rank=1, summary=w1, series=[]),
                       line("utilization", action="warn", reason="all 2 devices stayed below 20% busy",
                            min_utilization=20, window_minutes=1)])
    m = from_log(ended)
    assert "device_now" not in m and m["telemetry"]["summary"]["mean_util"] == 50.0
    assert m["telemetry"]["workers"]["0"]["series"] == [{"t": 0.0, "util": 60.0, "mem_gb": 30.0}]
    assert m["utilization"] == {"action": "warn", "reason": "all 2 devices stayed below 20% busy",
                                "min_utilization": 20, "window_minutes": 1}
    assert m["verdict"]["kind"] == "input-bound"
    assert m["verdict"]["reasons"][0] == "GPUs busy 50% of the run (p10 10%)"
    assert any("pin_memory" in a for a in m["verdict"]["advice"])


def test_orch_status_says_how_busy_the_devices_were_or_are():
    from orchestrator.cli import render
    from orchestrator.records.metrics import RunMetrics

    def device_summary(metrics: dict):
        return render.device_summary(RunMetrics.read(metrics))

    ended = {"telemetry": {"summary": {"source": "nvml", "device": "NVIDIA H100", "workers": 2,
                                       "mean_util": 58.2, "p10_util": 21.0, "peak_mem_gb": 31.0,
                                       "mem_total_gb": 80.0, "energy_wh": 22.0,
                                       "energy_basis": "counter"}}}
    assert device_summary(ended) == ("GPU busy 58% (p10 21%), peak 31.00 GiB of 80, 2 workers, "
                                     "22.0 Wh (counter) [NVIDIA H100]")
    cpu = {"telemetry": {"summary": {"source": "psutil", "device": "cpu", "workers": 1,
                                     "mean_util": 3.0, "p10_util": 1.0, "peak_mem_gb": 0.5}}}
    assert device_summary(cpu) == "CPU busy 3% (p10 1%), peak 0.50 GiB, 1 worker"
    running = {"device_now": {"1": {"since_s": 30.0, "util": 35.0, "mem_gb": 31.0},
                              "0": {"since_s": 30.0, "util": 65.0, "mem_gb": 30.0}}}
    assert device_summary(running) == "now: rank 0 65% busy, 30.00 GiB, rank 1 35% busy, 31.00 GiB"
    assert device_summary({}) is None
