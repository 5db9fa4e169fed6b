"""Small git repositories and packed workdirs that several test files make."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """git in `repo` (the machine's own git, not orch's hardened one); its output."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL).stdout.strip()


def committed_repo(path: Path, files: dict[str, str]) -> Path:
    """A new repository at `path` on branch main with `files` in one commit, "v1"."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "t")
    for name, text in files.items():
        (path / name).write_text(text)
    git(path, "add", ".")
    git(path, "commit", "-q", "-m", "v1")
    return path


def packed(folder: Path, max_bytes: int) -> bytes:
    """`folder` as the client sends it (orchestrator.service.upload.pack): the archive's bytes."""
    from orchestrator.service.upload import pack

    archive = pack(folder, max_bytes)
    try:
        return archive.file.read()
    finally:
        archive.close()
