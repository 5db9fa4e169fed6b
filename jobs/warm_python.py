"""Warm Pythons for the `run:` jobs orch starts on the local Ray: `python train.py` forked
from a process that has already imported torch.

Why: a `run:` job's `python train.py` imports torch anew, 1.5-3.5 s of a 2-core machine,
often most of a short script's time; run directly it pays that too, but orch's own cost
around it (its submit, the job's folder, the end seen) is on top, so a short script could
not come near its direct time. A process that imported torch once and forks a child per
command pays it once.

How: the job's PATH begins with a folder whose `python`, `python3` and `torchrun` run this
file as a client (`python -I -S warm_python.py ARGS...`, standard library only). The client asks the
local Ray's warm-Python zygote (jobs/zygote.py in this file's mode, started with the local
Ray, torch imported) to fork a child that runs ARGS as `python ARGS` would: the command's
environment, folder, umask, standard streams and arguments, its `-m` module or script
first on the path, PYTHONPATH after it, Python's and numpy's random generators seeded
anew, torch's threads as OMP_NUM_THREADS says. The client stands in for the child as
jobs/forkserver.py's does for a Ray worker: signals go to it, its exit status is the
client's, and the zygote kills the child's session when the client goes (a cancel's
SIGKILL). Whatever it cannot run the same way runs plain, this interpreter exec'd with
ARGS: another option than -u and -B, `-c`, no script (a prompt), a PYTHON* setting other
than PYTHONPATH, PYTHONUNBUFFERED and PYTHONDONTWRITEBYTECODE (PYTHONHASHSEED: a child's
hashes are the zygote's), a locale or preload the zygote was not started with, a module
the zygote preloaded that the command would import from another file, no zygote.
`ORCH_WARM_PYTHON=0` in a job's `envs` turns it off for that job.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import stat
import sys
from typing import Optional

SOCKET_VAR = "ORCH_WARM_PYTHON"  # the zygote's socket, in a local job's environment
BIN_VAR = "ORCH_WARM_PYTHON_BIN"  # the folder of the `python` that is this client
_FLAGS = ("-u", "-B")
_PYTHON_VARS = ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")
# Read once as a process starts: a child has the zygote's, so they must be the command's.
SAME_VARS = ("LANG", "LC_ALL", "LC_CTYPE", "LD_PRELOAD", "LD_LIBRARY_PATH", "MALLOC_CONF")


def _sibling(name: str):
    """A module of this folder, loaded by its path: the client runs with -I -S, so neither
    this folder nor the package is on its path."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_orch_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def warm_args(argv: list, env: dict, zygote_env: Optional[dict]) -> bool:
    """Whether `python ARGV` in environment `env` runs the same forked from a zygote whose
    start-up environment held `zygote_env` (its SAME_VARS)."""
    rest = list(argv)
    while rest and rest[0] in _FLAGS:
        rest.pop(0)
    if not rest or zygote_env is None or env.get(SOCKET_VAR) in ("", "0"):
        return False
    if rest[0] == "-m":
        if len(rest) < 2 or rest[1].startswith("-"):
            return False
    elif rest[0].startswith("-") or not os.path.isfile(rest[0]):
        return False
    if any(k.startswith("PYTHON") and k not in _PYTHON_VARS for k in env):
        return False
    return all(env.get(k) == zygote_env.get(k) for k in SAME_VARS)


