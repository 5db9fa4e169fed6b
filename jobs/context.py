"""Per-worker helpers for a training loop: device, mixed precision, loader settings, progress.

A training loop (built-in or the user's) calls `current()` to learn what orch chose for
this run. The choices are made on the worker because only there is the device known.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from . import events
from .request import Budget, WorkerOptions

_CURRENT: Optional[WorkerContext] = None
# Seconds of a run's training steps after which its rank 0 reports what they measured
# (`measure`): enough steps to be a figure, early enough to place a sweep's later runs.
MEASURE_AFTER_S = 60.0


def cpu_supports_bf16() -> bool:
    """True when this CPU has native bf16 instructions (AVX512-BF16 or AMX)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(requested: str, device_type: str, cuda_bf16: bool, cpu_bf16: bool) -> str:
    """`auto` picks bf16 where the hardware has it, fp16 (with a scaler) on older GPUs."""
    if requested != "auto":
        if requested == "fp16" and device_type == "cpu":
            return "bf16"  # fp16 autocast on CPU is slow and unscaled; bf16 is the CPU's half type
        return requested
    if device_type == "cuda":
        return "bf16" if cuda_bf16 else "fp16"
    return "bf16" if cpu_bf16 else "fp32"


def resolve_loader_workers(requested: Any, device_type: str, cpus_per_worker: int) -> int:
    if requested != "auto":
        return int(requested)
    if device_type == "cpu":
        # Loader processes would compete with the training processes for the same cores.
        return 0
    return max(1, min(4, cpus_per_worker - 1))


def resolve_pin_memory(requested: Any, device_type: str) -> bool:
    if requested == "auto":
        return device_type == "cuda"
    return bool(requested) and device_type == "cuda"  # pinning without CUDA only warns


