"""A job's secret values on a Ray target: a 0600 file in its working_dir, read once and removed.

Ray writes a job's runtime_env (its env_vars) to its logs and shows it on the dashboard, so
orch puts secrets in a file inside the job's working_dir package instead, and only the
file's name in the runtime env (ORCH_ENV_FILE). The job's entrypoint is started through
this module: `python -m _orch_runner.secret_env -- COMMAND...` reads the file, removes it, and
execs COMMAND with the values in its environment (and their names, not values, in
ORCH_ENV_NAMES, so orch's runner can hand them on to its Ray Train workers). A `train:`
job's values hold its event key too (jobs/events.py), which goes to the runner by a pipe,
never an environment (hand_key); the runner takes it (take_key) before it runs the job's
`setup:` (run_setup) as a child that never holds it.
Imports nothing outside the standard library: it runs before anything else of the job.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Mapping, MutableMapping, Optional

from .events import KEY_VAR  # standard library only, as this module
from .keeper import PROCESS_JOB_VAR  # standard library only, as this module

FILE_VAR = "ORCH_ENV_FILE"  # the file's name, relative to the job's working_dir
NAMES_VAR = "ORCH_ENV_NAMES"  # comma-separated names of the values the file held
KEY_FD_VAR = "ORCH_EVENT_KEY_FD"  # the pipe the runner reads the job's event key from
SETUP_VAR = "ORCH_SETUP"  # a `train:` job's setup: lines, which the runner runs (run_setup)
VERSION = 1
EXIT_NO_FILE = 2


class MissingFile(RuntimeError):
    """ORCH_ENV_FILE names a file the job does not have."""


class Hidden:
    """Secret values handed to a Ray Train worker (in its train_loop_config). Ray Train keeps
    that config in its run state and on the dashboard, stringified: this prints names only."""

    def __init__(self, values: Mapping[str, str]):
        self._values = for_workers(values)

    @property
    def values(self) -> dict[str, str]:
        return self._values

    def names(self) -> list[str]:
        return sorted(self._values)

    def __repr__(self) -> str:
        return f"<hidden: {', '.join(self.names()) or 'nothing'}>"

    __str__ = __repr__


def dumps(values: Mapping[str, str]) -> str:
    return json.dumps({"version": VERSION, "env": {str(k): str(v) for k, v in values.items()}})


def loads(text: str) -> dict[str, str]:
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("env"), dict):
        raise ValueError("not an orch secret file of version 1")
    return {str(k): str(v) for k, v in data["env"].items()}


def write(path: Path, values: Mapping[str, str]) -> Path:
    """Create `path` (it must not exist) readable by its owner alone, holding `values`."""
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(dumps(values))
    return path


def take(environ: Mapping[str, str] = os.environ, cwd: Optional[Path] = None) -> dict[str, str]:
    """The values in the file ORCH_ENV_FILE names, the file removed; {} when none is named.
    Raises MissingFile when it is named but absent (never shipped, or taken already)."""
    name = environ.get(FILE_VAR)
    if not name:
        return {}
    path = Path(cwd or os.getcwd()) / name
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise MissingFile(f"the secret file {name} is not in the job's working_dir "
                          f"{path.parent} (excluded by a .gitignore there, or read already)") from None
    path.unlink(missing_ok=True)
    return loads(text)


def discard(environ: Mapping[str, str] = os.environ, cwd: Optional[Path] = None) -> bool:
    """Remove the file if this node's copy of the working_dir still has it (a node other than
    the driver's unpacks the package too); True when there was one."""
    name = environ.get(FILE_VAR)
    if not name:
        return False
    path = Path(cwd or os.getcwd()) / name
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False


