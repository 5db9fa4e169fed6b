"""Checks a job file against this machine before anything is recorded: paths and imports."""

from __future__ import annotations

import ast
import difflib
import subprocess
import sys
from enum import Enum
from pathlib import Path
from typing import Iterable, NamedTuple, Optional

from orchestrator.spec import JobSpec
from orchestrator.spec.check_memo import CheckMemo

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


class Read(Enum):
    """What reading an entrypoint's module source tells."""
    FOUND = "found"  # the module binds the name at its top level
    MISSING = "missing"  # it cannot be the entrypoint: the detail says why
    DYNAMIC = "dynamic"  # the module may bind names only running it would show
    ELSEWHERE = "elsewhere"  # the module is not in the workdir (the cluster's Python may have it)


class Reading(NamedTuple):
    read: Read
    detail: str = ""


def check_runnable(spec: JobSpec, serves_clients: bool = False,
                   memo: Optional[CheckMemo] = None) -> None:
    """Raise a SpecError (file, line, key) for anything that would fail on the target.

    The entrypoint's module is read, not imported: a function its source does not define
    is refused here, and an import that fails is left to the run, which reports it. Only
    a module reading cannot settle (not in the workdir, or binding names at run time) is
    imported, in a subprocess, on the user's own orch; `memo` remembers what passed, so
    unchanged code is not checked again. `serves_clients` (`orch serve`): never imported:
    importing a client's module would run its code as the server's user."""
    workdir = spec.workdir_path()
    if workdir is not None and not workdir.is_dir():
        raise spec.error("workdir", f"{workdir} is not a directory",
                         "a relative workdir is read from the job file's folder, or else from "
                         "the current folder, as SkyPilot reads it")
    # A git workdir is cloned at launch, not here: its entrypoint is imported there.
    if spec.train is None or not spec.train.entrypoint or spec.git_workdir is not None:
        return
    entrypoint, where = spec.train.entrypoint, workdir or Path.cwd()
    if memo is not None and memo.passed(entrypoint, where):
        return
    reading = read_entrypoint(entrypoint, workdir)
    hint = "the module is looked up in the job's workdir"
    if serves_clients:
        if reading.read in (Read.MISSING, Read.DYNAMIC):
            raise spec.error("train.entrypoint", f"{entrypoint!r}: {reading.detail}", hint)
        return
    if reading.read is Read.MISSING:
        raise spec.error("train.entrypoint", f"{entrypoint!r}: {reading.detail}", hint)
    if reading.read is not Read.FOUND:
        problem = import_problem(entrypoint, workdir)
        if problem:
            raise spec.error("train.entrypoint", f"{entrypoint!r} does not import: {problem}",
                             hint if workdir else "set workdir: to the folder that holds the module")
    if memo is not None:
        memo.remember(entrypoint, where)


