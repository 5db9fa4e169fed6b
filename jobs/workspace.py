"""A `run:` job's own folder: `python -m _orch_runner.workspace [--root R] --job ID
[--resume FOLDER] -- COMMAND...` copies the job's workdir (this process's folder, Ray's
unpacked copy of it) into a fresh folder, notes what it copied, and runs COMMAND there.

Ray unpacks a working_dir once per content and hands that one folder to every job whose
workdir is identical: a script that saved `snapshot.pt` there was found by the next job,
which resumed from it unasked. Here each job gets `ROOT/ID`, a folder no other job wrote
in; what the job writes there (its `ORCH_OUTPUT_DIR`) is its artifacts, which `orch
artifacts ID` lists (the copied inputs left out, unless the job changed them). A job starts
from an earlier one's files only when its file says so (checkpoint.resume_from: FOLDER).
Without a ROOT (checkpoint storage that is not a path on this node) the folder is a fresh
temporary one, and nothing is kept.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

OUTPUT_VAR = "ORCH_OUTPUT_DIR"  # the job's own folder, for a script that wants to say so
INPUTS = ".orch-inputs.json"  # beside the folder: what was copied in, not written by the job


def inputs_file(folder: Path) -> Path:
    """Where the list of a job folder's copied-in files lies: beside it, out of the job's
    reach through its own folder."""
    return folder.parent / f"{folder.name}{INPUTS}"


def _snapshot(folder: Path) -> dict[str, list]:
    """Each file under `folder`: its key and [size, mtime_ns]."""
    out: dict[str, list] = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            path = Path(dirpath) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            out[path.relative_to(folder).as_posix()] = [st.st_size, st.st_mtime_ns]
    return out


def copied_in(folder: Path) -> dict[str, list]:
    """The files the job was given rather than wrote: {key: [size, mtime_ns]}; {} when
    the list is missing or unreadable (every file is then the job's)."""
    try:
        data = json.loads(inputs_file(folder).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def written(folder: Path) -> list[str]:
    """The keys under `folder` the job wrote or changed: its artifacts."""
    given = copied_in(folder)
    return sorted(k for k, v in _snapshot(folder).items() if given.get(k) != v)


def prepare(source: Optional[Path], root: Optional[Path], job_id: str,
            resume: Optional[Path] = None, again: bool = False) -> Path:
    """A fresh folder for job `job_id` holding a copy of `source` (over a copy of `resume`,
    an earlier job's folder, when given); the list of what was copied beside it. `source`
    None: a job without a workdir, whose process starts in whatever folder Ray's driver
    has (a Ray node's own): nothing of it is copied. `again`: the same job run again by the
    preemption contract (docs/preemption.md), which goes on in its folder as it left it."""
    if root is None:
        folder = Path(tempfile.mkdtemp(prefix=f"orch-{job_id}-"))
    else:
        root.mkdir(parents=True, exist_ok=True)
        folder = root / job_id
        if again and folder.is_dir():  # its own files, its checkpoint among them
            return folder
        if folder.exists():  # the same job started again: never another job's files
            shutil.rmtree(folder)
        folder.mkdir(mode=0o700)
    if resume is not None and resume.is_dir():
        shutil.copytree(resume, folder, symlinks=True, dirs_exist_ok=True)
    if source is not None and source.resolve() != folder.resolve():
        # `.orch-job-<id>`: what made its package its own (providers/ray_jobs.py), not its file
        shutil.copytree(source, folder, symlinks=True, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".orch-job-*"))
    if root is not None:
        inputs_file(folder).write_text(json.dumps(_snapshot(folder)))
    return folder


# Thread settings a job's process may be given without its file saying so (Ray sets
# OMP_NUM_THREADS=1 for a process it starts with no CPUs of its own): said at the start.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TORCH_NUM_THREADS")


def thread_note(environ: dict) -> Optional[str]:
    """The line that says which thread limits the job runs under, None when none is set."""
    found = [f"{k}={environ[k]}" for k in THREAD_VARS if environ.get(k)]
    if not found:
        return None
    return (f"orch: the job runs with {', '.join(found)} (set for it, not by its file); "
            "give envs: {OMP_NUM_THREADS: N} to choose")


def run(command: list[str], folder: Optional[Path]) -> int:
    """Run `command`, its output passed through, its phases as events: `start` now,
    `first_output` when it first prints, `end` when it exits (service/run_metrics.phases).
    `folder` (not kept) is removed at the end."""
    import subprocess

    from . import events

    events.emit("start", kind="run")
    try:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as e:
        print(f"orch: cannot start {command[0]}: {e.strerror}", file=sys.stderr)
        return 127
    assert child.stdout is not None
    out = sys.stdout.buffer
    first = True
    try:
        while True:
            # What it wrote so far, as it comes (not line by line: a progress bar has none).
            chunk = os.read(child.stdout.fileno(), 65536)
            if not chunk:
                break
            if first:
                first = False
                events.emit("first_output")
            out.write(chunk)
            out.flush()
        code = child.wait()
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    events.emit("end", exit_code=code)
    return code if code >= 0 else 128 - code


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print(f"usage: python -m {__package__}.workspace [--root R] --job ID -- COMMAND...",
              file=sys.stderr)
        return 2
    cut = argv.index("--")
    parser = argparse.ArgumentParser(prog="workspace")
    parser.add_argument("--root")
    parser.add_argument("--job", required=True)
    parser.add_argument("--resume")
    parser.add_argument("--no-workdir", action="store_true", help="start in an empty folder")
    args = parser.parse_args(argv[:cut])
    command = argv[cut + 1:]
    if not command:
        print("orch: a run: job with no command", file=sys.stderr)
        return 2
    root = Path(args.root).expanduser() if args.root else None
    resume = Path(args.resume).expanduser() if args.resume else None
    try:
        # ORCH_RESTARTS (orchestrator.base.preemption.RESTARTS_VAR): the runs before this one.
        again = bool(os.environ.get("ORCH_RESTARTS"))
        folder = prepare(None if args.no_workdir else Path.cwd(), root, args.job, resume, again)
    except OSError as e:
        print(f"orch: cannot make job {args.job}'s folder under {root or 'a temporary folder'}: "
              f"{e}", file=sys.stderr)
        return 2
    os.chdir(folder)
    os.environ["PWD"] = str(folder)
    os.environ[OUTPUT_VAR] = str(folder)
    print(f"orch: job {args.job} runs in {folder}" + ("" if root else " (not kept)"), flush=True)
    note = thread_note(dict(os.environ))
    if note:
        print(note, flush=True)
    return run(command, None if root else folder)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
