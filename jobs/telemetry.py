"""A device over a run: sampled every few seconds in a thread, kept as a bounded series and
a summary, and the idle policy's decision.

On an NVIDIA GPU the figures come from NVML (nvidia-ml-py, NVIDIA's own bindings):
utilization, memory used and total, power draw and the energy counter. Elsewhere they are
this worker process's CPU use and memory (psutil), so that the same code path runs and is
tested on a machine without a GPU. Reading one sample costs tens of microseconds on CPU
and well under a millisecond through NVML; at one sample every few seconds the thread
costs far less than 1% of a step.

Pure parts (`Series`, `Totals`, `idle_peak`) take samples and return figures; the
readers and `Sampler` are the thin I/O around them.
"""

from __future__ import annotations

import math
import os
import threading
import time
from array import array
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

GiB = float(2**30)
SERIES_EVERY_S = 30.0  # one point of a record's series per this many seconds, at first (default)
SERIES_LIMIT = 240  # points at most: past it, neighbours merge and the interval doubles


@dataclass(frozen=True, slots=True)
class Sample:
    """One reading of a device, `t` seconds after its sampler started."""

    t: float
    util: float  # percent busy: NVML's GPU utilization, or the process's CPU share
    mem_gb: float  # memory used: the GPU's, or the process's resident set
    power_w: Optional[float] = None  # GPU only
    energy_j: Optional[float] = None  # NVML's cumulative counter, where the GPU has one


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """`utilization_policy` of a job file, named as dstack names it."""

    min_utilization: float  # percent
    window_minutes: float
    action: str = "warn"  # warn | stop


def idle_peak(policy: IdlePolicy, samples: Sequence[Sample], now_s: float) -> Optional[float]:
    """One device's highest utilization over the policy's last window, when it stayed below
    `min_utilization` for the whole window; else None.

    Never within the first window after start (loading data, compiling), and never without
    readings that cover the window's start: a device with no reading is not known to be
    idle."""
    window_s = policy.window_minutes * 60.0
    if now_s < window_s or not samples:
        return None
    since = now_s - window_s
    inside = [s.util for s in samples if s.t >= since]
    if not inside or min(s.t for s in samples) > since + 1e-9:
        return None  # the readings do not reach back over the window
    peak = max(inside)
    return peak if peak < policy.min_utilization else None


def idle_text(policy: IdlePolicy, devices: int, peak: float) -> str:
    """What an idle run is told: how many devices, below what, for how long."""
    which = "the device" if devices == 1 else f"all {devices} devices"
    return (f"{which} stayed below {policy.min_utilization:g}% busy for "
            f"{policy.window_minutes:g} min (highest {peak:.0f}%)")


class Series:
    """A bounded series: one point per `every_s` seconds (the mean utilization and power of
    the samples in it, the most memory), at most `limit` points; when full, neighbours merge
    and the interval doubles, so a long run keeps its whole span at a coarser grain."""

    def __init__(self, every_s: float = SERIES_EVERY_S, limit: int = SERIES_LIMIT):
        if limit < 2:
            raise ValueError("a series keeps at least two points")
        self.every_s, self.limit = float(every_s), limit
        self.points: list[dict] = []  # t (the bucket's start), util, mem_gb, power_w, n
        self._open: Optional[dict] = None

    def add(self, s: Sample) -> Optional[dict]:
        """Adds a sample; returns the point it closed (rounded as `dump` rounds), if any."""
        start = math.floor(s.t / self.every_s) * self.every_s
        closed = None
        if self._open is None or self._open["t"] != start:
            if self._open is not None:
                closed = _rounded(self._open)
                self._close()
            self._open = {"t": start, "util": 0.0, "mem_gb": 0.0, "power_w": None, "n": 0}
        p = self._open
        p["util"] = (p["util"] * p["n"] + s.util) / (p["n"] + 1)
        if s.power_w is not None:
            pw = p["power_w"] if p["power_w"] is not None else s.power_w
            p["power_w"] = (pw * p["n"] + s.power_w) / (p["n"] + 1)
        p["mem_gb"] = max(p["mem_gb"], s.mem_gb)
        p["n"] += 1
        return closed

    def _close(self) -> None:
        assert self._open is not None
        self.points.append(self._open)
        self._open = None
        if len(self.points) > self.limit:
            self.every_s *= 2
            merged: list[dict] = []
            for p in self.points:
                start = math.floor(p["t"] / self.every_s) * self.every_s
                if merged and merged[-1]["t"] == start:
                    merged[-1] = _merge(merged[-1], p)
                else:
                    merged.append(dict(p, t=start))
            self.points = merged

    def dump(self) -> list[dict]:
        """The points so far, the open one included, rounded for a record."""
        return [_rounded(p) for p in self.points + ([self._open] if self._open else [])]


def _rounded(p: dict) -> dict:
    return {"t": round(p["t"], 1), "util": round(p["util"], 1), "mem_gb": round(p["mem_gb"], 3),
            **({"power_w": round(p["power_w"], 1)} if p["power_w"] is not None else {})}