def import_problem(entrypoint: str, workdir: Optional[Path]) -> Optional[str]:
    """Why importing `module:function` in a new Python, in `workdir`, fails; None if not."""
    try:
        out = subprocess.run([sys.executable, "-c", _IMPORT_CHECK, entrypoint],
                             cwd=str(workdir) if workdir else None, capture_output=True,
                             text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "importing it took over 120 s"
    if out.returncode == 0:
        return None
    return out.stdout.strip() or (out.stderr.strip().splitlines() or ["failed"])[-1]


_MAX_SOURCE = 4 << 20  # a module's source read for the static look, at most


def read_entrypoint(entrypoint: str, workdir: Optional[Path]) -> Reading:
    """What the source of `module:function`'s module in `workdir` tells, none of it run."""
    mod, _, attr = entrypoint.partition(":")
    if workdir is None:
        return Reading(Read.ELSEWHERE)
    base = Path(workdir, *mod.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        try:
            if not path.is_file() or path.is_symlink():
                continue
            with open(path, "rb") as f:
                source = f.read(_MAX_SOURCE + 1)
        except OSError:
            continue
        rel = path.relative_to(workdir).as_posix()
        if len(source) > _MAX_SOURCE:
            return Reading(Read.DYNAMIC, f"its module {rel} is over {_MAX_SOURCE >> 20} MiB")
        try:
            tree = ast.parse(source, filename=rel)
        except (SyntaxError, ValueError) as e:
            line = getattr(e, "lineno", None)
            return Reading(Read.MISSING, f"{type(e).__name__} in {rel}"
                           + (f":{line}" if line else "") + f": {getattr(e, 'msg', e)}")
        names = module_names(tree)
        if names.get(attr):
            problem = call_problem(tree, attr, rel)
            return Reading(Read.MISSING, f"{entrypoint}: {problem}") if problem else Reading(Read.FOUND)
        missing = f"module {mod!r} defines no {attr!r} at its top level ({rel})"
        why = binds_at_run_time(tree, attr, names)
        if why:
            return Reading(Read.DYNAMIC, f"{missing}; {why}")
        if attr in names:
            return Reading(Read.MISSING, f"{entrypoint} is not a function: {rel} assigns it a literal")
        near = difflib.get_close_matches(attr, sorted(n for n in names if not n.startswith("_")), 3)
        return Reading(Read.MISSING, missing + (f"; did you mean {' or '.join(map(repr, near))}?"
                                                if near else ""))
    return Reading(Read.ELSEWHERE)


def call_problem(tree: ast.Module, attr: str, rel: str) -> Optional[str]:
    """Why the runner could not call the module's top-level `attr` as each worker does
    (with the config dict, or with nothing), or not import the module in a worker (it reads
    the command line as it is imported, which in a worker is Ray's); None when it can."""
    for node in _import_time(tree.body):
        for sub in ast.walk(node):
            reads = isinstance(sub, ast.Attribute) and (
                sub.attr in ("parse_args", "parse_known_args") and isinstance(sub.ctx, ast.Load)
                or sub.attr == "argv" and isinstance(sub.value, ast.Name) and sub.value.id == "sys")
            if reads:
                return (f"{rel}:{getattr(sub, 'lineno', '?')} reads the command line when the module is imported, "
                        "and a worker's command line is Ray's: read it under "
                        "`if __name__ == \"__main__\":` instead, or take the values from config")
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
            a = node.args
            positional = a.posonlyargs + a.args
            required = len(positional) - len(a.defaults)
            kw_required = [k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is None]
            if required > 1 or kw_required:
                names = [x.arg for x in positional[:required]] + kw_required
                return (f"{rel}:{node.lineno} defines {attr}({', '.join(names)}), and the runner "
                        f"calls it with one argument (the config dict) or none: give the others "
                        "defaults, or read them from config")
    return None


def _import_time(body: list[ast.stmt]) -> Iterable[ast.AST]:
    """The statements of a module body that run when it is imported: not the bodies of its
    functions and classes, nor its `if __name__ == "__main__":` block."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield from node.decorator_list
            continue
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) \
                and "__name__" in ast.unparse(node.test):
            yield from _import_time(node.orelse)
            continue
        yield node


_SCOPES = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_LITERALS = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.JoinedStr)


def module_names(tree: ast.Module) -> dict[str, bool]:
    """Every name the module's top level binds, under any `if`, `try`, `with` or loop
    (definitions, assignments, imports; a function's or a class's body is not read), each
    to whether it may be a function: False when every binding assigns it a literal."""
    names: dict[str, bool] = {}
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = True
            continue
        if isinstance(node, _SCOPES):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) and node.value is not None else []
        if targets and isinstance(getattr(node, "value", None), _LITERALS) and \
                all(isinstance(t, ast.Name) for t in targets):
            names.update((t.id, names.get(t.id, False)) for t in targets if isinstance(t, ast.Name))
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names[node.id] = True
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name.split(".")[0], True) for a in node.names if a.name != "*")
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            names[node.name] = True
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names[node.rest] = True
        stack.extend(ast.iter_child_nodes(node))
    return names


_RUN_TIME = {"globals", "vars", "setattr", "exec", "eval", "__import__"}


def binds_at_run_time(tree: ast.Module, attr: str, names: Iterable[str]) -> Optional[str]:
    """How the module (binding `names` at its top level) may bind `attr` where reading
    cannot see it; None when it cannot."""
    if "__getattr__" in names:
        return "it has a module __getattr__"
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return f"it imports * from {'.' * node.level}{node.module or ''}"
        if isinstance(node, ast.Global) and attr in node.names:
            return f"a function declares `global {attr}`"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _RUN_TIME:
            return f"it calls {node.func.id}()"
        if isinstance(node, ast.Attribute) and node.attr == "modules" and \
                isinstance(node.value, ast.Name) and node.value.id == "sys":
            return "it uses sys.modules"
    return None
