"""Doctor's checks of this machine: the home's file modes, local Ray, what jobs here can read."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

from orchestrator.base.redact import KEY_FILE
from orchestrator.service.doctor.check import Check
from orchestrator.settings import Settings

STORE = "orch.db"


def job_logs(home: Path) -> list[Path]:
    logs = home / "logs"
    return sorted(logs.glob("orch-*.log")) if logs.is_dir() else []


def _mode(p: Path) -> Optional[int]:
    try:
        return stat.S_IMODE(p.stat().st_mode)
    except OSError:
        return None


def loose(p: Path) -> Optional[str]:
    """`p is MODE` when group or others have any access; None when owner-only or absent."""
    mode = _mode(p)
    return f"{p} is {mode:04o}" if mode is not None and mode & 0o077 else None


def modes_check(home: Path) -> Check:
    """The store, its WAL, the secret key and the job logs readable by their owner only;
    the home 0700."""
    if not home.exists():
        return Check("file modes", True, f"{home}: not created yet")
    dirs = [p for p in (home, home / "logs") if loose(p)]
    files = [p for p in (home / STORE, home / f"{STORE}-wal", home / f"{STORE}-shm",
                         home / KEY_FILE, *job_logs(home)) if p.exists()]
    loose_files = [p for p in files if loose(p)]
    if not dirs and not loose_files:
        return Check("file modes", True, f"{home} (0700) and its {len(files)} store and log "
                                         "files (0600): owner only")
    found = [why for p in dirs + loose_files if (why := loose(p))]
    fix = [f"chmod 700 {' '.join(map(str, dirs))}"] if dirs else []
    if loose_files:
        many = len(loose_files) > 4
        fix.append("chmod 600 " + (f"{home / STORE}* {home / 'logs'}/*.log" if many
                                   else " ".join(map(str, loose_files))))
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return Check("file modes", False, "others can read: " + "; ".join(found[:3]) + more,
                 " && ".join(fix))


def local_ray_check(settings: Settings) -> Check:
    """Whether orch's own local Ray instance runs (read from its state file, never started)."""
    from providers.local_ray import LocalRay

    ray = LocalRay(settings.home)
    token = loose(ray.token_file)
    fix_token = f"chmod 600 {ray.token_file}" if token else None
    state = ray.status()
    if state:
        detail = (f"running at {state['dashboard_url']}: {state['cpus']} CPUs, "
                  f"{state['processes']} processes")
    elif ray.state_file.exists():
        detail = ("not running (its last instance ended without `orch local down`; the next "
                  "local job starts a new one)")
    else:
        detail = "not running (the next local job starts it, or `orch local up`)"
    if token:
        return Check("local Ray", False, f"{detail}; its token file {token}, readable by others",
                     fix_token)
    return Check("local Ray", True, detail)


# -- jobs and the home: what the user jobs run as can read ---------------------------------

# What of a home no job may read where it serves a team: the store (and its WAL), the key its
# secrets' digests are made with, and every user's uploads, git workdirs and job logs.
GUARDED = (STORE, f"{STORE}-wal", f"{STORE}-shm", KEY_FILE, "uploads", "workdirs", "logs")
_R, _X = 4, 1  # one class's read and search (execute) bits
_FIX = ("run `orch serve` as its own user, with its home 0700, and Ray's head and workers as "
        "another, never root (infra/README.md, \"Two users\"); a server in local-only mode runs "
        "its Ray as itself, so give it a `ray_address`")


@dataclass(frozen=True)
class Perms:
    """A path's owner, group and permission bits, as stat(2) gives them."""
    uid: int
    gid: int
    mode: int
    is_dir: bool = False


@dataclass(frozen=True)
class JobUser:
    """A user Ray's processes (so the jobs) run as on this machine, with its groups."""
    uid: int
    name: str
    gids: frozenset[int] = frozenset()

    def __str__(self) -> str:
        return f"{self.name} (uid {self.uid})"


