"""A sweep's rules, pure: which runs take the owned GPUs first, each run's share of the
sweep's budget, and which run is best so far (service/sweeps.py carries them out)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Optional, TypeVar

T = TypeVar("T")


def longest_first(hours: Sequence[float]) -> list[int]:
    """The runs' indexes in the order they are placed and launched: the longest estimate
    first (the owned GPUs free now go to the runs that would cost most to rent), ties in
    the file's order."""
    return sorted(range(len(hours)), key=lambda i: (-hours[i], i))


def budget_shares(max_cost: float, costs: Sequence[float]) -> list[Optional[float]]:
    """Each run's part of the sweep's budget, by its planned cost: together, the whole.
    None for every run where nothing is planned to cost anything."""
    total = sum(costs)
    if total <= 0:
        return [None] * len(costs)
    return [max_cost * c / total for c in costs]


def best(runs: Sequence[tuple[T, dict[str, Any]]], metric: Optional[str],
         mode: str) -> Optional[tuple[T, float]]:
    """(run, value) of the run whose `metric` (among its metrics) is best: the lowest for
    mode min, the highest for max; None where no run reported a finite number for it."""
    scored = [(float(m[metric]), r) for r, m in runs
              if metric and isinstance(m.get(metric), (int, float))
              and not isinstance(m.get(metric), bool) and math.isfinite(m[metric])]
    if not scored:
        return None
    value, run = (min if mode == "min" else max)(scored, key=lambda t: t[0])
    return run, value