def _merge(a: dict, b: dict) -> dict:
    n = a["n"] + b["n"]
    power = None
    if a["power_w"] is not None or b["power_w"] is not None:
        pa = a["power_w"] if a["power_w"] is not None else b["power_w"]
        pb = b["power_w"] if b["power_w"] is not None else a["power_w"]
        power = (pa * a["n"] + pb * b["n"]) / n
    return {"t": a["t"], "util": (a["util"] * a["n"] + b["util"] * b["n"]) / n,
            "mem_gb": max(a["mem_gb"], b["mem_gb"]), "power_w": power, "n": n}


def _percentile(values: Sequence[float], q: float) -> float:
    xs = sorted(values)
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Totals:
    """What a run's summary needs, kept as it goes: every utilization reading (4 bytes
    each, for the percentiles), the peak memory, the power readings' sum, and the first and
    last sample (their energy counters, their times)."""

    def __init__(self) -> None:
        self.utils = array("f")
        self.peak_mem_gb = 0.0
        self.power_sum, self.power_n = 0.0, 0
        self.first: Optional[Sample] = None
        self.last: Optional[Sample] = None

    def add(self, s: Sample) -> None:
        self.utils.append(s.util)
        self.peak_mem_gb = max(self.peak_mem_gb, s.mem_gb)
        if s.power_w is not None:
            self.power_sum += s.power_w
            self.power_n += 1
        self.first = self.first or s
        self.last = s

    def summary(self, source: str, device: str, mem_total_gb: Optional[float]) -> dict:
        """The run's device in a few figures: mean and p10 utilization, peak memory, and
        energy in Wh (NVML's counter where the GPU has one, else mean power x time)."""
        out: dict[str, Any] = {"source": source, "device": device, "samples": len(self.utils)}
        first, last = self.first, self.last
        if first is None or last is None:
            return out
        seconds = last.t - first.t
        out.update(seconds=round(seconds, 1), mean_util=round(sum(self.utils) / len(self.utils), 1),
                   p10_util=round(_percentile(self.utils, 0.10), 1),
                   peak_mem_gb=round(self.peak_mem_gb, 3))
        if mem_total_gb:
            out["mem_total_gb"] = round(mem_total_gb, 3)
        if first.energy_j is not None and last.energy_j is not None and last.energy_j >= first.energy_j:
            out.update(energy_wh=round((last.energy_j - first.energy_j) / 3600.0, 4), energy_basis="counter")
        elif self.power_n and seconds > 0:
            out.update(energy_wh=round(self.power_sum / self.power_n * seconds / 3600.0, 4),
                       energy_basis="mean power x time")
        if self.power_n:
            out["mean_power_w"] = round(self.power_sum / self.power_n, 1)
        return out


def summarize(samples: Sequence[Sample], source: str, device: str,
              mem_total_gb: Optional[float] = None) -> dict:
    """`Totals.summary` of these samples."""
    totals = Totals()
    for s in samples:
        totals.add(s)
    return totals.summary(source, device, mem_total_gb)


def combine(workers: dict) -> dict:
    """One summary of a run's workers (rank -> that worker's summary): the mean of their
    mean utilization, the lowest p10, the most memory, and the energy of all of them (when
    every worker measured one)."""
    sums = [s for s in workers.values() if isinstance(s, dict) and s.get("samples")
            and all(_finite(s.get(k)) for k in ("mean_util", "p10_util", "peak_mem_gb"))]
    if not sums:
        return {}
    out: dict[str, Any] = {"source": sums[0].get("source"), "device": sums[0].get("device"),
                           "workers": len(sums),
                           "mean_util": round(sum(s["mean_util"] for s in sums) / len(sums), 1),
                           "p10_util": min(s["p10_util"] for s in sums),
                           "peak_mem_gb": max(s["peak_mem_gb"] for s in sums),
                           "seconds": max(float(s["seconds"]) if _finite(s.get("seconds"))
                                          else 0.0 for s in sums)}
    if sums[0].get("mem_total_gb"):
        out["mem_total_gb"] = sums[0]["mem_total_gb"]
    if all(_finite(s.get("energy_wh")) for s in sums):
        out["energy_wh"] = round(sum(s["energy_wh"] for s in sums), 4)
        bases = {s.get("energy_basis") for s in sums}
        out["energy_basis"] = bases.pop() if len(bases) == 1 else "counter and mean power x time"
    return out


def _finite(v: Any) -> bool:
    """A number a summary can be combined by (a summary is read from a job's log)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class CpuReader:
    """This process's CPU use (percent of the threads it computes with) and resident memory."""

    source = "psutil"

    def __init__(self, threads: Optional[int] = None):
        import psutil

        self._proc = psutil.Process()
        self._proc.cpu_percent(None)  # starts the interval the first read measures
        self.threads = max(1, threads or _compute_threads())
        self.device = "cpu"
        self.mem_total_gb: Optional[float] = psutil.virtual_memory().total / GiB

    def read(self) -> tuple[float, float, Optional[float], Optional[float]]:
        util = min(100.0, self._proc.cpu_percent(None) / self.threads)
        return util, self._proc.memory_info().rss / GiB, None, None


