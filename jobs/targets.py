"""A `train:` job's loop by its name: imported in a worker, only looked up in the runner.

The name is a built-in job's (jobs/builtin) or `module:function` from the job's workdir.
Standard library only until a loop is imported.
"""

from __future__ import annotations

import importlib
from typing import Callable


def resolve_callable(target: str) -> Callable:
    from jobs.builtin import BUILTIN_JOBS

    target = BUILTIN_JOBS.get(target, target)
    module_name, _, attr = target.partition(":")
    module = importlib.import_module(module_name)
    fn = getattr(module, attr)
    if not callable(fn):
        raise TypeError(f"{target} is not callable")
    return fn


def check_target(target: str) -> None:
    """Raise ModuleNotFoundError when `target`'s module is nowhere to be found. The job's own
    module is looked up, never imported: its code runs in the workers, not in this process,
    which holds the job's event key (code of the job's running here could sign its lines)."""
    from importlib.machinery import PathFinder
    from importlib.util import find_spec

    from jobs.builtin import BUILTIN_JOBS

    if target in BUILTIN_JOBS:
        resolve_callable(target)  # orch's own code
        return
    name = target.partition(":")[0]
    parts = name.split(".")
    spec = find_spec(parts[0])  # a top-level name is looked up without importing anything
    for i in range(1, len(parts) + 1):
        if spec is None:
            raise ModuleNotFoundError(f"No module named {'.'.join(parts[:i])!r} (the job's "
                                      f"target {target})", name=name)
        if i == len(parts) or not spec.submodule_search_locations:
            return  # found; or a module's attribute, which only running it would tell
        spec = PathFinder.find_spec(".".join(parts[:i + 1]), list(spec.submodule_search_locations))
