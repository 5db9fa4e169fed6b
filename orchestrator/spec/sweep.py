"""A sweep: one job file whose `sweep:` key expands it into runs of the same script with
other values, each run a job of its own (orch's key; SkyPilot has none).

```yaml
sweep:
  grid: {train.config.lr: [0.1, 0.01], envs.SEED: [1, 2]}   # every combination: 4 runs
  # or  runs: [{train.config.lr: 0.1, estimate.hours: 3}, {train.config.lr: 0.01}]
  # or  random: {samples: 8, seed: 0, space: {train.config.lr: {loguniform: [1e-4, 1e-1]}}}
  metric: val_loss        # what the sweep's best run is judged by
  mode: min               # or max
  max_cost: 20            # the whole sweep's budget, in the settings' currency
```

A value's key is a dotted path into the job file (`train.config.lr`, `envs.SEED`,
`estimate.hours`, `resources.accelerators`); each run is read as its own job file would
be, so a value a job file could not hold is refused at the sweep's line."""

from __future__ import annotations

import copy
import itertools
import math
import random as random_module
from typing import Any, Literal, Optional

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from orchestrator.base.errors import SpecError
from orchestrator.base.inputs import clip
from orchestrator.spec.base import Strict

MAX_RUNS = 200  # a sweep bigger than this is a mistake more often than a plan


class Uniform(Strict):
    uniform: Optional[tuple[float, float]] = None
    loguniform: Optional[tuple[PositiveFloat, PositiveFloat]] = None
    randint: Optional[tuple[int, int]] = None
    choice: Optional[list[Any]] = None

    @model_validator(mode="after")
    def _one(self) -> Uniform:
        given = [k for k in ("uniform", "loguniform", "randint", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of uniform: [low, high], loguniform: [low, high], "
                             "randint: [low, high] or choice: [values]")
        return self

    def sample(self, rng: random_module.Random) -> Any:
        if self.uniform is not None:
            return rng.uniform(*self.uniform)
        if self.loguniform is not None:
            lo, hi = self.loguniform
            return math.exp(rng.uniform(math.log(lo), math.log(hi)))
        if self.randint is not None:
            return rng.randint(*self.randint)
        assert self.choice is not None
        return rng.choice(self.choice)


class RandomSweep(Strict):
    samples: PositiveInt
    seed: int = 0
    space: dict[str, Uniform]


class Sweep(Strict):
    grid: Optional[dict[str, list[Any]]] = None
    runs: Optional[list[dict[str, Any]]] = None
    random: Optional[RandomSweep] = None
    metric: Optional[str] = None
    mode: Literal["min", "max"] = "min"
    max_cost: Optional[PositiveFloat] = Field(default=None, description="the whole sweep's budget")

    @model_validator(mode="after")
    def _one_kind(self) -> Sweep:
        given = [k for k in ("grid", "runs", "random") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of grid: {key: [values]}, runs: [{key: value}] "
                             "or random: {samples: N, space: {key: {uniform: [low, high]}}}")
        if self.grid is not None and (not self.grid or any(not v for v in self.grid.values())):
            raise ValueError("a grid needs at least one key, each with at least one value")
        if self.runs is not None and not self.runs:
            raise ValueError("runs: needs at least one run")
        return self

    def values(self) -> list[dict[str, Any]]:
        """Each run's values, in the order they are written (a grid's last key fastest)."""
        if self.grid is not None:
            keys = list(self.grid)
            return [dict(zip(keys, combo)) for combo in itertools.product(*self.grid.values())]
        if self.runs is not None:
            return [dict(r) for r in self.runs]
        assert self.random is not None
        rng = random_module.Random(self.random.seed)
        return [{k: d.sample(rng) for k, d in self.random.space.items()}
                for _ in range(self.random.samples)]


def with_values(data: dict, values: dict[str, Any], file: str, line: Optional[int]) -> dict:
    """A copy of the job file's data with each dotted key set to its value."""
    out = copy.deepcopy(data)
    for path, value in values.items():
        parts = str(path).split(".")
        if not all(parts):
            raise SpecError(file, line, f"sweep.{path}", "is not a dotted key of the job file",
                            "write e.g. train.config.lr or envs.SEED")
        node: Any = out
        for p in parts[:-1]:
            if node.get(p) is None:
                node[p] = {}
            if not isinstance(node[p], dict):
                raise SpecError(file, line, f"sweep.{path}", f"{clip(p)} holds a value, not keys",
                                "a sweep sets keys inside sections, e.g. train.config.lr")
            node = node[p]
        node[parts[-1]] = value
    return out


def run_label(values: dict[str, Any]) -> str:
    """A run's values in a line: `lr=0.01 SEED=2` (the last part of each key)."""
    def short(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else clip(v, quote=False)
    return " ".join(f"{str(k).rsplit('.', 1)[-1]}={short(v)}" for k, v in values.items())


