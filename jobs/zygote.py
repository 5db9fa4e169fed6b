"""The zygote of jobs/forkserver.py: one per Ray node and exact worker environment, the
first client of that environment exec'd (so a child of the raylet, as a worker is). It
imports what a warm worker imports, forks the worker that client was started as, then one
for each client that asks on its socket, until its raylet is gone (jobs/warm_python.py's
zygote: torch imported, a child per `python` command). Run as a script (`python zygote.py
--serve SOCKET -- default_worker.py ARGS...`): it imports nothing of the package."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from typing import Optional

SETUP_HOOK_VAR = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"  # as jobs/controller.py has it
# How long a client has to send its whole request once connected, seconds; and its most bytes.
_REQUEST_S = 5.0
_MAX_REQUEST = 1 << 20
# A zygote with no child for this long ends (its Ray job's workers are gone: the runner
# host's keeps warm ones while it lives), seconds; or as ORCH_ZYGOTE_IDLE_S says (tests).
_IDLE_EXIT_S = 60.0


def _exec_plain(argv: list) -> None:
    """What Ray's setup_worker.py would have run: this interpreter, `argv` its arguments."""
    os.execv(sys.executable, [sys.executable, *argv])


def preload(env: dict) -> None:
    """What a worker of this environment imports before its first task: Ray's worker
    modules, and the setup hook its environment names (jobs/host.py's preload).

    Without touching Ray's C++ random generator: it is seeded once a process first draws
    from it, and a child forked after that draws what its siblings draw, so two workers of a
    run made the same task ids and Ray's synchronization actor failed on the second
    (`Check failed: erased == 1`). An import draws from it only to name each `@ray.remote`
    class it defines; here those names come from the operating system's random source."""
    import importlib
    import traceback

    try:
        import ray.actor

        drawn = ray.actor.ActorClassID

        class FromUrandom:
            @staticmethod
            def from_random():
                return drawn(os.urandom(drawn.size()))

        ray.actor.ActorClassID = FromUrandom
        try:
            for name in ("ray._private.node", "ray._private.parameter", "ray._private.ray_logging",
                         "ray._private.runtime_env.setup_hook", "ray._private.async_compat"):
                importlib.import_module(name)
            hook = env.get(SETUP_HOOK_VAR, "")
            if hook:
                module, _, function = hook.rpartition(".")
                getattr(importlib.import_module(module), function)()
        finally:
            ray.actor.ActorClassID = drawn
    except Exception:  # noqa: BLE001  (in its log; a child imports what is missing itself)
        traceback.print_exc()


def children_draw_apart() -> bool:
    """Whether two children forked now draw different ids from Ray's generator (see
    `preload`): a zygote whose children would not serves none."""
    import ray._raylet

    drawn = set()
    for _ in range(2):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, ray._raylet.UniqueID.from_random().binary())
            os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        drawn.add(os.read(r, 64))
        os.close(r)
    return len(drawn) == 2


def cuda_works_in_a_child(gpus: str = "/proc/driver/nvidia/gpus") -> bool:
    """On a machine with NVIDIA GPUs: whether a child forked now can use CUDA. A process
    that initialized CUDA's driver (an import that asks for the device count can) forks
    children where CUDA fails; orch has not run this on a GPU yet (issue 52), so each zygote
    checks, by a child that puts a tensor on the GPU, and does not serve where it fails.
    True where there is no GPU to check (`gpus`, the driver's folder, absent or empty)."""
    try:
        if not os.listdir(gpus) or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
            return True
    except OSError:
        return True
    pid = os.fork()
    if pid == 0:
        code = 1
        with contextlib.suppress(BaseException):  # any failure is the answer
            import torch

            code = 0 if (torch.zeros(1, device="cuda") + 1).item() == 1 else 1
        os._exit(code)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) == 0
        time.sleep(0.1)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return False


MAIN: dict = {}  # a zygote of warm Pythons (jobs/warm_python.py): its preload, its "run"


