"""git, run for orch and hardened: a repository's own config and hooks start no program, no
prompt waits for a terminal, and a command past its time is ended with all it started.

Every git orch runs goes through `run`: the fingerprint's look at a user's own repository
(fingerprint.py) and the reading and cloning of a job's `workdir: {url, ref}`
(service/git_workdir.py). `orch serve` runs no git in a folder a client named or sent.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Optional, Sequence

# Given with -c, these beat the repository's .git/config, where each could name a program
# for git to start in orch's process tree (docs/security.md).
HARDENED = ("core.fsmonitor=false", "core.hooksPath=/dev/null", "diff.external=",
            "protocol.ext.allow=never")
# A filter driver (filter.<name>.clean, named by .gitattributes) is switched off by name.
_FILTER_KEY = re.compile(r"^filter\.(.+)\.[a-z]+$")
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
# What says where the repository is or how to diff it, in orch's own environment: the
# folder orch names decides, not a variable set for some other git.
_DROP_ENV = {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
             "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE",
             "GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS",
             "GIT_CONFIG_COUNT"}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in _DROP_ENV and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))}
    # No /etc/gitconfig; a private repository fails rather than waits for a password; a
    # look at a repository writes no index (so runs no index hook).
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0")
    return env


def run(args: Sequence[str], *, timeout_s: float, cwd: Optional[Path] = None,
        config: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    """git `args` with the hardened config plus `config` ("key=value" each), stdin empty,
    output captured. Raises OSError (no git) or subprocess.TimeoutExpired, after ending
    git and every process it started (a remote helper holding a connection open)."""
    cmd = ["git", "--no-pager"]
    for c in (*HARDENED, *config):
        cmd += ["-c", c]
    proc = subprocess.Popen([*cmd, *args], cwd=cwd, env=_env(), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # its own group: ended as one
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        _end(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _end(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:  # already gone
        pass
    proc.wait()
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def filters_off(repo: Path, timeout_s: float) -> Optional[tuple[str, ...]]:
    """-c values that switch off each filter driver the repository's config defines (git
    would start its clean command to compare a changed file); None when one has a name
    that cannot be given on a command line, or the config cannot be read."""
    try:
        out = run(["config", "--name-only", "--get-regexp", r"^filter\."], cwd=repo,
                  timeout_s=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode not in (0, 1):  # 1: no such key
        return None
    names = set()
    for line in filter(None, (ln.strip() for ln in out.stdout.splitlines())):
        m = _FILTER_KEY.match(line)
        if not m or not _PLAIN_NAME.match(m.group(1)):
            return None
        names.add(m.group(1))
    return tuple(f"filter.{n}.{k}" + ("=false" if k == "required" else "=")
                 for n in sorted(names) for k in ("clean", "smudge", "process", "required"))