def child_env(values: Mapping[str, str], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment the job's command runs with: the values set, their names listed."""
    env = {k: v for k, v in environ.items() if k != FILE_VAR}
    env.update(values)
    env[NAMES_VAR] = ",".join(sorted(values))
    return env


def from_environ(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The values child_env set, read back by name (what orch's runner hands to its workers)."""
    names = [n for n in environ.get(NAMES_VAR, "").split(",") if n]
    return {n: environ[n] for n in names if n in environ}


def event_key(values: Mapping[str, str], environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """The job's event key, which signs the runner's state events (jobs/events.py): among
    the values its secret file held, or in the environment (a cloud VM's task, where
    SkyPilot sets the secrets). None for a job orch launched without one."""
    return values.get(KEY_VAR) or environ.get(KEY_VAR) or None


def for_workers(values: Mapping[str, str]) -> dict[str, str]:
    """`values` as the runner hands them on (to its Ray Train workers, to the runner host):
    without the event key, which only orch's runner may hold; the job's own code runs in
    the workers, and a key it held would let it sign the lines that set its outcome."""
    return {k: v for k, v in values.items() if k != KEY_VAR}


def hand_key(values: dict[str, str]) -> dict[str, str]:
    """`values` without the event key, which goes into a pipe instead, whose read end (its
    number in KEY_FD_VAR) the command inherits: never in an environment, which a process's
    children inherit and /proc/<pid>/environ shows them; never in a file they could open."""
    key = values.pop(KEY_VAR, None)
    if not key:
        return {}
    read_end, write_end = os.pipe()
    os.write(write_end, key.encode())  # 64 bytes: far below a pipe's buffer
    os.close(write_end)
    os.set_inheritable(read_end, True)
    return {KEY_FD_VAR: str(read_end)}


def take_key(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """The event key from the pipe hand_key made, the pipe closed: {KEY_VAR: key}, or {}."""
    fd = environ.pop(KEY_FD_VAR, "")
    if not fd.isdigit():
        return {}
    try:
        with os.fdopen(int(fd), "rb") as f:
            key = f.read(4096).decode()
    except OSError:
        return {}
    return {KEY_VAR: key} if key else {}


def run_setup(environ: MutableMapping[str, str] = os.environ) -> int:
    """Run the job's `setup:` lines (SETUP_VAR), when it has them, in a child shell as a
    run: job's would (`set -e`; its output in the job's log): the exit code, 0 when none.
    Call it after take_key: the child holds no event key, nor anything else only orch's
    runner reads (its run request), so the job's own setup cannot sign its outcome."""
    import subprocess

    setup = environ.pop(SETUP_VAR, None)
    if not setup:
        return 0
    drop = {KEY_VAR, KEY_FD_VAR, FILE_VAR, "ORCH_RUN"}  # ORCH_RUN: jobs/request.py ENV_VAR
    env = {k: v for k, v in environ.items() if k not in drop}
    sys.stdout.flush()
    sys.stderr.flush()
    code = subprocess.run(["bash", "-c", f"set -e\n{setup}"], env=env, close_fds=True).returncode
    return code if code >= 0 else 128 - code  # killed by a signal: as a shell reports it


def apply(values: Mapping[str, str], environ: MutableMapping[str, str] = os.environ) -> None:
    environ.update(values)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(f"usage: python -m {__package__}.secret_env -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    try:
        values = take()
    except (MissingFile, ValueError, OSError) as e:
        msg = f"orch: cannot read the job's secret values: {e}"
        print(msg, file=sys.stderr)
        # The same `result` event the runner prints, so orch shows why the job failed.
        print("::orch::" + json.dumps({"event": "result", "ok": False, "error": msg}), flush=True)
        return EXIT_NO_FILE
    name = os.environ.get(FILE_VAR)
    if name and not os.environ.get(PROCESS_JOB_VAR):  # a job orch started has no package in Ray
        # Out of the cluster's copy of the package too (GCS), where other jobs can read it.
        from .package_scrub import scrub

        problem = scrub(name)
        if problem:
            print(f"orch: the secret file is still in the cluster's copy of this job's "
                  f"working_dir (Ray's GCS), where other jobs can read it: {problem}",
                  file=sys.stderr)
    passed = hand_key(values)  # the event key by a pipe, out of every environment
    sys.stdout.flush()
    os.execvpe(argv[0], argv, {**child_env(values), **passed})
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
