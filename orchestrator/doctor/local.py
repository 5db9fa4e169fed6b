"""Doctor's checks of this machine: the home's file modes and orch's own local Ray."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Optional

from orchestrator.doctor.check import Check
from orchestrator.redact import KEY_FILE
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
