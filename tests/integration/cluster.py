"""A real two-node Ray cluster on loopback, started with `ray start` like a team's cluster.

The head and a second node run as separate `ray start` process trees; the test can kill
the second node (SIGKILL, like a machine lost) and start it again. `stop()` ends exactly
the processes this cluster started.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

from providers.local_ray import _free_port, ray_executable


def _tree(pids: set[int]) -> set[int]:
    out = set(pids)
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            out.update(c.pid for c in psutil.Process(pid).children(recursive=True))
    return out


def path_without_venv() -> str:
    """PATH without this venv's bin: `ray start` runs by its absolute path, as a team that
    never activates the venv on its nodes starts it, so `python3` there has no ray. Jobs
    must still run under the Python of the cluster's Ray."""
    venv_bin = str(Path(sys.executable).parent)
    return ":".join(p for p in os.environ.get("PATH", "").split(":") if p and p != venv_bin)


class TwoNodeCluster:
    def __init__(self, root: Path, head_cpus: int = 2, node_cpus: int = 1):
        self.root = root
        # Each node has a temp folder of its own, as two machines would: sharing one, both
        # nodes' log monitors read every worker's log, and a job's log held each line twice.
        # Ray's processes name their node's folder, so `temp_dir` (both) finds either node's.
        self.temp_dir = root / "r"
        self.head_dir, self.node_dir = self.temp_dir / "head", self.temp_dir / "node"
        self.token_file = root / "token"
        self.token_file.write_text(secrets.token_hex(24))
        os.chmod(self.token_file, 0o600)
        self.head_cpus, self.node_cpus = head_cpus, node_cpus
        self.gcs_port = _free_port()
        self.dashboard_port = _free_port()
        self.address = f"http://127.0.0.1:{self.dashboard_port}"
        self.head_pids: set[int] = set()
        self.node_pids: set[int] = set()
        self.log = root / "ray-start.log"

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("RAY_", "ORCH_")) and k != "VIRTUAL_ENV"}
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token_file),
                   RAY_USAGE_STATS_ENABLED="0",
                   # Notice a lost node in about 3 s instead of the default 15+.
                   RAY_health_check_period_ms="1000", RAY_health_check_failure_threshold="3",
                   PATH=path_without_venv())
        return env

    def _ours(self) -> set[int]:
        found = set()
        for p in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                args = p.info["cmdline"] or []
                if any(str(self.temp_dir) in a or a.endswith(f":{self.gcs_port}") for a in args):
                    found.add(p.pid)
        return _tree(found)

    def _ray_start(self, args: list[str]) -> set[int]:
        before = self._ours()
        with open(self.log, "a") as log:
            subprocess.run([ray_executable(), "start", *args, "--disable-usage-stats"],
                           env=self.env(), stdout=log, stderr=subprocess.STDOUT, check=True,
                           timeout=180, stdin=subprocess.DEVNULL)
        return self._ours() - before

    def agent_ports(self) -> list[str]:
        return [f"--dashboard-agent-listen-port={_free_port()}",
                f"--dashboard-agent-grpc-port={_free_port()}",
                f"--runtime-env-agent-port={_free_port()}",
                f"--metrics-export-port={_free_port()}"]

    def start_head(self) -> None:
        self.head_pids = self._ray_start([
            "--head", "--node-ip-address=127.0.0.1", f"--port={self.gcs_port}",
            "--include-dashboard=true", "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}", f"--ray-client-server-port={_free_port()}",
            f"--temp-dir={self.head_dir}", f"--num-cpus={self.head_cpus}",
            "--object-store-memory=300000000", *self.agent_ports()])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                req = urllib.request.Request(self.address + "/api/version", headers={
                    "Authorization": f"Bearer {self.token_file.read_text()}"})
                urllib.request.urlopen(req, timeout=2).close()
                return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"the head did not come up; see {self.log}")

    def start_node(self) -> None:
        self.node_pids = self._ray_start([
            f"--address=127.0.0.1:{self.gcs_port}", "--node-ip-address=127.0.0.1",
            f"--num-cpus={self.node_cpus}", '--resources={"node_b": 1}', f"--temp-dir={self.node_dir}",
            "--object-store-memory=200000000", *self.agent_ports()])
        self.wait_nodes(2)

    def alive_nodes(self) -> int:
        import json

        req = urllib.request.Request(self.address + "/api/v0/nodes?limit=100", headers={
            "Authorization": f"Bearer {self.token_file.read_text()}"})
        with urllib.request.urlopen(req, timeout=5) as r:
            nodes = json.load(r)["data"]["result"]["result"]
        return sum(n["state"] == "ALIVE" for n in nodes)

    def wait_nodes(self, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.alive_nodes() != n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster never had {n} alive nodes")
            time.sleep(0.5)

    def kill_node(self) -> None:
        """Lose the second node at once, as a machine that loses power."""
        for pid in _tree(self.node_pids):
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        self.node_pids = set()

    def stop(self) -> list:
        procs = []
        for pid in self._ours() | _tree(self.node_pids) | _tree(self.head_pids):
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(pid))
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = psutil.wait_procs(procs, timeout=8)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=5)
        left = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        shutil.rmtree(self.root, ignore_errors=True)
        return left
