"""Relative training speed of GPU models, and the names they go by."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Mapping, Optional

CPU = "CPU"

# Dense bf16 tensor TFLOPS per device (fp16 for GPUs without bf16: V100, T4, P100),
# from vendor data sheets, divided by H100 SXM's 989. A coarse guide to scale one
# measured run to other models; a measured run of the same job beats it.
_TFLOPS = {
    "B200": 2250, "B100": 1750, "MI300X": 1307, "H200": 989, "GH200": 989, "H100": 989,
    "H100-MEGA": 989, "H100-PCIE": 756, "H800": 989, "MI250X": 383, "MI250": 362,
    "L40S": 362, "RTX6000-ADA": 364, "RTXPRO6000": 500, "A100-80GB": 312, "A100": 312,
    "A800": 312, "L40": 181, "RTX5090": 209, "RTX4090": 165, "A6000": 155, "RTX6000": 130,
    "A40": 150, "A30": 165, "A10": 125, "L4": 121, "V100-32GB": 125, "V100": 125,
    "RTX4080": 97, "A5000": 111, "A4000": 77, "RTX3090": 71, "RTX3080": 60, "A10G": 70,
    "T4": 65, "P100": 19, "K80": 4, CPU: 2,  # a workstation CPU with AVX-512 bf16
}
SPEED: dict[str, float] = {k: v / 989 for k, v in _TFLOPS.items()}

# Memory per device in GB, from the same data sheets (SkyPilot's catalogs agree: GpuInfo's
# MemoryInfo): what `accelerators: 24GB+` is matched against.
MEMORY_GB = {
    "B200": 180, "B100": 180, "MI300X": 192, "H200": 141, "GH200": 96, "H100": 80,
    "H100-MEGA": 80, "H100-PCIE": 80, "H800": 80, "MI250X": 128, "MI250": 128, "L40S": 48,
    "RTX6000-ADA": 48, "RTXPRO6000": 96, "A100-80GB": 80, "A100": 40, "A800": 80, "L40": 48,
    "RTX5090": 32, "RTX4090": 24, "A6000": 48, "RTX6000": 24, "A40": 48, "A30": 24, "A10": 24,
    "L4": 24, "V100-32GB": 32, "V100": 16, "RTX4080": 16, "A5000": 24, "A4000": 16,
    "RTX3090": 24, "RTX3080": 10, "A10G": 24, "T4": 16, "P100": 16, "K80": 12,
}
_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:GB|GiB|G)\s*(?:\+|\.\.)?\s*$", re.IGNORECASE)


def memory_request(name: str) -> Optional[float]:
    """The GB of a memory request written as an accelerator (`24GB+`, `24GB`, dstack's
    `24GB..`: at least that much), None for a model name."""
    m = _MEMORY_RE.match(name)
    return float(m.group(1)) if m else None


def with_memory(min_gb: float) -> list[str]:
    """The GPU models with at least `min_gb` GB each, least memory first (then fastest)."""
    return sorted((g for g, gb in MEMORY_GB.items() if gb >= min_gb),
                  key=lambda g: (MEMORY_GB[g], -SPEED[g], g))


def expand(choices: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """(model, count) choices with each memory request replaced by the models it admits,
    in the order of `with_memory`; a model admitted twice is kept once, where first met."""
    out: dict[tuple[str, float], None] = {}
    for name, count in choices:
        gb = memory_request(name)
        # A request no model meets stays as it is: no offer has it (never "no accelerator").
        for model in ((with_memory(gb) or [name]) if gb is not None else [canonical_gpu(name)]):
            out.setdefault((model, count))
    return list(out)

# Vendor spellings (nvidia-smi, torch) that differ from SkyPilot's names.
_ALIASES = {
    "A100SXM480GB": "A100-80GB", "A100PCIE80GB": "A100-80GB", "A10080GB": "A100-80GB",
    "A100SXM440GB": "A100", "A100PCIE40GB": "A100", "A10040GB": "A100",
    "H100SXM5": "H100", "H10080GBHBM3": "H100", "H100SXM": "H100", "H100NVL": "H100",
    "H100PCIE": "H100-PCIE", "H200NVL": "H200", "H200SXM": "H200",
    "GEFORCERTX4090": "RTX4090", "GEFORCERTX3090": "RTX3090", "GEFORCERTX5090": "RTX5090",
    "RTXA6000": "A6000", "RTXA5000": "A5000", "RTXA4000": "A4000",
    "RTX6000ADAGENERATION": "RTX6000-ADA", "RTX6000ADA": "RTX6000-ADA",
    "TESLAT4": "T4", "TESLAV100": "V100", "TESLAV100SXM232GB": "V100-32GB",
    "TESLAV100SXM216GB": "V100", "TESLAP100": "P100", "TESLAK80": "K80",
    "A10G": "A10G", "INSTINCTMI300X": "MI300X",
}
_BY_KEY = {re.sub(r"[^A-Z0-9]", "", k.upper()): k for k in _TFLOPS}


def _key(name: str) -> str:
    s = name.upper().replace("NVIDIA", "").replace("AMD", "")
    return re.sub(r"[^A-Z0-9]", "", s)


@lru_cache(maxsize=4096)
def canonical_gpu(name: str) -> str:
    """SkyPilot's spelling of a GPU model, e.g. 'NVIDIA A100-SXM4-80GB' -> 'A100-80GB'."""
    k = _key(name)
    if k in _ALIASES:
        return _ALIASES[k]
    if k in _BY_KEY:
        return _BY_KEY[k]
    return name.strip()


def same_gpu(a: str, b: str) -> bool:
    return a == b or a.upper() == b.upper() or canonical_gpu(a) == canonical_gpu(b)


def relative_speed(gpu: Optional[str], overrides: Mapping[str, float] | None = None) -> Optional[float]:
    """Speed of one device relative to H100 = 1.0; `gpu=None` is the CPU; None if unknown."""
    name = CPU if gpu is None else canonical_gpu(gpu)
    if overrides:
        for k, v in overrides.items():
            if k == name or canonical_gpu(k) == name:
                return float(v)
    return SPEED.get(name)