def _compute_threads() -> int:
    """The threads a CPU worker computes with: torch's, where torch is loaded."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            return int(torch.get_num_threads())
        except Exception:
            pass
    return 1


class NvmlReader:
    """One NVIDIA GPU through NVML. Raises NVML's own error where there is no driver."""

    source = "nvml"

    def __init__(self, index: int = 0):
        import pynvml

        self._nv = pynvml
        pynvml.nvmlInit()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        if index < len(visible) and visible[index].strip().isdigit():
            index = int(visible[index])  # NVML counts physical GPUs; Ray renumbers them
        self._h = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(self._h)
        self.device = name.decode() if isinstance(name, bytes) else str(name)
        self.mem_total_gb = pynvml.nvmlDeviceGetMemoryInfo(self._h).total / GiB
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self._h)
            self._energy = True
        except Exception:  # older GPUs (before Volta) have no counter
            self._energy = False

    def read(self) -> tuple[float, float, Optional[float], Optional[float]]:
        nv, h = self._nv, self._h
        util = float(nv.nvmlDeviceGetUtilizationRates(h).gpu)
        mem = nv.nvmlDeviceGetMemoryInfo(h).used / GiB
        try:
            power: Optional[float] = nv.nvmlDeviceGetPowerUsage(h) / 1000.0  # mW
        except Exception:
            power = None
        energy = nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1000.0 if self._energy else None  # mJ
        return util, mem, power, energy


def reader_for(device: Any) -> Any:
    """NVML for a CUDA device where NVML answers, else this process's CPU figures."""
    if getattr(device, "type", None) == "cuda":
        try:
            return NvmlReader(device.index if device.index is not None else 0)
        except Exception:  # no driver, no library: the CPU figures still say something
            pass
    return CpuReader()


class Sampler:
    """Reads a device every `interval_s` seconds in a daemon thread; keeps every sample
    for the policy's window and the summary, and a bounded `Series` for the record, a point
    per `point_every_s` at first. `on_point(point)` is called with each point of the series
    as it closes (a running job's latest figures), with what measured it (`source`: "nvml"
    for a GPU, "psutil" for the worker's CPU, so a reader never takes one for the other);
    with a policy, `on_idle(peak)` each time this device turns idle for the policy
    (`idle_peak`: its highest utilization over the window) and `on_idle(None)` each time it
    turns busy again. Whether the run is idle is the driver's to judge, over all its
    workers (jobs/idle_policy.py)."""

    def __init__(self, reader: Any, interval_s: float = 5.0, policy: Optional[IdlePolicy] = None,
                 on_idle: Optional[Callable[[Optional[float]], None]] = None,
                 on_point: Optional[Callable[[dict], None]] = None,
                 clock: Callable[[], float] = time.monotonic,
                 point_every_s: float = SERIES_EVERY_S):
        self.reader, self.interval_s, self.policy, self.on_idle = reader, interval_s, policy, on_idle
        self.on_point = on_point
        self.series = Series(point_every_s)
        self.samples: list[Sample] = []
        self.idle: Optional[float] = None  # the window's peak while this device is idle
        self._clock = clock
        self._t0 = clock()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self.totals = Totals()
        # what the policy's window needs; the summary and the series keep the rest
        self._keep_s = (policy.window_minutes * 60.0 if policy else 0.0) + 2 * interval_s

    def start(self) -> Sampler:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="orch-telemetry", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> Optional[Sample]:
        try:
            util, mem, power, energy = self.reader.read()
        except Exception:  # a reading that fails is skipped, never the run
            return None
        s = Sample(self._clock() - self._t0, util, mem, power, energy)
        with self._lock:
            self.samples.append(s)
            closed = self.series.add(s)
            self.totals.add(s)
            if self.samples[0].t < s.t - self._keep_s:
                self.samples = [x for x in self.samples if x.t >= s.t - self._keep_s]
        if closed is not None and self.on_point is not None:
            self._quietly(self.on_point, {**closed, "source": self.reader.source})
        if self.policy is not None:
            peak = idle_peak(self.policy, self.samples, s.t)
            turned = (peak is None) != (self.idle is None)
            self.idle = peak
            if turned and self.on_idle is not None:
                self._quietly(self.on_idle, peak)
        return s

    @staticmethod
    def _quietly(fn: Callable[[Any], Any], arg: Any) -> None:
        try:
            fn(arg)
        except Exception:  # a callback that fails (a closed stream) never stops the sampling
            pass

    def snapshot(self) -> dict:
        """The summary and series so far."""
        with self._lock:
            summary = self.totals.summary(self.reader.source, self.reader.device,
                                          getattr(self.reader, "mem_total_gb", None))
            return {"summary": summary, "series": self.series.dump()}

    def stop(self) -> dict:
        """Stops the thread (after one last reading) and returns the summary and series."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 1.0)
        self.sample()
        return self.snapshot()
