"""This machine's offers: its GPUs as nvidia-smi reports them, and its CPU."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from typing import Optional

from orchestrator.decision.gpus import canonical_gpu
from orchestrator.decision.models import Offer
from orchestrator.decision.pricing import local_offer


def detect_gpus(timeout: float = 5.0) -> dict[str, int]:
    """GPU model -> count on this machine; empty without NVIDIA GPUs.

    nvidia-smi rather than torch: importing torch costs seconds that `orch plan` should
    not pay, and a missing or wedged driver must not hang the planner."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}
    try:
        out = subprocess.run([exe, "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=timeout, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_gpu_names(out)


def parse_gpu_names(text: str) -> dict[str, int]:
    return dict(Counter(canonical_gpu(line) for line in text.splitlines() if line.strip()))


def memory_gb() -> Optional[float]:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return None


def local_offers(settings, gpus: Optional[dict[str, int]] = None) -> list[Offer]:
    """One offer per local GPU model plus one for the CPU, priced from settings.local."""
    gpus = detect_gpus() if gpus is None else gpus
    cpus = settings.local.cpus or os.cpu_count()
    mem = memory_gb()
    offers = [local_offer(settings.local, settings.electricity_price, g, n, cpus, mem)
              for g, n in sorted(gpus.items())]
    offers.append(local_offer(settings.local, settings.electricity_price, None, 0, cpus, mem))
    return offers
