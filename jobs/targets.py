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


class EntrypointError(Exception):
    """The job's own `module:function` could not be had on a worker: said once, as orch
    says it before a run (orchestrator/spec/checks.py), not as a traceback."""


def imported(target: str) -> Callable:
    """`resolve_callable`, on a worker: an entrypoint that does not import, or is not a
    function there, raises EntrypointError, which `failure_text` finds again on the driver."""
    try:
        return resolve_callable(target)
    except Exception as e:
        raise EntrypointError(f"train.entrypoint {target!r} does not import: "
                              f"{type(e).__name__}: {e}") from e


def failure_text(e: Exception) -> str:
    """What a failed `fit()` says: a worker's EntrypointError alone when there is one (Ray
    Train quotes it inside a traceback snippet), else the exception itself."""
    for failure in (getattr(e, "worker_failures", None) or {}).values():
        base = getattr(failure, "_base_exc", failure)  # Ray Train keeps the worker's own
        if isinstance(base, EntrypointError):
            return str(base)
    return f"{type(e).__name__}: {e}"


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
