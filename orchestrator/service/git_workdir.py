"""A job's `workdir: {url, ref}` on owned hardware: the repository's commit read before the
job is recorded, and a checkout of it made for the launch (a cloud VM clones it itself, as
SkyPilot does). On `orch serve`, a client's URL must name an allowed scheme and host
(serve_git_schemes, serve_git_hosts) before git runs, and git has serve_git_timeout_s."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import NamedTuple, Optional
from urllib.parse import urlsplit

from orchestrator.base.errors import InputError
from orchestrator.service import git_run

_SHA = re.compile(r"^[0-9a-f]{40}$")
# scp-like ssh: [user@]host:path, the host before any slash (git's own rule).
_SCP = re.compile(r"^(?:[^@/]*@)?(\[[^\]/]*\]|[^:/\[\]]+):(?!//)")
_HELPER = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")  # <transport>::<address>: a remote helper
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*$")
_DEFAULT_PORT = {"https": 443, "http": 80, "ssh": 22, "git": 9418}
_USE_REMOTE = ("give workdir.url as a remote URL this server allows (e.g. https://github.com/"
               "org/repo.git), or send the workdir's files with the job (the CLI uploads a "
               "folder workdir)")


class Reach(NamedTuple):
    """Where git may go for a job's workdir URL, and how long one git command may take."""
    schemes: Optional[frozenset[str]]  # None: any URL, a path too (a user's own orch)
    hosts: tuple[str, ...]  # host or host:port; "*": any
    timeout_s: float

    @property
    def config(self) -> tuple[str, ...]:
        """git config for URL work: for a server's client, only the allowed transports, and
        no redirect to a host the list does not name."""
        if self.schemes is None:
            return ()
        allowed = sorted(s for s in self.schemes if _SCHEME.match(s) and s not in ("file", "ext"))
        return ("protocol.allow=never", *(f"protocol.{s}.allow=always" for s in allowed),
                "protocol.file.allow=never", "http.followRedirects=false")


NO_LIMITS = Reach(None, (), 120.0)


def serves_clients(settings) -> bool:
    """Whether this process is `orch serve` (cli/serve.py marks its settings): it acts for
    clients, so it runs no git in a folder one named or sent, and checks their git URLs."""
    return bool(getattr(settings, "_serves_clients", False))


def reach(settings, *, server: Optional[bool] = None) -> Reach:
    """The limits for git URLs under `settings`: a server's for its clients (`server` None:
    whether this process serves clients), else none but the old 120 s."""
    if not (serves_clients(settings) if server is None else server):
        return NO_LIMITS
    return Reach(frozenset(settings.serve_git_schemes), tuple(settings.serve_git_hosts),
                 float(settings.serve_git_timeout_s))


def url_problem(url: str, where: Reach) -> Optional[str]:
    """Why `url` may not be used under `where`; None when it may (decided before git runs)."""
    if where.schemes is None:
        return None
    if any(c.isspace() or ord(c) < 32 or c == "\\" for c in url):
        return "it holds spaces, control characters or backslashes"
    if _HELPER.match(url):
        return "a <transport>::<address> URL runs a program on the server"
    if "://" in url:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as e:
            return f"not a URL git can read ({e})"
        scheme, host = parts.scheme.lower(), (parts.hostname or "").rstrip(".")
    else:
        m = _SCP.match(url)
        if not m:
            return "a path on the server is not a workdir a client may name"
        scheme, host, port = "ssh", m.group(1).strip("[]").lower().rstrip("."), None
    if scheme == "file":
        return "a file:// URL reads the server's own disk"
    if scheme not in where.schemes:
        return (f"{scheme}:// is not allowed here (this server allows "
                f"{', '.join(sorted(where.schemes)) or 'none'})")
    if not host or host.startswith("-"):
        return "it names no host"
    if not host_allowed(host, port, _DEFAULT_PORT.get(scheme), where.hosts):
        shown = host if port is None else f"{host}:{port}"
        return f"the host {shown} is not one this server's git may reach"
    return None