@dataclass
class WorkerContext:
    job_id: str
    rank: int
    world_size: int
    device: Any  # torch.device
    precision: str
    loader_workers: int
    pin_memory: bool
    requested_loader_workers: Any = "auto"
    requested_precision: str = "auto"
    precision_trials: Optional[dict] = None  # seconds per step in each precision timed
    loader_tuning: Optional[dict] = None  # seconds per batch for each worker count tried
    timer: Any = field(default=None, repr=False)
    budget: Optional[Budget] = None  # see over_budget
    _last_progress: float = field(default=0.0, repr=False)
    _measured: bool = field(default=False, repr=False)

    def data_loader(self, dataset, batch_size: int, shuffle: bool = True, warmup_batches: int = 6):
        """A DataLoader with this run's loader settings and, with several workers, this
        worker's shard (a DistributedSampler: call `loader.sampler.set_epoch(epoch)` each
        epoch); with `loader_workers: auto` it first times a few batches with 0, 2 and 4
        loader processes and keeps the fastest. Hand it to Ray Train as
        `prepare_data_loader(loader, add_dist_sampler=False)`: Ray's own sampler would
        rebuild the loader without `persistent_workers`, starting its loader processes
        again every epoch."""
        import torch
        from torch.utils.data.distributed import DistributedSampler

        sampler: Optional[DistributedSampler] = None
        if self.world_size > 1:
            sampler = DistributedSampler(dataset, num_replicas=self.world_size, rank=self.rank,
                                         shuffle=shuffle)

        def make(workers: int):
            return torch.utils.data.DataLoader(dataset, batch_size=batch_size,
                                               shuffle=shuffle and sampler is None,
                                               sampler=sampler, **self.loader_kwargs(workers))

        if self.requested_loader_workers == "auto":
            limit = max(2, (os.cpu_count() or 2))
            timings = {}
            for workers in [w for w in (0, 2, 4) if w <= limit]:
                it = iter(make(workers))
                # Each loader process's start-up is paid once, not per batch: a batch from
                # each before the clock starts (on a busy machine the second may start late).
                for _ in range(max(1, workers)):
                    next(it, None)
                start = time.perf_counter()
                n = sum(1 for _, _ in zip(range(warmup_batches), it))
                timings[workers] = (time.perf_counter() - start) / max(n, 1)
                del it
            best = min(timings.values())
            # The fewest loader processes within 10% of the fastest: they cost memory and cores.
            self.loader_workers = min(w for w, t in timings.items() if t <= best * 1.1)
            self.loader_tuning = {str(w): round(t, 6) for w, t in timings.items()}
            if self.rank == 0:
                events.emit("loader_tuned", chosen=self.loader_workers, seconds_per_batch=self.loader_tuning)
        return make(self.loader_workers)

    def measure_precision(self, model, batch, loss_fn=None) -> str:
        """Time a few steps of `model` on `batch` in each precision this device offers
        (jobs/precision.py); with `precision: auto` keep the fastest safe one. Call once,
        before the loop and before `prepare_model` (the steps leave the weights as they
        were). Every worker ends with rank 0's choice. Returns the precision to train in."""
        import torch

        from . import precision as prec

        cuda_bf16 = self.device.type == "cuda" and torch.cuda.is_bf16_supported()
        model = model.to(self.device)
        batch = batch.to(self.device)
        measured = prec.measure(model, batch, prec.candidates(self.device.type, cuda_bf16),
                                self.device, loss_fn)
        trials = {p: round(t, 6) for p, t in measured.items()}
        choice = prec.pick(trials) if self.requested_precision == "auto" else self.precision
        self.precision, self.precision_trials = prec.agree(choice, trials, self.device)
        if self.rank == 0:
            events.emit("precision", chosen=self.precision, requested=self.requested_precision,
                        seconds_per_step=self.precision_trials)
        return self.precision

    def precision_record(self) -> dict:
        """The precision figures for a run's metrics (the verdict reads them)."""
        rec: dict[str, Any] = {"precision": self.precision,
                               "precision_auto": self.requested_precision == "auto"}
        if self.precision_trials:
            rec["precision_trials"] = self.precision_trials
        return rec

    @property
    def device_type(self) -> str:
        return self.device.type

    @property
    def amp_dtype(self):
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.precision)

    def autocast(self):
        """`torch.autocast` for this run's precision; a no-op context for fp32."""
        import torch

        if self.precision == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.amp_dtype)

    def grad_scaler(self):
        """A GradScaler that scales only for fp16 (bf16 and fp32 need none)."""
        import torch

        return torch.amp.GradScaler(self.device_type, enabled=self.precision == "fp16")

    def loader_kwargs(self, workers: Optional[int] = None) -> dict:
        """DataLoader keyword arguments for this run (or for `workers` loader processes)."""
        workers = self.loader_workers if workers is None else workers
        kw: dict[str, Any] = {"num_workers": workers, "pin_memory": self.pin_memory}
        if workers > 0:
            kw["persistent_workers"] = True
        return kw

    def progress(self, epoch: int, epochs: int, step: int, steps: int, every_s: float = 0.5) -> None:
        """Rank 0 tells orch where the loop is, at most every `every_s` seconds."""
        if self.rank != 0:
            return
        self._measure()
        now = time.monotonic()
        if now - self._last_progress < every_s and step != steps:
            return
        self._last_progress = now
        events.emit("progress", epoch=epoch, epochs=epochs, step=step, steps=steps)

    def _measure(self) -> None:
        """Once a run, after MEASURE_AFTER_S of training steps: their throughput and the share
        of a step spent waiting for data, as a `measure` event. orch places the job's later
        runs (a sweep's) by it before the first epoch's report, which may come much later."""
        t = self.timer
        if self._measured or t is None or not t.steps:
            return
        busy = t.data_s + t.copy_s + t.compute_s
        if busy < MEASURE_AFTER_S:
            return
        self._measured = True
        events.emit("measure", samples_per_sec=t.samples * self.world_size / busy,
                    data_fraction=min(1.0, t.data_s / busy), steps=t.steps)

    def should_stop(self, epoch: Optional[int] = None) -> bool:
        """Call after each checkpointed report: True when the job's budget is spent, on
        every worker at once (rank 0 decides, so no worker is left waiting in a collective).
        The loop then returns, and the run ends with its last checkpoint kept."""
        reason = over_budget(self.budget, time.time())
        if self.world_size > 1:
            import torch
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                flag = torch.tensor([1.0 if reason else 0.0],
                                    device=self.device if self.device.type == "cuda" else "cpu")
                dist.broadcast(flag, src=0)
                if flag.item() and not reason:
                    reason = "stopped with rank 0"
                elif not flag.item():
                    reason = None
        if reason and self.rank == 0:
            events.emit("stopped", reason="budget", detail=reason, epoch=epoch)
        return reason is not None

    def as_record(self) -> dict:
        rec = {"device": str(self.device), "gpu_name": device_name(self.device),
               "precision": self.precision,
               "precision_requested": self.requested_precision,
               "loader_workers": self.loader_workers, "pin_memory": self.pin_memory,
               "world_size": self.world_size}
        if self.loader_tuning:
            rec["loader_tuning"] = self.loader_tuning
        return rec


