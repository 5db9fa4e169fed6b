"""One Ray cluster across a SkyPilot task's nodes, then a command on its head:
`python -m _orch_runner.multinode -- COMMAND...` (orch's runner, for a multi-node `train:` job).

SkyPilot runs a multi-node task's `run` on every node with SKYPILOT_NODE_RANK,
SKYPILOT_NODE_IPS (one address a line, the head's first) and SKYPILOT_NUM_NODES set.
As SkyPilot documents for Ray: rank 0 starts the head, waits until SKYPILOT_NUM_NODES
nodes have joined, then runs COMMAND against it (RAY_ADDRESS) and exits with its code;
every other rank joins the first address and stays until the head's Ray is gone, that
is until the training ended, then exits 0. Each node's Ray is a `ray start --block`
child of this process, stopped by it: never `ray stop`, which would also stop the Ray
SkyPilot itself runs on the VM (ports 6380/8266).

The environment may also set ORCH_RAY_PORT (the head's port, 6379), ORCH_RAY_START_ARGS
(more `ray start` arguments for this node: ports, resources, a temp dir, for nodes that
share one machine) and ORCH_RAY_JOIN_TIMEOUT_S (600). RAY_AUTH_TOKEN, when given (orch
sends one per job as a SkyPilot secret), is the cluster's token on every node.
Standard library only (and events.py), but for `ray` on the head while it counts the nodes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

from . import events

DEFAULT_PORT = 6379  # SkyPilot's own Ray on the node uses 6380
EXIT_BAD_INPUT = 2


class Problem(RuntimeError):
    """Why this node cannot take its part; said once, with the `result` event orch reads."""


@dataclass(frozen=True)
class Topology:
    """This node's place in the task, as SkyPilot set it, and how its Ray is started."""

    rank: int
    ips: tuple[str, ...]
    port: int = DEFAULT_PORT
    extra: tuple[str, ...] = ()  # more `ray start` arguments for this node
    timeout_s: float = 600.0

    @property
    def num_nodes(self) -> int:
        return len(self.ips)

    @property
    def head(self) -> str:
        return f"{self.ips[0]}:{self.port}"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Topology:
        def number(name: str, default: Optional[str] = None, kind: Callable = int):
            raw = env.get(name, default)
            if raw is None or raw == "":
                raise Problem(f"{name} is not set; this module runs as a SkyPilot task's `run`")
            try:
                return kind(raw)
            except ValueError:
                raise Problem(f"{name} is {raw!r}; want a number") from None

        rank, n = number("SKYPILOT_NODE_RANK"), number("SKYPILOT_NUM_NODES")
        ips = tuple(line.strip() for line in env.get("SKYPILOT_NODE_IPS", "").splitlines() if line.strip())
        if len(ips) != n or n < 1:
            raise Problem(f"SKYPILOT_NODE_IPS lists {len(ips)} addresses; SKYPILOT_NUM_NODES is {n}")
        if not 0 <= rank < n:
            raise Problem(f"SKYPILOT_NODE_RANK is {rank}; want 0 to {n - 1}")
        timeout = number("ORCH_RAY_JOIN_TIMEOUT_S", "600", float)
        return cls(rank=rank, ips=ips, port=number("ORCH_RAY_PORT", str(DEFAULT_PORT)),
                   extra=tuple(shlex.split(env.get("ORCH_RAY_START_ARGS", ""))), timeout_s=timeout)

    def ray_start_args(self) -> list[str]:
        """This node's `ray start` arguments (before --block)."""
        me = [f"--node-ip-address={self.ips[self.rank]}", "--disable-usage-stats"]
        if self.rank == 0:
            return ["--head", f"--port={self.port}", *me, *self.extra]
        return [f"--address={self.head}", *me, *self.extra]


def ray_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The environment of this node's Ray and of COMMAND: token auth when a token is given."""
    env = dict(environ)
    if env.get("RAY_AUTH_TOKEN"):
        env["RAY_AUTH_MODE"] = "token"
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # Ray drains a node on SIGTERM for Serve's sake, up to 30 s (all of it on a node
    # whose head is gone); the run is over when this module stops a node.
    env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
    return env


def _ray_executable() -> str:
    beside = Path(sys.executable).with_name("ray")  # the Ray of the Python running this
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


