"""A job's fingerprint: what runs, the code it runs, and its config minus swept keys.

Two runs with the same fingerprint are "the same job" for classification and history.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Optional

from orchestrator.spec import JobSpec

_SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules", ".mypy_cache",
              ".pytest_cache", ".ipynb_checkpoints"}
_BIG_FILE = 16 * 1024 * 1024


def _git(workdir: Path, *args: str) -> Optional[str]:
    try:
        out = subprocess.run(["git", "-C", str(workdir), *args], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def content_hash(workdir: Path) -> str:
    """A hash of every file's path and bytes (large files: size and mtime), in path order."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(workdir):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in sorted(files):
            path = Path(root, name)
            rel = path.relative_to(workdir).as_posix()
            try:
                st = path.stat()
                h.update(rel.encode() + b"\0")
                if st.st_size > _BIG_FILE:
                    h.update(f"{st.st_size}:{int(st.st_mtime)}".encode())
                else:
                    h.update(path.read_bytes())
            except OSError:
                continue
    return h.hexdigest()[:16]


def code_identity(workdir: Optional[Path]) -> tuple[str, bool]:
    """(identity, dirty): the git commit (plus a hash of uncommitted changes), or a content hash."""
    if workdir is None:
        return "none", False
    head = _git(workdir, "rev-parse", "HEAD")
    if head:
        status = _git(workdir, "status", "--porcelain", "--untracked-files=normal", ".") or ""
        if status.strip():
            diff = (_git(workdir, "diff", "HEAD", "--", ".") or "") + status
            return f"git:{head.strip()}+{hashlib.sha256(diff.encode()).hexdigest()[:12]}", True
        return f"git:{head.strip()}", False
    return f"content:{content_hash(workdir)}", False


def fingerprint(spec: JobSpec) -> tuple[str, bool]:
    """(fingerprint, code_dirty) for a loaded spec."""
    git = spec.git_workdir
    identity, dirty = ((f"git:{git.commit or git.url + '@' + str(git.ref)}", False) if git
                       else code_identity(spec.workdir_path()))
    if spec.train is not None:
        what = {"job": spec.train.job, "entrypoint": spec.train.entrypoint}
        swept = set(spec.train.sweep)
        config = {k: v for k, v in spec.train.config.items() if k not in swept}
    else:
        what, config = {"run": spec.run}, {}
    doc = {"what": what, "setup": spec.setup, "code": identity, "config": config}
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:16], dirty
