"""A local Ray instance of one OS user's own, for the per-user isolation mode (issue 46,
part 3; providers/isolated.py picks the instance of a job's owner).

Its processes run as that user (`orch-u-<name>`, which orch makes as root, or the user the
settings name), with its own token, its own temp dir and home under `serve_isolation_root`
(0700, that user's), on the GPUs orch gave it (`CUDA_VISIBLE_DEVICES`, `--num-gpus`). What
orch itself keeps of it (its state, lock, start log and the token's first copy) stays under
ORCH_HOME, which that user cannot open: a job there can neither read orch's files nor tell
orch which processes to stop.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from orchestrator.base.errors import BackendError
from providers.local_ray import _MAX_TEMP_DIR_LEN, LocalRay
from providers.runner_package import link_in

PREFIX = "orch-u-"


@dataclass(frozen=True)
class OsUser:
    name: str
    uid: int
    gid: int
    home: Path  # orch's folder for this user's Ray and jobs: serve_isolation_root/<name>


def os_user_name(owner: str, named: dict[str, str]) -> str:
    """The OS user `owner`'s jobs run as: the one the settings name, else orch-u-<owner>
    (lower case, other characters as '-', with a hash of the name where it had to change)."""
    if owner in named:
        return named[owner]
    clean = re.sub(r"[^a-z0-9_-]", "-", owner.lower())[:16]
    if clean != owner:
        clean = f"{clean}-{hashlib.sha256(owner.encode()).hexdigest()[:6]}"
    return PREFIX + clean


def ensure_user(name: str, root: Path, create: bool = True) -> OsUser:
    """The OS user `name` (made when missing and `create`, as root: a system user with no
    login shell and no password) and its folder under `root`, 0700, its own."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        if not create or os.geteuid() != 0 or shutil.which("useradd") is None:
            raise BackendError(
                f"the OS user {name} that the per-user isolation mode runs these jobs as does "
                "not exist, and orch cannot make it (it needs root and useradd)",
                f"make it (`useradd --system --user-group {name}`), or run orch serve as "
                "root, or name an existing user in serve_job_users") from None
        done = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                               "--home-dir", str(root / name), "--shell", "/usr/sbin/nologin",
                               name], capture_output=True, text=True, timeout=60)
        if done.returncode != 0 and "already exists" not in done.stderr:
            raise BackendError(f"could not make the OS user {name}: {done.stderr.strip()}",
                               "make it by hand, or name an existing user in serve_job_users") from None
        entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise BackendError(f"serve_job_users names root ({name}) for a client's jobs",
                           "name a user of their own, or none (orch makes orch-u-<name>)")
    root.mkdir(parents=True, exist_ok=True, mode=0o755)
    home = root / name
    _own_dir(home, entry.pw_uid, entry.pw_gid)
    return OsUser(name, entry.pw_uid, entry.pw_gid, home)


def _own_dir(path: Path, uid: int, gid: int) -> None:
    """`path` a real folder (never a link someone put there), 0700, owned by uid."""
    path.mkdir(exist_ok=True, mode=0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid not in (0, uid):
        raise BackendError(f"{path} is not a folder orch or its user made",
                           "remove it; orch makes it again")
    os.chown(path, uid, gid, follow_symlinks=False)
    os.chmod(path, 0o700)


class UserRay(LocalRay):
    """A LocalRay whose processes run as `user`, on the GPUs `gpu_ids` (none: no GPU)."""

    def __init__(self, control_home: Path, user: OsUser, gpu_ids: Sequence[int] = (),
                 python: Optional[str] = None, **kwargs):
        super().__init__(control_home, **kwargs)
        self.python = python or sys.executable
        self.user = user
        self.gpu_ids = tuple(gpu_ids)
        self.user_token = user.home / ".ray-token"

    def temp_dir(self) -> Path:
        preferred = self.user.home / "ray"
        if len(str(preferred)) <= _MAX_TEMP_DIR_LEN:
            return preferred
        tag = hashlib.sha256(str(self.user.home).encode()).hexdigest()[:10]
        return Path("/tmp") / f"orch-{self.user.uid}-{tag}"

    def _prepare(self, temp_dir: Path) -> None:
        _own_dir(temp_dir, self.user.uid, self.user.gid)
        # Ray's processes read the token from a file of their user's: a copy of orch's.
        self.user_token.unlink(missing_ok=True)
        fd = os.open(self.user_token, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.token() or "")
        self._give(self.user_token)

    def _python(self) -> str:
        return self.python

    def _ray_command(self) -> list:
        return [self.python, "-m", "ray.scripts.scripts"]

    def _spawn_as(self) -> dict:
        return {"user": self.user.uid, "group": self.user.gid, "extra_groups": [],
                "umask": 0o077}

    def _own_env(self) -> dict:
        home = str(self.user.home)
        return {"HOME": home, "USER": self.user.name, "LOGNAME": self.user.name,
                "TMPDIR": home, "RAY_AUTH_TOKEN_PATH": str(self.user_token),
                "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in self.gpu_ids)}

    def _gpu_args(self) -> list:
        return [f"--num-gpus={len(self.gpu_ids)}"]

    def _mine(self, proc) -> bool:
        try:
            return proc.uids().real == self.user.uid
        except Exception:  # noqa: BLE001  (gone, or not ours to read: not ours to stop)
            return False

    def _give(self, path: Path) -> None:
        os.chown(path, self.user.uid, self.user.gid, follow_symlinks=False)

    def runner_path(self) -> Path:
        """The runner's link in a root-owned folder beside the users' (readable by all,
        writable by root alone): every user's Ray imports it from there."""
        folder = link_in(self.user.home.parent / ".runner")
        os.chmod(folder, 0o755)
        return folder