def allowed(user: JobUser, p: Perms, bits: int) -> bool:
    """Whether `user` holds all of `bits` on `p`, as the kernel decides: the owner's bits for
    its owner, the group's for a member, the others' for everyone else; root holds them all
    (it reads every file, whatever its mode)."""
    if user.uid == 0:
        return True
    shift = 6 if user.uid == p.uid else 3 if p.gid in user.gids else 0
    return (p.mode >> shift) & bits == bits


def readable_by(user: JobUser, home: Perms, entries: Mapping[str, Perms]) -> list[str]:
    """What of the home `user` can read: its file list (read and search on it), and each
    entry it can open (search on the home, then read on a file, read and search on a
    folder). The home's parents are taken as open: most are."""
    if not allowed(user, home, _X):
        return []
    found = ["its file list"] if allowed(user, home, _R) else []
    return found + [name for name, p in entries.items()
                    if allowed(user, p, _R | _X if p.is_dir else _R)]


def job_isolation(home: Path, users: Sequence[JobUser], stats: Mapping[str, Perms],
                  serving: Optional[bool]) -> Check:
    """Whether the users jobs run as here (`users`: the owners of Ray's processes) can read
    the home's store, secret key, uploads and logs. `stats`: the home (key ".") and those of
    its GUARDED entries that exist; `serving`: whether the store holds API tokens (an `orch
    serve` home), None when it could not be read."""
    name = "job isolation"
    if not users:
        return Check(name, True, "cannot tell: none of the Rays this home's jobs run on has a "
                                 "process on this machine (jobs run as the user of Ray's)")
    home_perms = stats.get(".")
    if home_perms is None:
        return Check(name, True, f"{home}: not created yet")
    entries = {k: v for k, v in stats.items() if k != "."}
    exposed = {u: found for u in users if (found := readable_by(u, home_perms, entries))}
    if not exposed:
        return Check(name, True, f"Ray's processes here run as {', '.join(map(str, users))}, "
                                 f"who cannot read {home}'s store, key, uploads or logs")
    said = "; ".join(f"jobs run as {u}, who " + ("reads every file whatever its mode, so "
                                                  if u.uid == 0 else "")
                     + f"can read {home}: {', '.join(found)}" for u, found in exposed.items())
    if serving is False:
        return Check(name, True, f"{said}; as expected: this home serves no team (its store has "
                                 "no API tokens), and in local-only mode your jobs run as you")
    if serving is None:
        return Check(name, None, f"{said}; whether this home serves a team is unknown: its store "
                                 "could not be read for API tokens (see the store check)")
    return Check(name, False, f"{said}; this home serves a team (API tokens in its store), so "
                              "any job can read the store, its key and other users' files", _FIX)


def ray_processes(settings: Settings) -> list:
    """The processes of the Rays this home's jobs run on, on this machine: its own local
    Ray's (their arguments name its temp folder) and, with a cluster (`ray_address`), every
    raylet (its binary, and a starting worker's --raylet-name, end in /raylet) and worker
    (titled `ray::IDLE`, `ray::<actor>`) here, as this machine may be one of its nodes.
    Another home's local Ray runs other jobs than this home's: it is left out."""
    from providers.local_ray import LocalRay, processes_matching

    found = []
    try:
        temp = json.loads(LocalRay(settings.home).state_file.read_text())["temp_dir"]
    except (OSError, ValueError, KeyError, TypeError):  # never started, or a torn file
        temp = None
    if isinstance(temp, str) and temp:
        found += processes_matching(temp)
    if settings.ray_address:
        found += processes_matching("ray::", suffix="/raylet")
    return found


def _groups(proc) -> set[int]:
    """A process's effective group and supplementary groups (Linux's /proc; elsewhere the
    user database's)."""
    gids = {proc.gids().effective}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("Groups:"):
                return gids | {int(g) for g in line.split()[1:]}
    with contextlib.suppress(KeyError):
        pw = pwd.getpwuid(proc.uids().effective)
        gids |= set(os.getgrouplist(pw.pw_name, pw.pw_gid))
    return gids


