"""Checks a job file against this machine before anything is recorded: paths and imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Optional

from orchestrator.spec import JobSpec

_IMPORT_CHECK = """
import importlib, sys
sys.path.insert(0, '.')
mod, _, attr = sys.argv[1].partition(':')
try:
    m = importlib.import_module(mod)
except SyntaxError as e:
    print(f"{e.__class__.__name__} in {e.filename}:{e.lineno}: {e.msg}"); sys.exit(3)
except Exception as e:
    print(f"{e.__class__.__name__}: {e}"); sys.exit(3)
fn = getattr(m, attr, None)
if fn is None:
    print(f"module {mod!r} has no attribute {attr!r}"); sys.exit(3)
if not callable(fn):
    print(f"{sys.argv[1]} is not a function"); sys.exit(3)
"""


def check_runnable(spec: JobSpec, serves_clients: bool = False) -> None:
    """Raise a SpecError (file, line, key) for anything that would fail on the target.

    `serves_clients` (`orch serve`): the entrypoint is looked for in its module's source,
    never imported: importing a client's module would run its code as the server's user."""
    workdir = spec.workdir_path()
    if workdir is not None and not workdir.is_dir():
        raise spec.error("workdir", f"{workdir} is not a directory",
                         "a relative workdir is read from the job file's folder, or else from "
                         "the current folder, as SkyPilot reads it")
    # A git workdir is cloned at launch, not here: its entrypoint is imported there.
    if spec.train is not None and spec.train.entrypoint and spec.git_workdir is None and serves_clients:
        problem = static_entrypoint_problem(spec.train.entrypoint, workdir)
        if problem:
            raise spec.error("train.entrypoint", f"{spec.train.entrypoint!r}: {problem}",
                             "the module is looked up in the job's workdir")
        return
    if spec.train is not None and spec.train.entrypoint and spec.git_workdir is None:
        try:
            out = subprocess.run([sys.executable, "-c", _IMPORT_CHECK, spec.train.entrypoint],
                                 cwd=str(workdir) if workdir else None, capture_output=True,
                                 text=True, timeout=120)
        except subprocess.TimeoutExpired:
            raise spec.error("train.entrypoint", "importing it took over 120 s") from None
        if out.returncode != 0:
            detail = (out.stdout.strip() or out.stderr.strip().splitlines()[-1:] or ["failed"])
            detail = detail if isinstance(detail, str) else detail[0]
            raise spec.error("train.entrypoint", f"{spec.train.entrypoint!r} does not import: {detail}",
                             "the module is looked up in the job's workdir"
                             if workdir else "set workdir: to the folder that holds the module")


_MAX_SOURCE = 4 << 20  # a module's source read for the static look, at most


def static_entrypoint_problem(entrypoint: str, workdir: Optional[Path]) -> Optional[str]:
    """Why `module:function` cannot be the job's entrypoint, read from the module's source
    in `workdir` without running any of it; None when the module defines the function at
    its top level (or is not in the workdir: the cluster's Python may have it)."""
    mod, _, attr = entrypoint.partition(":")
    if workdir is None:
        return None
    base = Path(workdir, *mod.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        try:
            if not path.is_file() or path.is_symlink():
                continue
            with open(path, "rb") as f:
                source = f.read(_MAX_SOURCE + 1)
        except OSError:
            continue
        if len(source) > _MAX_SOURCE:
            return f"its module {path.name} is over {_MAX_SOURCE >> 20} MiB"
        try:
            tree = ast.parse(source, filename=path.name)
        except (SyntaxError, ValueError) as e:
            line = getattr(e, "lineno", None)
            return f"{type(e).__name__} in {path.name}" + (f":{line}" if line else "") + \
                f": {getattr(e, 'msg', e)}"
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == attr:
                return None
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
                    return None
            if isinstance(node, (ast.Import, ast.ImportFrom)) and \
                    any((a.asname or a.name.split(".")[0]) == attr for a in node.names):
                return None
        return f"module {mod!r} defines no {attr!r} at its top level"
    return None