def host_allowed(host: str, port: Optional[int], default: Optional[int],
                 hosts: tuple[str, ...]) -> bool:
    """Whether `host` (lower case) at `port` (None: the scheme's `default`) is in `hosts`:
    "*", "host" (at the scheme's own port) or "host:port"; names compare in any case."""
    port = port or default
    for entry in hosts:
        entry = entry.strip().lower()
        if entry == "*":
            return True
        m = re.match(r"^\[([^\]]+)\](?::(\d+))?$", entry) or re.match(r"^([^:]+)(?::(\d+))?$", entry)
        if m and m.group(1).rstrip(".") == host and port == (int(m.group(2)) if m.group(2) else default):
            return True
    return False


def check_url(url: str, where: Reach, spec=None) -> None:
    """InputError when a client may not use `url`: located in the job file at workdir.url
    when the `spec` it came from is given."""
    problem = url_problem(url, where)
    if problem and spec is not None:
        raise spec.error("workdir.url", problem, _USE_REMOTE)
    if problem:
        raise InputError(f"workdir.url: {problem}", _USE_REMOTE)


def _git(url: str, what: str, where: Reach, *args: str, cwd: Optional[Path] = None,
         folder: Optional[Path] = None) -> str:
    """git's output; InputError saying what could not be done with `url`, and why (for a
    server's client, without the server's `folder`)."""
    try:
        out = git_run.run(args, cwd=cwd, timeout_s=where.timeout_s, config=where.config)
    except subprocess.TimeoutExpired:
        raise InputError(f"workdir: cannot {what} {url}: no answer within "
                         f"{where.timeout_s:g} s", "check that the repository answers") from None
    except OSError as e:
        raise InputError(f"workdir: cannot {what} {url}: {e.strerror or e}",
                         "check that git is installed") from None
    if out.returncode != 0:
        said = (out.stderr.strip().splitlines() or ["no output"])[-1]
        if where.schemes is not None and folder is not None:
            said = said.replace(str(folder), "<checkout>")
        raise InputError(f"workdir: cannot {what} {url}: git says: {said}",
                         "check workdir.url and workdir.ref, and that this machine can read "
                         "the repository (for a private one, its git credentials)")
    return out.stdout


def pin(spec, where: Reach = NO_LIMITS) -> None:
    """A job's git workdir pinned to the commit its ref names now (a branch may move before
    the job runs, or between a cloud job's recoveries); nothing for any other workdir.
    Under a server's `where`, a URL it does not allow is refused before git runs."""
    git = spec.git_workdir
    if git is None:
        return
    check_url(git.url, where, spec)
    if git.commit is None:
        git.commit = resolve(git.url, git.ref) if where is NO_LIMITS else resolve(git.url, git.ref, where)


def resolve(url: str, ref: Optional[str], where: Reach = NO_LIMITS) -> str:
    """The commit `ref` (a branch, a tag, a commit; None: the default branch) names now."""
    if ref is not None and _SHA.match(ref):
        return ref
    out = _git(url, "read", where, "ls-remote", "--", url, ref or "HEAD")
    lines = [ln.split() for ln in out.splitlines() if ln.strip()]
    for want in ([f"refs/heads/{ref}", f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}", ref]
                 if ref else ["HEAD"]):
        for found in lines:
            if len(found) == 2 and found[1] == want:
                return found[0]
    raise InputError(f"workdir: {url} has no branch or tag {ref!r}",
                     "give an existing branch, tag or full commit hash as workdir.ref")


def checkout_folder(home: Path, job_id: str) -> Path:
    """Where a job's checkout is made under ORCH_HOME; it is removed when the job ends."""
    return home / "workdirs" / job_id


def checkout(spec, dest: Path, where: Reach = NO_LIMITS) -> Path:
    """`dest` holding the job's git workdir at its pinned commit (made once; a later launch
    of the same job reuses it)."""
    pin(spec, where)
    git = spec.git_workdir
    assert git is not None and git.commit is not None  # a git workdir, pinned just now
    done = dest / ".orch-commit"
    if done.is_file() and done.read_text().strip() == git.commit:
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        # --template=: no hooks copied in; the hardened config runs none anyway.
        _git(git.url, "clone", where, "clone", "--quiet", "--no-checkout", "--template=",
             "--", git.url, str(dest), folder=dest)
        _git(git.url, f"check out {git.commit[:12]} of", where, "checkout", "--quiet",
             "--detach", git.commit, cwd=dest, folder=dest)
    except InputError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    done.write_text(git.commit + "\n")
    return dest
