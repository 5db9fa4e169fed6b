"""Where a training step's time goes: waiting for data, copying it to the device, computing.

A loop wraps its loader with `timer.batches(loader)`, moves each batch with
`timer.to_device(...)` and calls `timer.step_done(n)` after the optimizer step. On CUDA
the copy and the step are synchronized before the clock is read, so asynchronous work is
charged to the phase that queued it.
"""

from __future__ import annotations

import time
from typing import Any, Iterable, Iterator


class StepTimer:
    def __init__(self, device: Any = None):
        self.device = device
        self._cuda = getattr(device, "type", None) == "cuda"
        self.reset()

    def reset(self) -> None:
        self.steps = self.samples = 0
        self.data_s = self.copy_s = self.compute_s = 0.0
        self._mark = time.perf_counter()

    def _sync(self) -> None:
        if self._cuda:
            import torch

            torch.cuda.synchronize(self.device)

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
        self._sync()
        now = time.perf_counter()
        self.copy_s += now - start
        self._mark = now
        return out if len(out) > 1 else out[0]

    def step_done(self, samples: int) -> None:
        """After the optimizer step: everything since the batch arrived (or was copied)."""
        self._sync()
        now = time.perf_counter()
        self.compute_s += now - self._mark
        self._mark = now
        self.steps += 1
        self.samples += samples

    def summary(self) -> dict:
        """Per-step averages and the share of time spent waiting for data."""
        total = self.data_s + self.copy_s + self.compute_s
        n = max(self.steps, 1)
        return {"time_data_s": self.data_s / n, "time_copy_s": self.copy_s / n,
                "time_compute_s": self.compute_s / n,
                "data_fraction": self.data_s / total if total else 0.0,
                "copy_fraction": self.copy_s / total if total else 0.0}
