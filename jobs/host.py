"""The runner host: one long-lived Ray driver per local Ray that runs orch's training jobs.

Why: a job that starts its own driver pays, on 2 cores, for a driver process and for a
Ray Train controller, a synchronization actor and one process per worker, each importing
torch and Ray Train (a no-op `TorchTrainer.fit()` from a running driver took 10-11 s here).
Ray hands an actor a process started before only when that process belongs to the same Ray
job and was started with the very runtime env the actor asks for. So the host is that
job: it has torch and Ray Train imported, keeps warm worker processes of its own (started
through the raylet's PrestartWorkers call, with the exact runtime envs Ray Train's
controller and workers get, and torch imported by a worker setup hook while they wait; the
synchronization actor's with Ray Train only, through a setup hook of its own), and
runs each job's `TorchTrainer.fit()` in a thread of its own. A no-op `fit()` there took
1.5-1.7 s instead of 10-11 s.

Each job is still one Ray job (jobs/hosted.py: a thin runner that hands the request here
and relays the log), so Ray's Jobs API keeps its state, log, exit code and cancel. A run's
controller and workers are fresh processes from the warm pool, the job's alone: they write
to the job's log, take its environment from their config and run in its working_dir.

Run by orch (`providers/local_ray.py`) as `python -m _orch_runner.host --socket S --workers N
--address ADDR`; it listens on the unix socket S (mode 0600) once it is ready.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import threading
import time
import traceback
from typing import Any, Optional

from . import events, job_values
from .controller import LIGHT_ENV, SETUP_HOOK_VAR, abort, hosted_runtime_env
from .hosted import pid_file
from .request import BadRequest, RunRequest
from .warm import IDLE_S, SPARE_AFTER_S, Stock, machine_pool_mb


def preload() -> None:
    """Run in each warm process of a controller or a worker as it starts: import what they
    import, so that a run finds them ready. Never fails the process."""
    with contextlib.suppress(Exception):
        # torch._dynamo: creating any torch optimizer imports it (0.9-1.1 s of each job's
        # first step here).
        import ray.train.torch  # noqa: F401
        import torch  # noqa: F401
        import torch._dynamo  # noqa: F401
        from ray.train.v2._internal.execution.controller import TrainController  # noqa: F401

        from . import context, runner  # noqa: F401
        from .builtin import image_classification  # noqa: F401


def preload_light() -> None:
    """The synchronization actor's `preload`: Ray Train's barrier between a run's workers
    needs Ray Train, not torch (its warm process took 1.7-2.0 CPU-s here, a full one 3.4-3.5)."""
    with contextlib.suppress(Exception):
        from ray.train.v2._internal.execution.checkpoint.sync_actor import (  # noqa: F401
            SynchronizationActor,
        )


def sync_actor_env(env: dict) -> dict:
    """The synchronization actor's env_vars: the controller's, with the light setup hook."""
    return {**env, **LIGHT_ENV}


def controller_env() -> dict:
    """The env_vars of every run's controller: the Ray Train settings of orch's jobs (the
    runner's, the health check at 0.2 s as orch's launches set it) and Ray Train's own
    default, which its trainer adds; plus the setup hook. The workers get the same through
    Ray Train, which hands the controller's settings on to them."""
    from ray.train.v2._internal.constants import (
        DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE,
        RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR,
    )

    from .trainer import TRAIN_ENV

    return {**TRAIN_ENV, "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2",
            RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR: DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE,
            SETUP_HOOK_VAR: f"{__package__}.host.preload"}


def runtime_env_strings(env: dict) -> tuple[str, str]:
    """The runtime env as Ray serializes it for the controller, and as Ray's core merges it
    for each worker and the synchronization actor (the controller's env under their own,
    written compactly): a warm process serves only the string it was started with."""
    doc = hosted_runtime_env(env)
    return json.dumps(doc, sort_keys=True), json.dumps(doc, sort_keys=True, separators=(",", ":"))


