"""The keeper of one local job started without a Ray job (providers/process_jobs.py).

`python -I -S keeper.py FOLDER -- COMMAND` (its environment and folder the job's): forks
once and returns at once, so that orch (a command, or `orch serve`) waits for nothing and
keeps no child; the fork writes its pid to FOLDER/pid, runs COMMAND through /bin/sh in a
session of its own, its output in FOLDER/log, and writes FOLDER/exit (the exit code, and
whether it was stopped on request: FOLDER/stop) when the command ends; the file's ctime says
when (the kernel's: a job cannot set it back as it could a time written in the file).
SIGTERM (a cancel) stops the command as Ray's job supervisor stops an entrypoint: SIGTERM to
its process group, SIGKILL after STOP_WAIT_S. Standard library only, and no import of the package (`-I -S`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

STOP_WAIT_S = 3.0  # as Ray's RAY_JOB_STOP_WAIT_TIME_S
PROCESS_JOB_VAR = "ORCH_PROCESS_JOB"  # set in a kept job's environment: it is not a Ray job


def _write(path: str, text: str) -> None:
    """`path` written whole, through a new file of its own: the job can write its folder, and
    a FIFO it left at a fixed name would hold the keeper (and the job's end) up for ever."""
    tmp = f"{path}.{os.urandom(8).hex()}"
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def keep(folder: str, command: str) -> int:
    """Run `command` (the fork's side); its exit status, as Ray's supervisor reports it."""
    stopped: list = []

    def stop(_sig: int, _frame: object) -> None:
        stopped.append(time.time())

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the session orch ran in may end first
    log = os.open(os.path.join(folder, "log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        child = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=log, start_new_session=True,
                                 restore_signals=True)
    except OSError as e:
        os.write(log, f"orch: cannot start the job: {e}\n".encode())
        return 127
    finally:
        os.close(log)
    signalled = 0  # 0: none; 1: SIGTERM sent; 2: SIGKILL sent
    while True:
        try:
            code = child.wait(timeout=0.2)
            break
        except subprocess.TimeoutExpired:
            pass
        if stopped and signalled == 0:
            _kill_group(child.pid, signal.SIGTERM)
            signalled = 1
        elif stopped and signalled == 1 and time.time() - stopped[0] > STOP_WAIT_S:
            _kill_group(child.pid, signal.SIGKILL)
            signalled = 2
    if signalled:
        _kill_group(child.pid, signal.SIGKILL)  # what the command left in its group
    # Stopped on request: `orch cancel` leaves FOLDER/stop before its SIGTERM (another
    # SIGTERM, such as `orch local down`'s, stops the job too, but it failed).
    asked = os.path.exists(os.path.join(folder, "stop"))
    _write(os.path.join(folder, "exit"),
           json.dumps({"code": code, "on_request": bool(stopped) and asked}))
    return 0


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except OSError:
        pass


def main(argv: list) -> int:
    if len(argv) != 3 or argv[1] != "--":
        print("usage: python -I -S keeper.py FOLDER -- COMMAND", file=sys.stderr)
        return 2
    folder, command = argv[0], argv[2]
    pid = os.fork()
    if pid:  # orch's side: the job's pid noted, and no child of orch's left to reap
        _write(os.path.join(folder, "pid"), f"{pid} {_start_ticks(pid)}")
        return 0
    try:
        os.setsid()
    except OSError:
        pass  # a session leader already (started with start_new_session)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    code = 1
    try:
        code = keep(folder, command)
    finally:
        os._exit(code)


def _start_ticks(pid: int) -> str:
    """When process `pid` started (clock ticks since boot): a pid that names it again later
    is another process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
