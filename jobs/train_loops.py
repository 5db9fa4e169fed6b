"""A `train:` job's loop by its name: imported in a worker, only looked up in the runner.

The name is a built-in job's (jobs/builtin) or `module:function` from the job's workdir.
Standard library only until a loop is imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any, Callable, Optional

# The name a job's own loop imports orch's helpers by (`from jobs.context import current`).
PUBLIC = "jobs"


def resolve_callable(target: str) -> Callable:
    from .builtin import BUILTIN_JOBS

    target = BUILTIN_JOBS.get(target, target)
    module_name, _, attr = target.partition(":")
    # A built-in job's module is relative to this package, under whichever name it runs.
    module = importlib.import_module(module_name, __package__)
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

    from .builtin import BUILTIN_JOBS

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


def offer_public_name() -> None:
    """On a worker, before the job's code is imported: where the runner runs under its
    shipped name and the job has no `jobs` of its own on its path, `jobs.X` imports as this
    package's X, the very modules the runner set up (`jobs.context.current()` is this run's
    context). A job's own `jobs` package is left alone, and wins."""
    package = __package__ or PUBLIC
    if package == PUBLIC or PUBLIC in sys.modules:
        return
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec(PUBLIC, sys.path)
    if spec is not None and not _is_orch_runner(spec):
        return  # the job's own
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias(PUBLIC, package))


def _is_orch_runner(spec: Any) -> bool:
    """Whether a `jobs` found on the path is an install of orch's runner (this package, or
    orch installed on the node): its `__init__` names the shipped name."""
    try:
        with open(spec.origin or "", encoding="utf-8", errors="replace") as f:
            return "\nSHIPPED_AS = " in f.read()
    except OSError:
        return False


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports `alias` and `alias.X` as the modules `real` and `real.X` (the same objects)."""

    def __init__(self, alias: str, real: str):
        self.alias, self.real = alias, real
        self._specs: dict[str, Any] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Optional[Any]:
        if fullname != self.alias and not fullname.startswith(self.alias + "."):
            return None
        module = importlib.import_module(self.real + fullname[len(self.alias):])
        return importlib.util.spec_from_loader(fullname, self, is_package=hasattr(module, "__path__"))

    def create_module(self, spec: Any) -> Any:
        module = importlib.import_module(self.real + spec.name[len(self.alias):])
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: Any) -> None:
        # The import system set the alias's spec on the module: it keeps its own.
        module.__spec__ = self._specs.pop(module.__spec__.name, module.__spec__)