class WarmPool:
    """Idle worker processes of this job, started ahead through the raylet's PrestartWorkers
    call for the runtime envs a run asks for: its controller's, its synchronization actor's
    (without torch) and its workers'."""

    def __init__(self, env: dict, keep_alive_s: int = 7 * 24 * 3600):
        import ray
        from ray._private.grpc_utils import init_grpc_channel
        from ray.core.generated import node_manager_pb2, node_manager_pb2_grpc

        me = ray.get_runtime_context().get_node_id()
        node = next(n for n in ray.nodes() if n["NodeID"] == me)
        channel = init_grpc_channel(f"{node['NodeManagerAddress']}:{node['NodeManagerPort']}")
        self._stub = node_manager_pb2_grpc.NodeManagerServiceStub(channel)
        self._request = node_manager_pb2.PrestartWorkersRequest
        self._job = bytes.fromhex(ray.get_runtime_context().get_job_id())
        self._controller, self._worker = runtime_env_strings(env)
        # Started by the controller with an env of its own, which Ray's core merges over the
        # controller's and writes compactly, as it does a worker's.
        self._sync = runtime_env_strings(sync_actor_env(env))[1]
        self._keep_alive_s = keep_alive_s
        self.started = 0

    def add(self, runs: int, workers: int) -> None:
        """Processes for `runs` more runs' controllers and synchronization actors, and for
        `workers` more workers."""
        for serialized, n in ((self._controller, runs), (self._sync, runs), (self._worker, workers)):
            if n <= 0:
                continue
            info = self._request.DESCRIPTOR.fields_by_name["runtime_env_info"].message_type._concrete_class(
                serialized_runtime_env=serialized)
            try:
                self._stub.PrestartWorkers(self._request(
                    language=0, job_id=self._job, runtime_env_info=info,  # 0: Python
                    keep_alive_duration_secs=self._keep_alive_s, num_workers=n), timeout=10)
                self.started += n
            except Exception as e:  # noqa: BLE001  (runs still work, from cold processes)
                print(f"orch host: could not start warm processes: {e}", file=sys.stderr, flush=True)