def serve(path: str, first: list) -> None:
    """The zygote (the first client of its environment, exec'd): preload, fork the worker
    that client was started for (`first`, its arguments; none for warm Pythons), then one
    for each client that asks, until the raylet is gone. Does not return."""
    started = time.monotonic()
    env = dict(os.environ)  # every client's (its socket is named by its digest), before imports
    # Run as a script, its folder (the runner package, where `profile.py` would hide the
    # standard library's) came first on the path, resolved: no module of it is imported here.
    here = {os.path.dirname(f(__file__)) for f in (os.path.abspath, os.path.realpath)}
    sys.path[:] = [p for p in sys.path if p not in here]
    streams = [os.dup(0), os.dup(1), os.dup(2)]  # the first worker's, from the raylet
    null = os.open(os.devnull, os.O_RDWR)
    log = os.open(path + ".log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for fd, to in ((null, 0), (log, 1), (log, 2)):
        os.dup2(fd, to)
    os.close(null)
    os.close(log)
    try:
        server = _ready(path)
    except Exception:  # noqa: BLE001  (in its log: this environment is served plain from now)
        import traceback

        traceback.print_exc()
        with open(path + ".off", "w"):
            pass
        for i, fd in enumerate(streams):
            os.dup2(fd, i)
        _exec_plain(first)  # the worker this process was started as, plain
    raylet = int(os.environ.get("RAY_RAYLET_PID") or 0)
    print(f"orch zygote: ready in {time.monotonic() - started:.1f} s at {path}", flush=True)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `orch local down`: tidy up first
    clients: dict = {}  # child pid -> its client's connection (None: the first worker's)
    pending: dict = {}  # a connection whose request is not all in -> what is, and until when
    own = [server.fileno(), wake_r, wake_w]
    umask = os.umask(0o022)
    os.umask(umask)
    if first:
        _spawn(first, env, os.getcwd(), umask, streams, own, clients, None)
    idle_exit_s = float(os.environ.get("ORCH_ZYGOTE_IDLE_S") or _IDLE_EXIT_S)
    last_child = time.monotonic()
    try:
        while (not raylet or _running(raylet)) and os.path.exists(path):
            if clients or pending or "run" in MAIN:  # warm Pythons wait on
                last_child = time.monotonic()
            elif time.monotonic() - last_child > idle_exit_s:
                print(f"orch zygote: no worker for {idle_exit_s:.0f} s; ending", flush=True)
                break
            waiting = [c for c in clients.values() if c is not None]
            ready, _, _ = select.select([server, wake_r, *waiting, *pending], [], [], 1.0)
            for r in ready:
                if r is server:
                    with contextlib.suppress(OSError):
                        conn, _ = server.accept()
                        conn.setblocking(False)
                        pending[conn] = [b"", [], time.monotonic() + _REQUEST_S]
                elif r is wake_r:
                    with contextlib.suppress(OSError):
                        os.read(wake_r, 512)
                elif r in pending:
                    _read_request(r, env, pending, own, clients)
                else:  # a client closed (or wrote) before its child ended: the child goes
                    pid = next(p for p, c in clients.items() if c is r)
                    with contextlib.suppress(OSError):
                        if not r.recv(64):  # the child's session (its own children too)
                            os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid \
                                else os.kill(pid, signal.SIGKILL)
            now = time.monotonic()
            for conn in [c for c, (_, _, until) in pending.items() if until < now]:
                _drop(conn, pending)  # it sent no whole request in time: it runs plain
            _reap(clients)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        with contextlib.suppress(OSError):
            os.unlink(path + ".lock")
    os._exit(0)


def _ready(path: str) -> socket.socket:
    """Preload, check the children would be apart, and listen: the zygote's socket."""
    MAIN.get("preload", preload)(dict(os.environ))
    # What the preload made is never freed while the zygote lives: out of the collector's
    # sight, so that no collection in a child writes to (and so copies) those pages.
    import gc

    gc.collect()
    gc.freeze()
    if "run" not in MAIN and not children_draw_apart():
        raise RuntimeError("its children would share Ray's random ids")
    if not cuda_works_in_a_child():
        raise RuntimeError("a child forked from it cannot use CUDA")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(OSError):
        os.unlink(path)  # a zygote before this one (it holds the lock: none is now)
    old = os.umask(0o177)
    try:
        server.bind(path)
    finally:
        os.umask(old)
    server.listen(64)
    return server


def _running(pid: int) -> bool:
    """Whether process `pid` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _reap(clients: dict) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        conn = clients.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(f"{status}\n".encode())
            conn.close()


def _read_request(conn: socket.socket, env: dict, pending: dict, own: list,
                  clients: dict) -> None:
    """What a client sent so far (its worker's arguments, folder and umask, and its standard
    streams); once whole, its child forked, with the zygote's environment `env` (no client
    chooses one). A request that cannot be read, or says what no client says, is closed (its
    client, if any, runs plain). Never blocks: a process that connects and says nothing
    holds up no other client."""
    held = pending[conn]
    try:
        data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 4)
    except BlockingIOError:
        return
    except OSError:
        _drop(conn, pending)
        return
    held[1].extend(fds)
    if not data:
        _drop(conn, pending)
        return
    held[0] += data
    if len(held[0]) < 4:
        return
    size = struct.unpack("!I", held[0][:4])[0]
    if size > _MAX_REQUEST or len(held[0]) > 4 + size:
        _drop(conn, pending)
        return
    if len(held[0]) < 4 + size:
        return
    try:
        request = json.loads(held[0][4:])
        argv = [str(a) for a in request["argv"]]
        cwd, umask = str(request["cwd"]), int(request["umask"]) & 0o777
        # A warm Python's arguments and environment come in a file (a 4th), read by its
        # child only: no command's values are ever in the zygote's memory for a later child.
        if len(held[1]) != (4 if "run" in MAIN else 3) or not argv:
            raise ValueError("no standard streams, or no worker")
    except (ValueError, KeyError, TypeError, AttributeError):
        _drop(conn, pending)
        return
    fds = held[1]
    del pending[conn]
    conn.setblocking(True)
    _spawn(argv, env, cwd, umask, fds, own, clients, conn, pending)


def _drop(conn: socket.socket, pending: dict) -> None:
    for fd in pending.pop(conn, [b"", []])[1]:
        with contextlib.suppress(OSError):
            os.close(fd)
    conn.close()


def _spawn(argv: list, env: dict, cwd: str, umask: int, fds: list, own: list, clients: dict,
           conn: Optional[socket.socket], pending: Optional[dict] = None) -> None:
    """Fork the child for one worker; its client (if any) is told its pid."""
    pid = os.fork()
    if pid == 0:  # nothing of the zygote's stays open in a worker: only its own streams
        for fd in own:
            with contextlib.suppress(OSError):
                os.close(fd)
        for other in (*clients.values(), conn, *(pending or {})):
            if other is not None:
                other.close()
        for _, held, _ in (pending or {}).values():
            for fd in held:
                with contextlib.suppress(OSError):
                    os.close(fd)
        _child(argv, env, cwd, umask, fds)
    for fd in fds:
        os.close(fd)
    clients[pid] = conn
    if conn is not None:
        try:
            conn.sendall(f"{pid}\n".encode())
        except OSError:
            os.kill(pid, signal.SIGKILL)


def _child(argv: list, env: dict, cwd: str, umask: int, fds: list) -> None:
    """In the forked child: become the worker the client would have exec'd. Does not return."""
    code = 1
    try:
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.setsid()
        if len(fds) > 3:  # a warm Python's command: its arguments and environment
            with os.fdopen(fds.pop(), "rb") as f:
                sent = json.loads(f.read())
            argv, env = [str(a) for a in sent["argv"]], {str(k): str(sent["env"][k])
                                                         for k in sent["env"]}
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        os.umask(umask)
        numpy = sys.modules.get("numpy")
        if numpy is not None:  # its global generator was seeded in the zygote, once for all
            numpy.random.seed()
        try:
            MAIN.get("run", _run_script)(argv)
            code = 0
        except SystemExit as e:
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001  (printed as python would, then exit 1)
            import traceback

            traceback.print_exc()
            code = 1
        # What python's exit does next: its threads joined, its exit functions run.
        import atexit
        import threading

        with contextlib.suppress(BaseException):
            threading._shutdown()  # type: ignore[attr-defined]
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code & 0xFF if code >= 0 else 1)


def _run_script(argv: list) -> None:
    """Run `argv` (a script and its arguments) as `python SCRIPT ARGS...` would."""
    import runpy

    sys.argv = list(argv)
    sys.path[0:0] = [os.path.dirname(os.path.abspath(argv[0]))]
    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__" and sys.argv[1:2] == ["--serve"] and sys.argv[3:4] == ["--"]:
    serve(sys.argv[2], sys.argv[4:])