def _die_with_parent() -> None:
    """In the child: SIGTERM it should this process die first (Linux), so a killed run
    leaves no Ray behind; `ray start --block` stops its node on SIGTERM."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_ray(topo: Topology, env: Mapping[str, str]) -> subprocess.Popen:
    cmd = [_ray_executable(), "start", *topo.ray_start_args(), "--block"]
    print(f"orch multinode: rank {topo.rank}/{topo.num_nodes}: {shlex.join(cmd)}", flush=True)
    # Not the runner's event key: every Ray worker (the job's own code) inherits this
    # node's Ray environment, and the key is what tells the runner's lines from the job's.
    node_env = {k: v for k, v in env.items() if k != events.KEY_VAR}
    return subprocess.Popen(cmd, env=node_env, stdin=subprocess.DEVNULL,
                            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)


def stop_ray(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """Stop this node's Ray: SIGTERM to its `ray start --block`, which stops what it started."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def reachable(address: str, timeout: float = 2.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
        return True
    except OSError:
        return False


def alive_nodes() -> int:
    import ray

    return sum(1 for n in ray.nodes() if n.get("Alive"))


def wait_for_nodes(topo: Topology, ray_proc: subprocess.Popen) -> None:
    """Block until the cluster has all SKYPILOT_NUM_NODES nodes; Problem after the timeout.
    Ray reads its auth settings from this process's environment when it is imported."""
    import ray

    deadline = time.monotonic() + topo.timeout_s
    while not reachable(topo.head):  # the head's own GCS, still starting
        if ray_proc.poll() is not None or time.monotonic() > deadline:
            raise Problem(f"the head's Ray did not start at {topo.head} (`ray start` exit code "
                          f"{ray_proc.poll()}); its output above says why")
        time.sleep(0.5)
    try:
        ray.init(address=topo.head, log_to_driver=False, logging_level=logging.WARNING)
    except ConnectionError as e:
        raise Problem(f"cannot connect to the head's Ray at {topo.head}: {e}") from None
    try:
        while (n := alive_nodes()) < topo.num_nodes:
            if ray_proc.poll() is not None:
                raise Problem(f"the head's Ray exited (code {ray_proc.returncode}) before all "
                              f"{topo.num_nodes} nodes joined")
            if time.monotonic() > deadline:
                raise Problem(f"only {n} of {topo.num_nodes} nodes joined the Ray cluster at "
                              f"{topo.head} within {topo.timeout_s:g} s (ORCH_RAY_JOIN_TIMEOUT_S); "
                              "the others' logs say why")
            time.sleep(0.5)
    finally:
        ray.shutdown()
    print(f"orch multinode: {topo.num_nodes} nodes in the Ray cluster at {topo.head}", flush=True)


def run_head(topo: Topology, command: Sequence[str], env: Mapping[str, str]) -> int:
    ray_proc = start_ray(topo, env)
    try:
        wait_for_nodes(topo, ray_proc)
        return subprocess.call(list(command), env={**env, "RAY_ADDRESS": topo.head})
    finally:
        stop_ray(ray_proc)


def run_worker(topo: Topology, env: Mapping[str, str], poll_s: float = 1.0) -> int:
    """Join the head once it answers, then stay until it is gone (3 checks in a row)."""
    deadline = time.monotonic() + topo.timeout_s
    while not reachable(topo.head):
        if time.monotonic() > deadline:
            raise Problem(f"the head at {topo.head} did not answer within {topo.timeout_s:g} s "
                          "(ORCH_RAY_JOIN_TIMEOUT_S)")
        time.sleep(poll_s)
    ray_proc = start_ray(topo, env)
    try:
        misses = 0
        while misses < 3:
            time.sleep(poll_s)
            misses = 0 if reachable(topo.head) else misses + 1
            if ray_proc.poll() is not None and misses == 0:
                raise Problem(f"this node's Ray exited (code {ray_proc.returncode}) while the "
                              f"head at {topo.head} still runs")
        print(f"orch multinode: rank {topo.rank}: the head at {topo.head} is gone; the run "
              "is over", flush=True)
        return 0
    finally:
        stop_ray(ray_proc)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print(f"usage: python -m {__package__}.multinode -- COMMAND [ARG...]", file=sys.stderr)
        return EXIT_BAD_INPUT
    # SkyPilot cancels a run with SIGTERM: leave through the `finally` that stops Ray.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        topo = Topology.from_env(os.environ)
    except Problem as e:
        return _fail(str(e), EXIT_BAD_INPUT)
    env = ray_env()
    os.environ.update(env)  # for `ray` here too, before it is imported
    with events.signing(os.environ.get(events.KEY_VAR)):  # its own `result` is the runner's kind
        try:
            return run_head(topo, argv, env) if topo.rank == 0 else run_worker(topo, env)
        except Problem as e:
            return _fail(f"rank {topo.rank}: {e}", 1)


def _fail(msg: str, code: int) -> int:
    print(f"orch multinode: {msg}", file=sys.stderr)
    # The same `result` event the runner prints, so orch shows why the job failed.
    events.emit("result", ok=False, error=f"orch multinode: {msg}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