def job_users(processes: Iterable) -> list[JobUser]:
    """The users `processes` (psutil's) run as, each with its groups."""
    import psutil

    by_uid: dict[int, set[int]] = {}
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            by_uid.setdefault(proc.uids().effective, set()).update(_groups(proc))
    users = []
    for uid, gids in sorted(by_uid.items()):
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = f"uid {uid}"
        users.append(JobUser(uid, user, frozenset(gids)))
    return users


def home_stats(home: Path) -> dict[str, Perms]:
    """The home (".") and its GUARDED entries that exist, with their owners and modes."""
    stats = {}
    for name in (".", *GUARDED):
        try:
            st = (home / name).stat()
        except OSError:
            continue
        stats[name] = Perms(st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode), stat.S_ISDIR(st.st_mode))
    return stats


def serves_team(settings: Settings) -> Optional[bool]:
    """Whether the store holds API tokens (`orch serve`'s); None when it cannot be read.
    Creates no store."""
    from orchestrator.store import open_store, store_exists

    if not store_exists(settings):
        return False
    try:
        store = open_store(settings)
    except Exception:  # a damaged or locked store: the store check says why
        return None
    try:
        return bool(store.tokens())
    except Exception:
        return None
    finally:
        store.close()


def job_isolation_check(settings: Settings) -> Check:
    """job_isolation on this machine: Ray's processes here, the home's files, its store.
    Starts nothing, and reads of the store only whether it holds tokens."""
    users = job_users(ray_processes(settings))
    serving = serves_team(settings) if users else False
    return job_isolation(settings.home, users, home_stats(settings.home), serving)


def serve_local_check(settings: Settings, serving: Optional[bool]) -> Check:
    """Which of the two ways `orch serve` treats a client's job bound for this machine (the
    `local` target): refused (the default), or run as the server's own user for a team its
    admin trusts with the server's home (`serve_local_trusted`). `serving`: whether the
    store holds API tokens (serves_team)."""
    name = "local target"
    if settings.serve_isolation == "per-user":
        import sys

        root = settings.serve_isolation_root
        said = ("per-user isolation: each client user's jobs run in a Ray instance of their "
                f"own, as an OS user of their own (homes under {root})")
        python = Path(settings.serve_isolation_python or sys.executable).resolve()
        closed = next((p for p in (python, *python.parents)
                       if p.exists() and not os.stat(p).st_mode & 0o001), None)
        if closed is not None:
            return Check(name, False, f"{said}; but they cannot run {python}: {closed} is "
                         "closed to other users", "install orch where every user can read "
                         "it (a venv in /opt/orch), or set serve_isolation_python")
        return Check(name, os.geteuid() == 0, said,
                     None if os.geteuid() == 0 else "run orch serve as root: it makes the "
                     "users (orch-u-NAME) and starts their Ray as them")
    if not settings.serve_local_trusted:
        if settings.effective_mode == "local":
            return Check(name, True, "refused to clients: this home is in local-only mode, so "
                         "`orch serve` here takes no client's job (serve_local_trusted = false)",
                         "give it a `ray_address` or `clouds`, or set serve_local_trusted = "
                         "true for a team you trust with this home" if serving else None)
        return Check(name, True, "refused to clients: `orch serve` sends their jobs to the "
                                 "cluster or a cloud, never to this machine "
                                 "(serve_local_trusted = false)")
    said = ("trusted team: `orch serve` runs clients' jobs on this machine as its own user, "
            "so each job can read this home's store, key, uploads and every user's logs "
            "(serve_local_trusted = true)")
    return Check(name, True, said, "set serve_local_trusted = false unless every user of "
                 "this server may read all of that" if serving else None)