class Host:
    def __init__(self, pool: WarmPool, env: dict, stock: Optional[Stock] = None,
                 idle_s: float = IDLE_S):
        self.pool = pool
        self.env = env
        self.stock = stock or Stock(initial_workers=1)
        self.idle_s = idle_s
        self.running = 0
        self.lock = threading.Lock()

    def add_spare(self) -> None:
        """A second run's warm processes (jobs/warm.py), once the first run's are warm."""
        with self.lock:
            runs, workers = self.stock.spare()
        self.pool.add(runs, workers)

    def refill_if_idle(self) -> None:
        """The pool brought back to what the next jobs need, once no run has started or
        ended for `idle_s` (jobs/warm.py); nothing while a burst of jobs goes on."""
        with self.lock:
            runs, workers = self.stock.idle(time.monotonic(), self.idle_s * 0.95)
        self.pool.add(runs, workers)

    def serve(self, conn: socket.socket) -> None:
        """One job: its request in, its run, its exit code out; the connection closing
        before that is a cancel."""
        with conn:
            line = conn.makefile("rb").readline()
            if not line.strip():
                return  # a look whether the host answers (`orch local status`), no job
            try:
                message = json.loads(line)
                req = RunRequest.from_dict(message["request"])
                log = str(message["log"])
                env = {str(k): str(v) for k, v in dict(message.get("env") or {}).items()}
                values = message.get("values")
                remote = None if values is None else job_values.Remote(
                    env, str(values["socket"]), [str(n) for n in values["names"]])
            except (ValueError, KeyError, TypeError, AttributeError, BadRequest) as e:
                print(f"orch host: refused a request: {e}", file=sys.stderr, flush=True)
                return
            code = self.run(conn, req, env, message.get("cwd"), log, remote)
            send(conn, {"exit": code})

    def run(self, conn: socket.socket, req: RunRequest, env: dict, cwd: Optional[str], log: str,
            remote: Optional[job_values.Remote] = None) -> int:
        """Run one job in this thread: its events go to its log, its state events to its
        runner, which signs them (this process holds no job's event key). `env`: its public
        values; `remote`: where its workers fetch its secret ones (never held here)."""
        from .runner import run
        from .trainer import Hosted

        done = threading.Event()
        cancelled = threading.Event()
        controllers: list = []

        def on_controller(controller: Any) -> None:
            controllers.append(controller)
            if cancelled.is_set():
                abort(controller)

        def watch() -> None:  # the runner sends nothing more: a read ends when it is gone
            with contextlib.suppress(OSError):
                while conn.recv(4096):
                    pass
            if not done.is_set():
                cancelled.set()
                for controller in controllers:
                    abort(controller)

        threading.Thread(target=watch, daemon=True, name=f"watch-{req.job_id}").start()
        with self.lock:
            self.running += 1
            missing = self.stock.missing(req.num_workers)
            self.stock.take(req.num_workers, time.monotonic())
        if any(missing):  # started now, side by side, for this run (jobs/warm.py)
            print(f"orch host: {req.job_id} found too few warm processes; the rest start cold",
                  file=sys.stderr, flush=True)
            self.pool.add(*missing)
        try:
            def state(event: str, fields: dict) -> None:
                send(conn, {"state": {"event": event, "fields": fields}})

            with open(log, "a") as out, events.redirect(out), events.signing(state):
                try:
                    return run(req, hosted=Hosted(env=env, cwd=cwd, log_path=log,
                                                  controller_env=self.env,
                                                  on_controller=on_controller, values=remote))
                except Exception as e:  # noqa: BLE001  (one job's failure is not the host's)
                    events.say(traceback.format_exc(), err=True)
                    events.emit("result", ok=False, error=f"orch host: {type(e).__name__}: {e}")
                    return 1
        finally:
            done.set()
            with self.lock:
                self.running -= 1
                self.stock.done(time.monotonic())
            _release(controllers)
            if cancelled.is_set():  # the runner was killed before it could remove the log
                with contextlib.suppress(OSError):
                    os.unlink(log)
            # The pool is refilled once the jobs pause (jobs/warm.py): started beside a
            # run, their imports would slow its first steps and skew the precision trial
            # it times then.
            refill = threading.Timer(self.idle_s, self.refill_if_idle)
            refill.daemon = True
            refill.start()


_SEND = threading.Lock()


def send(conn: socket.socket, message: dict) -> None:
    """One line to a job's runner (its state events, then its exit code)."""
    with _SEND, contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode() + b"\n")


def _release(controllers: list) -> None:
    """A run's controller, once the run is over: its process goes now, not when the host's
    handles to it are collected."""
    import ray

    for controller in controllers:
        with contextlib.suppress(Exception):
            ray.kill(controller)
    controllers.clear()


def listen(path: str) -> socket.socket:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a host before this one left it
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        server.bind(path)  # 0600: the job's secret values travel here
    finally:
        os.umask(old)
    server.listen(64)
    return server


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}.host")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--workers", type=int, default=2, help="warm worker processes to keep")
    parser.add_argument("--address", required=True)
    parser.add_argument("--pool-mb", type=int, default=None,
                        help="memory the warm processes may hold, MiB (default: a tenth of "
                             "the machine's, jobs/warm.py)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with open(pid_file(args.socket), "w") as f:
        f.write(str(os.getpid()))
    preload()
    import ray

    host = args.address.rsplit(":", 1)[0]
    ray.init(address=args.address, log_to_driver=False,
             **({"_node_ip_address": host} if host.startswith("127.") else {}))
    env = controller_env()
    pool = WarmPool(env)
    stock = Stock(initial_workers=args.workers,
                  pool_mb=machine_pool_mb() if args.pool_mb is None else args.pool_mb)
    pool.add(*stock.initial())
    server = listen(args.socket)
    print(f"orch host: ready in {time.monotonic() - started:.1f} s at {args.socket}", flush=True)
    runner = Host(pool, env, stock)
    spare = threading.Timer(SPARE_AFTER_S, runner.add_spare)
    spare.daemon = True
    spare.start()
    while True:
        conn, _ = server.accept()
        threading.Thread(target=runner.serve, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
