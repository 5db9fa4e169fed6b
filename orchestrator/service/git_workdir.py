"""A job's `workdir: {url, ref}` on owned hardware: the repository's commit read before the
job is recorded, and a checkout of it made for the launch (a cloud VM clones it itself, as
SkyPilot does)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Optional

from orchestrator.errors import InputError

_SHA = re.compile(r"^[0-9a-f]{40}$")
_TIMEOUT_S = 120


def _git(url: str, what: str, *args: str, cwd: Optional[Path] = None) -> str:
    """git's output; InputError saying what could not be done with `url`, and why."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")  # a private repository fails, never waits
    try:
        out = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                             timeout=_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InputError(f"workdir: cannot {what} {url}: {e}",
                         "check that git is installed and the repository answers") from None
    if out.returncode != 0:
        said = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"workdir: cannot {what} {url}: git says: {said}",
                         "check workdir.url and workdir.ref, and that this machine can read "
                         "the repository (for a private one, its git credentials)")
    return out.stdout


def pin(spec) -> None:
    """A job's git workdir pinned to the commit its ref names now (a branch may move before
    the job runs, or between a cloud job's recoveries); nothing for any other workdir."""
    git = spec.git_workdir
    if git is not None and git.commit is None:
        git.commit = resolve(git.url, git.ref)


def resolve(url: str, ref: Optional[str]) -> str:
    """The commit `ref` (a branch, a tag, a commit; None: the default branch) names now."""
    if ref is not None and _SHA.match(ref):
        return ref
    out = _git(url, "read", "ls-remote", "--", url, ref or "HEAD")
    lines = [ln.split() for ln in out.splitlines() if ln.strip()]
    for want in ([f"refs/heads/{ref}", f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}", ref]
                 if ref else ["HEAD"]):
        for sha, name in lines:
            if name == want:
                return sha
    raise InputError(f"workdir: {url} has no branch or tag {ref!r}",
                     "give an existing branch, tag or full commit hash as workdir.ref")


def checkout_folder(home: Path, job_id: str) -> Path:
    """Where a job's checkout is made under ORCH_HOME; it is removed when the job ends."""
    return home / "workdirs" / job_id


def checkout(spec, dest: Path) -> Path:
    """`dest` holding the job's git workdir at its pinned commit (made once; a later launch
    of the same job reuses it)."""
    pin(spec)
    git = spec.git_workdir
    assert git is not None and git.commit is not None  # a git workdir, pinned just now
    done = dest / ".orch-commit"
    if done.is_file() and done.read_text().strip() == git.commit:
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        _git(git.url, "clone", "clone", "--quiet", "--no-checkout", "--", git.url, str(dest))
        _git(git.url, f"check out {git.commit[:12]} of", "checkout", "--quiet", "--detach",
             git.commit, cwd=dest)
    except InputError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    done.write_text(git.commit + "\n")
    return dest