def client(argv: list) -> None:
    """`python ARGV` forked from the warm zygote, or run plain. Does not return."""
    env = dict(os.environ)
    path = env.get(SOCKET_VAR) or ""
    try:  # what the zygote was started with (SAME_VARS); not waiting on a FIFO put there
        fd = os.open(path + ".env", os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            zygote_env = json.loads(f.read(1 << 16)) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except (OSError, ValueError):
        zygote_env = None
    if warm_args(argv, env, zygote_env if isinstance(zygote_env, dict) else None):
        forkserver = _sibling("forkserver")
        conn = forkserver._connect(path)
        if conn is not None:
            fd = os.memfd_create("orch-python-env", os.MFD_CLOEXEC)
            os.write(fd, json.dumps({"argv": argv, "env": env}).encode())
            os.lseek(fd, 0, os.SEEK_SET)
            forkserver._stand_in(conn, ["python"], fd)  # returns only where not forked
            os.close(fd)
    os.execv(sys.executable, [sys.executable, *argv])


# -- the zygote's side: what it preloads, and how a child runs its command -------------


# The modules the preload imported (top-level name -> file, mtime, size): a child whose
# command would import another file under one of those names (its own `random.py` beside
# its script, a torch its PYTHONPATH names, a torch its `setup:` reinstalled) runs plain.
_PRELOADED: dict = {}


def preload(_env: dict) -> None:
    """torch (numpy with it), imported once for every command the zygote forks; and which
    modules a command would find imported here that a new `python` would import itself
    (all but those a new one has at its start)."""
    import subprocess

    fresh = set(subprocess.run([sys.executable, "-c", "import sys; print(*sys.modules)"],
                               capture_output=True, text=True, check=True).stdout.split())
    import random  # noqa: F401  (seeded anew in each child)

    import torch  # noqa: F401

    for name in set(sys.modules) - fresh:  # (`__mp_main__`: multiprocessing's alias of main)
        path = getattr(sys.modules[name], "__file__", None)
        if "." not in name and not name.startswith("__") and path and os.path.isfile(path):
            st = os.stat(path)
            _PRELOADED[name] = (path, st.st_mtime_ns, st.st_size)


def _same_imports() -> bool:
    """Whether each module the zygote preloaded is the file the command would import, with
    the command's path set, unchanged since."""
    from importlib.machinery import PathFinder

    for name, (path, mtime, size) in _PRELOADED.items():
        spec = PathFinder.find_spec(name, sys.path)
        try:
            st = os.stat(path)
        except OSError:
            return False
        if spec is None or spec.origin != path or (st.st_mtime_ns, st.st_size) != (mtime, size):
            return False
    return True


def run(argv: list) -> None:
    """In the forked child (its environment, folder and streams the command's): run ARGV
    as `python ARGV` would."""
    import random
    import runpy

    args, python = list(argv), sys.executable
    flags = []
    while args and args[0] in _FLAGS:
        flags.append(args.pop(0))
    env = os.environ
    if "-u" in flags or env.get("PYTHONUNBUFFERED"):
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(write_through=True)  # type: ignore[union-attr]
    sys.dont_write_bytecode = "-B" in flags or bool(env.get("PYTHONDONTWRITEBYTECODE"))
    random.seed()
    torch = sys.modules.get("torch")
    threads = env.get("OMP_NUM_THREADS", "")
    if torch is not None and threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    # What the command starts with this interpreter (torchrun's workers, a subprocess of
    # sys.executable) is warm too where it can be (a multiprocessing child's `-c`: plain).
    shim = os.path.join(env.get(BIN_VAR, ""), "python")
    if os.path.isabs(shim) and os.access(shim, os.X_OK):
        sys.executable = shim
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    first = os.getcwd() if args[0] == "-m" else os.path.dirname(os.path.abspath(args[0]))
    sys.path[0:0] = [first, *extra]
    if not _same_imports():  # run plain: this process becomes `python ARGV`
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os.execv(python, [python, *argv])
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = args
        runpy.run_path(args[0], run_name="__main__")


def serve(path: str) -> None:
    """Be the warm-Python zygote at socket `path`. Does not return."""
    zygote = _sibling("zygote")
    zygote.MAIN.update(preload=preload, run=run)
    with contextlib.suppress(OSError):
        os.unlink(path + ".env")  # an earlier zygote's (or whatever was put there)
    fd = os.open(path + ".env", os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({k: os.environ[k] for k in SAME_VARS if k in os.environ}, f)
    zygote.serve(path, [])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"] and len(sys.argv) == 3:
        serve(sys.argv[2])
    client(sys.argv[1:])
