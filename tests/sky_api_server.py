"""SkyPilot's own API server for tests: `sky api start --foreground` on a free loopback port,
in a home of its own (not the user's ~/.sky, no cloud credentials), stopped by its session."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(home: Path, port: int) -> dict:
    """Only what SkyPilot needs: nothing of this machine's cloud credentials or SkyPilot
    settings comes along (HOME, and with it ~/.sky, ~/.aws and the rest, is `home`)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8",
            "HOME": str(home), "SKY_RUNTIME_DIR": str(home),
            "SKYPILOT_API_SERVER_LOCAL_PORT": str(port),
            "SKYPILOT_DISABLE_USAGE_COLLECTION": "1", "AWS_EC2_METADATA_DISABLED": "true"}


@dataclass
class SkyServer:
    home: Path
    port: int
    proc: subprocess.Popen  # `sky api start --foreground`, which becomes the server itself

    def client_env(self) -> dict:
        """For a process whose SkyPilot client must use this server: the same home and port,
        and no local server of its own started should this one not answer."""
        return {**server_env(self.home, self.port), "SKYPILOT_DISABLE_LOCAL_API_SERVER": "1"}

    def log_tail(self, n: int = 4000) -> str:
        path = self.home / "server.out"
        return path.read_text(errors="replace")[-n:] if path.exists() else ""

    def processes(self) -> list[psutil.Process]:
        """The server's live processes: all of its session (its executors and workers)."""
        out = []
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) == self.proc.pid and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except (psutil.Error, OSError):
                continue
        return out


def start(home: Path, timeout: float = 180.0) -> SkyServer:
    """Start the server and wait until it answers /api/health; the caller must `stop` it."""
    port = _free_port()
    with open(home / "server.out", "w") as log:
        proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("sky")), "api", "start", "--foreground",
             "--host", "127.0.0.1", "--port", str(port)],
            env=server_env(home, port), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
    server = SkyServer(home, port, proc)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2).close()
            return server
        except OSError:
            time.sleep(0.2)
    left = stop(server)
    raise RuntimeError(f"SkyPilot's API server did not answer on 127.0.0.1:{port} within "
                       f"{timeout:.0f} s (exit {proc.returncode}, left {left}); its log ends:\n"
                       + server.log_tail())


def stop(server: SkyServer, timeout: float = 15.0) -> list[str]:
    """Kill the server's processes, as `sky api stop` kills a local server and its children
    (SIGKILL), and only those; return the ones still alive after `timeout` (none, normally)."""
    deadline = time.monotonic() + timeout
    while (left := server.processes()) and time.monotonic() < deadline:
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        time.sleep(0.2)
    try:
        server.proc.wait(max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    out = []
    for p in server.processes():
        try:
            out.append(f"{p.pid} {' '.join(p.cmdline())}")
        except psutil.Error:
            continue
    return out