def device_name(device: Any) -> str:
    """The model this worker trains on, as torch names it ("NVIDIA H100 80GB HBM3"), or
    "cpu": orch learns each job's speed per GPU model from it (it spells it SkyPilot's way)."""
    if getattr(device, "type", None) != "cuda":
        return "cpu"
    try:
        import torch

        return torch.cuda.get_device_name(device)
    except Exception:  # a driver that cannot say: the run still trains, orch goes by its placement
        return "cuda"


def over_budget(budget: Optional[Budget], now: float) -> Optional[str]:
    """Why the run must stop now, or None: what it has cost so far (spent before the run
    started, e.g. a cloud VM's start-up, plus price x time since t0) against its limit."""
    if budget is None or not budget.limit_usd:
        return None
    t0 = now if budget.t0 is None else budget.t0
    spent = budget.spent_usd + budget.price_per_hour_usd * max(0.0, now - t0) / 3600.0
    if spent < budget.limit_usd:
        return None
    return f"{budget.what or 'budget'} reached: {spent:.4g} USD spent of {budget.limit_usd:.4g} USD"


def cpus_for_worker(options: WorkerOptions, local_world_size: int) -> int:
    """The CPUs a worker may use: as the job file asked (resources.cpus over its workers),
    else this node's CPUs shared by the job's workers on it."""
    if options.cpus_per_worker:
        return options.cpus_per_worker
    try:
        node = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        node = os.cpu_count() or 1
    return max(1, node // max(1, local_world_size))


def install(options: WorkerOptions) -> WorkerContext:
    """Called by the runner on each worker before the training loop starts."""
    global _CURRENT
    import ray.train
    import ray.train.torch
    import torch

    tc = ray.train.get_context()
    device = ray.train.torch.get_device()
    cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    precision = resolve_precision(options.precision, device.type, cuda_bf16, cpu_supports_bf16())
    cpus = cpus_for_worker(options, tc.get_local_world_size())
    from .profile import StepTimer

    _CURRENT = WorkerContext(
        job_id=options.job_id or os.environ.get("ORCH_JOB_ID", ""),
        rank=tc.get_world_rank(),
        world_size=tc.get_world_size(),
        device=device,
        precision=precision,
        loader_workers=resolve_loader_workers(options.loader_workers, device.type, cpus),
        pin_memory=resolve_pin_memory(options.pin_memory, device.type),
        requested_loader_workers=options.loader_workers,
        requested_precision=options.precision,
        timer=StepTimer(device),
        budget=options.budget,
    )
    if _CURRENT.rank == 0:
        events.emit("worker_setup", **_CURRENT.as_record())
    return _CURRENT


def current() -> WorkerContext:
    """The context of this worker; only valid inside a loop started by orch's runner."""
    if _CURRENT is None:
        raise RuntimeError("jobs.context.current() is only available inside an orch training loop")
    return _CURRENT
