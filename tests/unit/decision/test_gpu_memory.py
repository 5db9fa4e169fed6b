"""GPU memory requests (`accelerators: 24GB+`): parsed, expanded to models, and the memory
table checked against SkyPilot's catalogs."""

from __future__ import annotations

import ast
import csv
from pathlib import Path

import pytest

from orchestrator.decision.gpus import MEMORY_GB, canonical_gpu, expand, memory_request
from orchestrator.spec.resources import parse_accelerator

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("text, name, count", [
    ("24GB+", "24GB+", 1), ("24GB", "24GB+", 1), ("24gb..", "24GB+", 1), ("48GiB+:2", "48GB+", 2),
    ("H100:8", "H100", 8),
])
def test_a_memory_request_parses_as_an_accelerator(text, name, count):
    choice = parse_accelerator(text)
    assert (choice.name, choice.count) == (name, count)


def test_a_memory_request_is_every_model_with_that_much_smallest_first():
    models = [g for g, _ in expand([("24GB+", 2.0)])]
    assert MEMORY_GB[models[0]] == 24 and "T4" not in models
    assert all(MEMORY_GB[g] >= 24 for g in models) and "H200" in models
    assert expand([("H100", 1.0), ("80GB+", 1.0)])[0] == ("H100", 1.0)  # named once
    assert memory_request("H100") is None and memory_request("80GB+") == 80


def test_the_memory_table_agrees_with_the_catalogs():
    seen = {}
    for path in (ROOT / "examples" / "catalog").glob("*/vms.csv"):
        for row in csv.DictReader(path.open()):
            info = ast.literal_eval(row["GpuInfo"]) if row.get("GpuInfo") else {}
            for gpu in info.get("Gpus", []):
                mib = (gpu.get("MemoryInfo") or {}).get("SizeInMiB")
                if mib:
                    seen[canonical_gpu(row["AcceleratorName"])] = mib / 1024
    assert len(seen) >= 4
    for model, gib in seen.items():
        assert MEMORY_GB[model] == pytest.approx(gib, rel=0.1), model
