"""Precision by measurement: a few timed steps in each precision the device offers.

`precision: auto` keeps the fastest that is numerically safe; an explicit precision is kept
as asked, and the figures still go in the run's metrics, so the verdict can say what another
precision would gain. fp16 is only a candidate where the loop scales its loss (orch's
`grad_scaler()`), and only on CUDA: on a CPU it is neither fast nor scaled.

Why measure: whether a half type pays depends on the chip, not on its name. On an AMD EPYC
without native bf16 (AVX2 only) a small CNN step under bf16 autocast ran at 535 samples/s
against 5,400-6,500 in fp32; on a GPU with tensor cores bf16 is the faster one.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

# Safest first: a faster candidate must beat a safer one by this much to be kept by `auto`.
ORDER = ("fp32", "bf16", "fp16")
MARGIN = 0.10
# An explicit precision this much slower per step than the fastest gets a line in the verdict.
WIDE = 1.5


def candidates(device_type: str, cuda_bf16: bool) -> list[str]:
    """The precisions worth timing on this device."""
    if device_type == "cuda":
        return ["fp32", *(["bf16"] if cuda_bf16 else []), "fp16"]
    return ["fp32", "bf16"]


def pick(trials: dict[str, float]) -> str:
    """The precision `auto` keeps, from seconds per step: the fastest, unless a safer one is
    within MARGIN of it."""
    best = min(trials.values())
    return next(p for p in ORDER if p in trials and trials[p] <= best * (1 + MARGIN))


def advice(trials: dict[str, float], used: Optional[str]) -> Optional[str]:
    """One verdict line when the precision used is WIDE times slower per step than the
    fastest measured one; None otherwise, or without figures."""
    if not trials or used not in trials:
        return None
    fastest = min(trials, key=lambda p: trials[p])
    ratio = trials[used] / trials[fastest] if trials[fastest] > 0 else 0.0
    if fastest == used or ratio < WIDE:
        return None
    return (f"precision: {fastest} (or auto): a step took {ratio:.1f}x as long in {used} as "
            f"in {fastest} on this device, measured at the start of the run")


def measure(model: Any, batch: Any, precisions: list[str], device: Any,
            loss_fn: Optional[Callable[[Any], Any]] = None, rounds: int = 3,
            min_s: float = 0.03) -> dict[str, float]:
    """Seconds per forward-and-backward step of `model` on `batch` in each precision: the
    precisions take turns for `rounds` rounds of at least `min_s` each, and each keeps its
    best round, so a busy neighbour or a warming cache slows all of them alike. The
    weights, their gradients and the buffers (batch-norm statistics) are left as found."""
    import torch

    loss_fn = loss_fn or (lambda out: out.float().mean())
    saved = {k: v.detach().clone() for k, v in model.named_buffers()}
    scalers = {p: torch.amp.GradScaler(device.type, enabled=p == "fp16") for p in precisions}
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}

    def steps(precision: str, n: int) -> float:
        dtype = dtypes.get(precision)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(n):
            with torch.autocast(device_type=device.type, dtype=dtype or torch.float32,
                                enabled=dtype is not None):
                out = model(batch)
            scalers[precision].scale(loss_fn(out)).backward()
            model.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return (time.perf_counter() - start) / n

    try:
        first = {p: steps(p, 1) for p in precisions}  # kernel selection and allocation
        n = {p: max(2, min(50, int(min_s / max(first[p], 1e-6)))) for p in precisions}
        best = {p: steps(p, n[p]) for p in precisions}
        for _ in range(rounds - 1):
            for p in precisions:
                best[p] = min(best[p], steps(p, n[p]))
        return best
    finally:
        model.zero_grad(set_to_none=True)
        with torch.no_grad():
            for k, v in model.named_buffers():
                if k in saved:
                    v.copy_(saved[k])


def agree(choice: str, trials: dict[str, float], device: Any = None) -> tuple[str, dict[str, float]]:
    """Rank 0's choice and figures on every worker (all ranks must train in one precision);
    as they are when the job runs without a process group."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return choice, trials
    box: list[Any] = [(choice, trials)]
    dist.broadcast_object_list(box, src=0,
                               device=device if getattr(device, "type", None) == "cuda" else None)
    return box[0]
