"""Where a training step's time goes: waiting for data, copying it to the device, computing.

A loop wraps its loader with `timer.batches(loader)`, moves each batch with
`timer.to_device(...)` and calls `timer.step_done(n)` after the optimizer step. On CUDA
one step in SYNC_EVERY is synchronized after its copy and after its compute, so that
asynchronous work is charged to the phase that queued it; the other steps run unsynchronized,
the CPU queuing the next step while the GPU works, as in a loop without the timer. The
wall clock of all steps is measured either way; the sampled steps split it between copy
and compute.
"""

from __future__ import annotations

import os
import time
from typing import Any, Iterable, Iterator

SYNC_EVERY = 10


class StepTimer:
    def __init__(self, device: Any = None):
        self.device = device
        self._cuda = getattr(device, "type", None) == "cuda"
        self.reset()

    def reset(self) -> None:
        self.steps = self.samples = 0
        self.data_s = self.copy_s = self.compute_s = 0.0
        self.sampled_copy_s = self.sampled_compute_s = 0.0  # the synchronized steps' (CUDA)
        self._mark = time.perf_counter()
        self._gpu_util: list[float] = []
        try:
            import psutil

            self._proc = psutil.Process()
            self._proc.cpu_percent(None)  # starts the interval the summary reads
        except Exception:
            self._proc = None

    def _sync(self) -> None:
        if self._cuda:
            import torch

            torch.cuda.synchronize(self.device)

    @property
    def _sampling(self) -> bool:
        """Whether this step is one of those synchronized (always on CPU: a no-op there)."""
        return not self._cuda or self.steps % SYNC_EVERY == 0

    def batches(self, loader: Iterable) -> Iterator:
        """The loader's batches, charging the time spent waiting for each to `data`."""
        it = iter(loader)
        while True:
            start = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            now = time.perf_counter()
            self.data_s += now - start
            self._mark = now
            yield batch

    def to_device(self, *tensors: Any, non_blocking: bool = True):
        """Move tensors to the device, charging the time to `copy`."""
        start = time.perf_counter()
        out = tuple(t.to(self.device, non_blocking=non_blocking) for t in tensors)
        if self._sampling:
            self._sync()
        now = time.perf_counter()
        self.copy_s += now - start
        if self._sampling:
            self.sampled_copy_s += now - start
        self._mark = now
        return out if len(out) > 1 else out[0]

    def step_done(self, samples: int) -> None:
        """After the optimizer step: everything since the batch arrived (or was copied)."""
        sampling = self._sampling
        if sampling:
            self._sync()
        now = time.perf_counter()
        self.compute_s += now - self._mark
        if sampling:
            self.sampled_compute_s += now - self._mark
        self._mark = now
        self.steps += 1
        self.samples += samples
        if self._cuda and self.steps % 10 == 1:
            util = gpu_utilization(self.device)
            if util is not None:
                self._gpu_util.append(util)

    def summary(self) -> dict:
        """Per-step averages and the share of time spent waiting for data."""
        total = self.data_s + self.copy_s + self.compute_s
        n = max(self.steps, 1)
        copy_s, compute_s = self.copy_s, self.compute_s
        sampled = self.sampled_copy_s + self.sampled_compute_s
        if self._cuda and sampled > 0:  # split the device's time as the synchronized steps did
            busy = copy_s + compute_s
            copy_s = busy * self.sampled_copy_s / sampled
            compute_s = busy - copy_s
        out = {"time_data_s": self.data_s / n, "time_copy_s": copy_s / n,
               "time_compute_s": compute_s / n,
               "data_fraction": self.data_s / total if total else 0.0,
               "copy_fraction": copy_s / total if total else 0.0}
        if self._proc is not None:  # this worker process: the CPU figures
            out["cpu_percent"] = self._proc.cpu_percent(None)
            out["rss_gb"] = self._proc.memory_info().rss / 2**30
        if self._cuda:
            import torch

            out["gpu_mem_gb"] = torch.cuda.max_memory_allocated(self.device) / 2**30
            if self._gpu_util:
                out["gpu_util_percent"] = sum(self._gpu_util) / len(self._gpu_util)
        return out


def gpu_utilization(device: Any) -> float | None:
    """The GPU's busy percentage from NVML (nvidia-ml-py), or None where NVML is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
        index = device.index if getattr(device, "index", None) is not None else 0
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        if index < len(visible) and visible[index].strip().isdigit():
            index = int(visible[index])  # NVML counts physical GPUs; Ray renumbers them
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except Exception:  # no driver, no library, or a GPU NVML cannot see: just no figure
        return None
