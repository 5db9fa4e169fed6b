"""A job's fingerprint: what runs, the code it runs, and its config minus swept keys.

Two runs with the same fingerprint are "the same job" for classification and history.
A folder's code is its git commit (plus its uncommitted changes) on a user's own orch, and a
hash of its files' content on `orch serve`, which runs no git in a folder a client named or
sent: a repository's own config could make git start any program (docs/security.md).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from pathlib import Path
from typing import Optional

from orchestrator.spec import JobSpec

SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules", ".mypy_cache",
             ".pytest_cache", ".ipynb_checkpoints"}
_BIG_FILE = 16 * 1024 * 1024  # a file over it counts by its size and mtime
_READ_TOTAL = 256 * 1024 * 1024  # bytes read in all; the files after it count as big ones
_CHUNK = 1024 * 1024
# A link is never followed; a FIFO or a device, swapped in after lstat, neither blocks the
# open nor is read (fstat says what was opened).
_OPEN = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
         | getattr(os, "O_CLOEXEC", 0))
_GIT_TIMEOUT_S = 10


def _git(workdir: Path, config: tuple[str, ...], *args: str) -> Optional[str]:
    from orchestrator.service import git_run

    try:
        out = git_run.run(["-C", str(workdir), *args], timeout_s=_GIT_TIMEOUT_S, config=config)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def _read(path: str, st: os.stat_result) -> Optional[bytes]:
    """The bytes of the regular file `st` describes, at most its size then; None when the
    file at `path` is no longer that one, or cannot be read."""
    try:
        fd = os.open(path, _OPEN)
    except OSError:
        return None
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return None
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, min(left, _CHUNK))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def content_hash(workdir: Path, read_total: int = _READ_TOTAL) -> str:
    """A hash of every regular file's path and bytes (large files, and every file once
    `read_total` bytes are read: size and mtime), and of every link's path and target text,
    in path order. Links are not followed; FIFOs, sockets and devices are skipped."""
    h = hashlib.sha256()
    left = read_total
    for root, dirs, files in os.walk(workdir):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]  # listed, not walked
        dirs[:] = sorted(d for d in dirs if d not in links)
        for name in sorted(files + links):
            path = os.path.join(root, name)
            rel = Path(path).relative_to(workdir).as_posix().encode(errors="surrogateescape")
            try:
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    h.update(rel + b"\0->" + os.fsencode(os.readlink(path)))
                    continue
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            if st.st_size > min(_BIG_FILE, left):
                h.update(rel + b"\0" + f"{st.st_size}:{int(st.st_mtime)}".encode())
                continue
            data = _read(path, st)
            if data is not None:
                left -= len(data)
                h.update(rel + b"\0" + data)
    return h.hexdigest()[:16]


def code_identity(workdir: Optional[Path], *, content_only: bool = False) -> tuple[str, bool]:
    """(identity, dirty): the git commit (plus a hash of uncommitted changes), or a content
    hash; `content_only`: the content hash, git never run (a server's client's folder)."""
    if workdir is None:
        return "none", False
    if not content_only:
        found = _git_identity(workdir)
        if found is not None:
            return found
    return f"content:{content_hash(workdir)}", False


def _git_identity(workdir: Path) -> Optional[tuple[str, bool]]:
    """The identity from git, hardened (service/git_run.py); None outside a repository, or
    in one whose config git cannot be kept from running a program for."""
    from orchestrator.service import git_run

    head = _git(workdir, (), "rev-parse", "--verify", "-q", "HEAD")
    if not head:
        return None
    config = git_run.filters_off(workdir, _GIT_TIMEOUT_S)
    if config is None:
        return None
    status = _git(workdir, config, "status", "--porcelain", "--untracked-files=normal",
                  "--ignore-submodules=all", ".") or ""
    if status.strip():
        diff = (_git(workdir, config, "diff", "--no-ext-diff", "--no-textconv",
                     "--ignore-submodules=all", "HEAD", "--", ".") or "") + status
        return f"git:{head.strip()}+{hashlib.sha256(diff.encode()).hexdigest()[:12]}", True
    return f"git:{head.strip()}", False


def fingerprint(spec: JobSpec, *, content_only: bool = False) -> tuple[str, bool]:
    """(fingerprint, code_dirty) for a loaded spec; `content_only`: see code_identity."""
    git = spec.git_workdir
    identity, dirty = ((f"git:{git.commit or git.url + '@' + str(git.ref)}", False) if git
                       else code_identity(spec.workdir_path(), content_only=content_only))
    if spec.train is not None:
        what = {"job": spec.train.job, "entrypoint": spec.train.entrypoint}
        swept = set(spec.train.sweep)
        config = {k: v for k, v in spec.train.config.items() if k not in swept}
    else:
        what, config = {"run": spec.run}, {}
    doc = {"what": what, "setup": spec.setup, "code": identity, "config": config}
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:16], dirty
