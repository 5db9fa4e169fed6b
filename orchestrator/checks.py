"""Checks a job file against this machine before anything is recorded: paths and imports."""

from __future__ import annotations

import subprocess
import sys

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


def check_runnable(spec: JobSpec) -> None:
    """Raise a SpecError (file, line, key) for anything that would fail on the target."""
    workdir = spec.workdir_path()
    if workdir is not None and not workdir.is_dir():
        raise spec.error("workdir", f"{workdir} is not a directory",
                         "a relative workdir is read from the job file's folder, or else from "
                         "the current folder, as SkyPilot reads it")
    # A git workdir is cloned at launch, not here: its entrypoint is imported there.
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
