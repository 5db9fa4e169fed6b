"""Local jobs started without a Ray job: the runner started by orch itself, kept by a keeper.

Why: a Ray job starts a new process for its supervisor (Ray imported anew, its runtime env
set up), 0.8-1.1 s of each job on a 2-core machine before orch's runner starts, and as long
again to see its end; a local `train:` job's runner imports neither Ray nor torch (the
runner host runs the job), so that process was most of the job's fixed cost. Here orch
starts the runner through jobs/keeper.py: the job's state, log, exit code and cancel are
files in the job's folder in the local Ray's session folder (0700), what Ray's Jobs API
kept for it: its raw output stays there, beside Ray's own job-driver logs, and a job of
an earlier session is unknown here, as Ray's jobs are to a new Ray.

    FOLDER/job.json  what Ray kept of the job (its metadata, entrypoint, when it was started)
    FOLDER/workdir/  the job's working folder (its workdir's package unpacked, as Ray does)
    FOLDER/pid       the keeper's pid and start time     FOLDER/log   the job's output
    FOLDER/exit      its exit code, and whether it was stopped on request (its ctime: when)

The job's environment is what a Ray job's driver has here: the local Ray's (an allowlist of
orch's, never orch's own), the job's public values, its folder on the path; its secret values
go in a 0600 file in its folder that the runner takes out before it reads anything else.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from providers.base import BackendState

if TYPE_CHECKING:
    from providers.ray_cluster import ClusterSnapshot

# A job's folder name: orch's submission ids (letters, digits, '-', '_', '.').
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
KEEP_WORKDIR_S = 600.0  # how long an ended job's working folder stays
# What Ray's job supervisor gives a Ray job's driver: its job's runtime env and metadata,
# which `ray.init()` there takes as its own (ray._private.runtime_env.constants).
JOB_CONFIG_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def in_session(temp_dir: Path) -> ProcessJobs:
    """The jobs orch started on the local Ray whose temporary folder is `temp_dir`: those
    of its current session."""
    return ProcessJobs(session_dir(temp_dir) / "orch-jobs")


def session_dir(temp_dir: Path, wait_s: float = 1.0) -> Path:
    """The current session's folder of the Ray whose temporary folder is `temp_dir`.

    Every worker process Ray starts removes and makes again the `session_latest` link
    (ray._private.node: `try_to_symlink`), so a job that starts workers leaves moments with
    no link; read then, the link named nothing and the job seemed gone (a CI run's budget
    test failed so). The link is read again until it names a folder; past `wait_s`, the
    newest session folder (their names begin with their start time) is taken."""
    link = temp_dir / "session_latest"
    deadline = time.monotonic() + wait_s
    while True:
        try:
            target = temp_dir / os.readlink(link)
        except OSError:
            target = None
        if target is not None and target.is_dir():
            return Path(os.path.realpath(target))
        if time.monotonic() >= deadline:
            sessions = sorted(p for p in temp_dir.glob("session_2*") if p.is_dir())
            return sessions[-1] if sessions else link
        time.sleep(0.002)


class ProcessJobs:
    """The local jobs orch started itself, one folder each under `root`."""

    def __init__(self, root: Path):
        self.root = root

    def folder(self, job_id: str) -> Optional[Path]:
        if not job_id or set(job_id) - _SAFE or job_id.startswith("."):
            return None
        return self.root / job_id

    def has(self, job_id: str) -> bool:
        folder = self.folder(job_id)
        return folder is not None and os.path.lexists(folder / "job.json")

    def submit(self, job_id: str, entrypoint: str, env: dict, package: Optional[bytes],
               metadata: dict, secret_file: Optional[tuple[str, bytes]] = None,
               ray_env: Optional[dict] = None) -> str:
        """Start `entrypoint` (a shell command) for job `job_id` in a folder of its own
        holding `package` unpacked; `secret_file` (name, content) written there 0600.
        A Ray driver the job starts (`ray.init()`: orch's runner where the host is gone)
        connects to the local Ray with the job's folder and `ray_env` as its runtime env, as
        a Ray job's driver gets its job's. A job started before (a crash between its start
        and its record) is not started again."""
        folder = self.folder(job_id)
        if folder is None:
            raise ValueError(f"not a job id: {job_id!r}")
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._tidy()
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            if (folder / "job.json").exists():
                return job_id  # submitted before a crash: never launch twice
        work = folder / "workdir"
        work.mkdir(mode=0o700, exist_ok=True)
        if package:
            _unpack(package, work)
        if secret_file is not None:
            name, content = secret_file
            fd = os.open(work / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
        started = time.time()
        record = {"submission_id": job_id, "entrypoint": entrypoint, "metadata": metadata,
                  "start_time": started}
        _write(folder / "job.json", json.dumps(record))
        from jobs import keeper

        job_config = {"runtime_env": {"working_dir": str(work), "env_vars": dict(ray_env or {})},
                      "metadata": metadata}
        env = {**env, keeper.PROCESS_JOB_VAR: "1", "PWD": str(work), JOB_CONFIG_VAR: json.dumps(job_config),
               "PYTHONPATH": os.pathsep.join([str(work)] + ([env["PYTHONPATH"]]
                                                            if env.get("PYTHONPATH") else []))}
        proc = subprocess.Popen([sys.executable, "-I", "-S", keeper.__file__, str(folder), "--",
                                 entrypoint], env=env, cwd=str(work), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
        if proc.wait(timeout=60) != 0:
            _write(folder / "exit", json.dumps({"code": 127, "on_request": False}))
        return job_id

    def _tidy(self) -> None:
        """The working folders of jobs that ended KEEP_WORKDIR_S ago or more, removed (as
        Ray removes the unpacked packages no job uses); their log and state stay."""
        now = time.time()
        try:
            folders = list(self.root.iterdir())
        except OSError:
            return
        for folder in folders:
            try:
                ended = (folder / "exit").stat().st_mtime
            except OSError:
                continue
            if now - ended >= KEEP_WORKDIR_S and (folder / "workdir").is_dir():
                shutil.rmtree(folder / "workdir", ignore_errors=True)

    def state(self, job_id: str, launched_at: Optional[float] = None) -> BackendState:
        """The job's state. Its folder is the job's to write (it runs as the same OS user),
        so nothing here is taken on its word where it counts: the job runs while its keeper
        does, whatever `exit` says; its start is `launched_at` (orch's record) where given;
        its end is when `exit` was last changed (the kernel's ctime, which no process can
        set back), never the time written in it. A job cannot shorten or stretch the hours
        it is charged for."""
        folder = self.folder(job_id)
        if folder is None or not os.path.lexists(folder / "job.json"):
            return BackendState("FAILED", f"orch has no local job {job_id}", unknown=True)
        if launched_at is not None:
            start = launched_at
        else:
            start = _num(_read_json(folder / "job.json") or {}, "start_time") or 0.0
        times = {"backend_start": start}
        if _keeper(folder) is not None:
            return BackendState("RUNNING", "Job is currently running.", times)
        done = _Exit.read(folder)
        if done is None:
            if not (folder / "pid").exists() and time.time() - start < 10:
                return BackendState("RUNNING", "Job is currently running.", times)  # starting
            return BackendState("FAILED", "the job's keeper process ended without its exit "
                                "status (killed?)", times)
        times["backend_end"] = max(start, done.changed)
        if done.stopped:
            return BackendState("CANCELLED", "Job was intentionally stopped.", times,
                                exit_code=done.code)
        if done.code == 0:
            return BackendState("SUCCEEDED", "Job finished successfully.", times, exit_code=0)
        return BackendState("FAILED", f"Job entrypoint command failed with exit code {done.code}",
                            times, exit_code=done.code)

    def logs(self, job_id: str) -> str:
        folder = self.folder(job_id)
        return (read_file(folder / "log") or "") if folder else ""

    def cancel(self, job_id: str) -> None:
        """Ask the job's keeper to stop it (SIGTERM to the command, SIGKILL 3 s later)."""
        folder = self.folder(job_id)
        pid = _keeper(folder) if folder else None
        if pid is not None and folder is not None:
            _write(folder / "stop", "")
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass

    def forget_secrets(self, job_id: str) -> None:
        """The secret file, where the job never took it (stopped before its runner ran)."""
        folder = self.folder(job_id)
        if folder is None:
            return
        for path in (folder / "workdir").glob(".orch-env-*"):
            path.unlink(missing_ok=True)

    def add_to(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """`snapshot` (the local Ray's) with these jobs among its running ones, as Ray's
        Jobs API lists its own."""
        from providers.ray_cluster import ClusterJob

        extra = []
        for rec in self.running():
            meta = rec["metadata"] if isinstance(rec.get("metadata"), dict) else {}
            extra.append(ClusterJob(
                submission_id=str(rec.get("submission_id")), status="RUNNING",
                orch_id=meta.get("orch_job"), name=meta.get("name"),
                start_time=_num(rec, "start_time"), est_hours=_num(meta, "est_hours"),
                cpus=_num(meta, "cpus") or 0.0, gpus=_num(meta, "gpus") or 0.0))
        return dataclasses.replace(snapshot, jobs=(*snapshot.jobs, *extra)) if extra else snapshot

    def running(self) -> list[dict]:
        """The records of the jobs whose keeper runs (their metadata, start time)."""
        out = []
        try:
            folders = list(self.root.iterdir())
        except OSError:
            return []
        for folder in folders:
            if (folder / "exit").exists() or _keeper(folder) is None:
                continue
            record = _read_json(folder / "job.json")
            if record is not None:
                out.append(record)
        return out


def _unpack(package: bytes, into: Path) -> None:
    """A package orch made (providers/ray_package.py) unpacked as Ray unpacks one: each
    file's mode kept."""
    top = os.path.realpath(into)
    with zipfile.ZipFile(io.BytesIO(package)) as z:
        for info in z.infolist():
            path = os.path.realpath(os.path.join(top, info.filename))
            if os.path.commonpath([top, path]) != top:
                continue
            if info.is_dir():
                os.makedirs(path, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with z.open(info) as src, open(path, "wb") as dst:
                dst.write(src.read())
            mode = info.external_attr >> 16
            if mode:
                os.chmod(path, mode & 0o777)  # never a set-id bit from a client's file


@dataclasses.dataclass(frozen=True)
class _Exit:
    """What a job's keeper wrote when its command ended (jobs/keeper.py)."""

    code: Optional[int]
    changed: float  # when the file was last changed (its ctime: the kernel's, not the job's)
    stopped: bool  # on request (`orch cancel`)

    @classmethod
    def read(cls, folder: Path) -> Optional[_Exit]:
        raw = _read_json(folder / "exit")
        try:
            changed = (folder / "exit").lstat().st_ctime
        except OSError:
            return None
        if raw is None:
            return None
        code = raw.get("code")
        return cls(code=code if isinstance(code, int) and not isinstance(code, bool) else None,
                   changed=changed, stopped=raw.get("on_request") is True)


def raylet_of(temp_dir: str) -> Optional[int]:
    """The raylet of the local Ray whose temporary folder is `temp_dir` (the process its
    workers descend from), by its arguments; None when it runs none."""
    import psutil

    for p in psutil.process_iter(["name", "cmdline"]):
        try:
            if p.info["name"] == "raylet" and any(temp_dir in a for a in p.info["cmdline"] or ()):
                return p.pid
        except (psutil.Error, OSError):
            continue
    return None


def _num(meta: dict, key: str) -> Optional[float]:
    try:
        return float(meta[key])
    except (KeyError, TypeError, ValueError):
        return None


def _keeper(folder: Path) -> Optional[int]:
    """The pid of the job's keeper while it runs: the process its pid file names, started
    when it says, and a keeper of this folder (a pid file a job rewrote names no other
    process for a cancel to signal)."""
    try:
        pid_text, ticks = (read_file(folder / "pid", 64) or "").split()
        pid = int(pid_text)
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
        if fields[0] == "Z" or fields[19] != ticks or str(folder).encode() not in args \
                or not any(a.endswith(b"keeper.py") for a in args):
            return None
        return pid
    except (OSError, ValueError, IndexError):
        return None


def read_file(path: Path, limit: int = -1) -> Optional[str]:
    """The text of a file in a job's folder, which the job can write (the same OS user):
    only a regular file, never through a link (a job's `log` made a link to a file of the
    server's), opened without waiting (one made a FIFO would hold orch up), `limit` bytes
    at most. None where there is no such file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(limit).decode(errors="replace")


def _read_json(path: Path) -> Optional[dict]:
    try:
        value = json.loads(read_file(path, 1 << 20) or "")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _write(path: Path, text: str) -> None:
    """`path` written whole, through a new file of its own (never one a job put there)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    tmp.replace(path)
