"""The local Ray instance that local-only mode runs jobs on: start, reuse, inspect, stop.

Everything it owns lives under ORCH_HOME/local: its state file, its auth token and (when
the path is short enough for Ray's unix sockets) its temp dir. Its ports are picked free
at start, so it never collides with another Ray on the machine, and `down` stops only the
processes of this instance, never another Ray's (unlike `ray stop`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from jobs.hosted import pid_file
from orchestrator.base.errors import BackendError
from providers.process_jobs import in_session
from providers.runner_host import host_alive, host_state, stop_stale_host
from providers.runner_package import link_in, module, runner_digest

# Ray puts unix sockets at <temp>/session_<date>_<pid>/sockets/plasma_store (~70 chars
# below <temp>), and a socket path must stay under 108 bytes.
_MAX_TEMP_DIR_LEN = 36


# Warm worker processes the runner host starts with (one per CPU, at most this many: about
# 0.4 GiB each while idle). Once the jobs pause it refills the pool to what ran lately,
# within `local.warm_pool_mb` (jobs/warm.py).
_WARM_WORKERS = 4


def _free_port() -> int:
    return _free_ports(1)[0]


def _free_ports(n: int) -> list[int]:
    """`n` distinct free ports: each socket is held until all are picked (picked one by one
    and let go, the kernel handed out one port twice under load, and `ray start` refused)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(n):
            s = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
        return ports


def ray_executable() -> str:
    candidate = Path(sys.executable).with_name("ray")
    return str(candidate) if candidate.exists() else "ray"


class LocalRay:
    def __init__(self, home: Path, cpus: Optional[int] = None, object_store_mb: int = 1024,
                 runner_host: bool = True, pass_env: Sequence[str] = (),
                 warm_pool_mb: Optional[int] = None):
        self.home = Path(home)
        self.warm_pool_mb = warm_pool_mb
        self.pass_env = tuple(pass_env)
        self.runner_host = runner_host
        self.dir = self.home / "local"
        self.state_file = self.dir / "ray.json"
        self.token_file = self.dir / "auth_token"
        self.cpus = cpus
        self.object_store_mb = object_store_mb

    # -- state ------------------------------------------------------------------------

    def _state(self) -> Optional[dict]:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None

    def token(self) -> Optional[str]:
        try:
            return self.token_file.read_text().strip()
        except OSError:
            return None

    def headers(self) -> dict:
        token = self.token()
        return {"Authorization": f"Bearer {token}"} if token else {}

    def temp_dir(self) -> Path:
        preferred = self.dir / "ray"
        if len(str(preferred)) <= _MAX_TEMP_DIR_LEN:
            return preferred
        tag = hashlib.sha256(str(self.home.resolve()).encode()).hexdigest()[:10]
        return Path("/tmp") / f"orch-{os.getuid()}-{tag}"

    def _responds(self, url: str, timeout: float = 2.0) -> bool:
        req = urllib.request.Request(url + "/api/version", headers=self.headers())
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def status(self, details: bool = True) -> Optional[dict]:
        """The running instance's state (address, ports, temp dir), or None when it is down;
        with `details`, its process count (a walk of every process) and its runner host's."""
        state = self._state()
        if state and self._responds(state["dashboard_url"]):
            if not details:
                return state
            state["processes"] = len(self._processes(state))
            state["runner_host"] = host_state(state.get("host_socket"))
            return state
        return None

    @contextlib.contextmanager
    def _lock(self):
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self.dir / "lock", "w") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # two `orch submit`s must not start two Rays
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # -- lifecycle --------------------------------------------------------------------

    def up(self, on_start: Optional[Callable[[], None]] = None) -> dict:
        """Reuse the running instance or start one; returns its state."""
        with self._lock():
            state = self.status()
            if state:
                if "runner" not in state:
                    raise BackendError(
                        "the local Ray was started by an earlier version of orch, whose Ray "
                        "does not have the runner on its path under the name jobs now start",
                        "`orch local down`, then `orch local up` (or the next job) starts a new one")
                if (self.runner_host and host_alive(state.get("host_socket"))
                        and state.get("host_runner") != runner_digest()):
                    self._stop_old_host(state)  # started by another version of orch's runner
                if self.runner_host and not host_alive(state.get("host_socket")):
                    # The runner host died (or this instance was started without one): a
                    # new one, so the next jobs start warm again.
                    state.pop("processes", None)
                    state.pop("runner_host", None)
                    state["host_socket"] = self._start_host(state, self.job_env())
                    self._write(state)
                return state
            stale = self._state()
            if stale:  # crashed or killed: clear what is left before starting anew
                self._stop_processes(stale)
            if on_start:
                on_start()
            return self._start()

    def _start(self) -> dict:
        if not self.token_file.exists():
            fd = os.open(self.token_file, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(24))
        temp_dir = self.temp_dir()
        temp_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._prepare(temp_dir)
        names = ("gcs", "dashboard", "client", "agent_http", "agent_grpc", "runtime_env", "metrics")
        ports = dict(zip(names, _free_ports(len(names))))
        cpus = self.cpus or os.cpu_count() or 1
        cmd = [
            *self._ray_command(), "start", "--head",
            "--node-ip-address=127.0.0.1", f"--port={ports['gcs']}",
            "--include-dashboard=true", "--dashboard-host=127.0.0.1",
            f"--dashboard-port={ports['dashboard']}",
            f"--ray-client-server-port={ports['client']}",
            f"--dashboard-agent-listen-port={ports['agent_http']}",
            f"--dashboard-agent-grpc-port={ports['agent_grpc']}",
            f"--runtime-env-agent-port={ports['runtime_env']}",
            f"--metrics-export-port={ports['metrics']}",
            f"--temp-dir={temp_dir}", f"--num-cpus={cpus}",
            f"--object-store-memory={self.object_store_mb * 1024 * 1024}",
            "--disable-usage-stats", *self._gpu_args(),
        ]
        env = self.job_env()
        log = self.dir / "ray-start.log"
        with open(log, "w") as out:
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                  stdin=subprocess.DEVNULL, timeout=180, **self._spawn_as())
        state: dict[str, Any] = {
            "address": f"127.0.0.1:{ports['gcs']}",
            "dashboard_url": f"http://127.0.0.1:{ports['dashboard']}",
            "ports": ports, "temp_dir": str(temp_dir), "cpus": cpus,
            "started_at": time.time(), "python": self._python(),
            "runner": env["PYTHONPATH"].split(os.pathsep)[0],
        }
        if proc.returncode != 0:
            self._stop_processes(state)
            tail = log.read_text()[-1500:]
            raise BackendError(f"could not start the local Ray instance (exit {proc.returncode}):\n{tail}",
                               f"the full output is in {log}")
        deadline = time.monotonic() + 60
        while not self._responds(state["dashboard_url"]):
            if time.monotonic() > deadline:
                self._stop_processes(state)
                raise BackendError("the local Ray dashboard did not come up within 60 s",
                                   f"see {log} and {temp_dir}/session_latest/logs")
            time.sleep(0.25)
        if self.runner_host:
            state["host_socket"] = self._start_host(state, env)
        self._write(state)
        return state

    def job_env(self, environ: Optional[Mapping[str, str]] = None) -> dict:
        """The environment of `ray start` and of the runner host, so of every job of this
        Ray: an allowlist (job_base_env) of `environ` (by default this process's), never
        orch's own, which under `orch serve` holds the store's URL, the metrics token, cloud
        keys and the variables `serve_env_secrets` lists for some users only."""
        env = {**job_base_env(os.environ if environ is None else environ, self.pass_env),
               **ray_env(self.token_file), **self._own_env()}
        # orch's runner under its shipped name, first on the path of every process of this
        # Ray (a job's driver, its workers, the runner host's warm processes): ahead of
        # nothing of the job's own, since a job's working_dir comes first on its path.
        env["PYTHONPATH"] = os.pathsep.join([str(self.runner_path())]
                                            + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        # `ray start` swaps a loopback --node-ip-address for the machine's routable address
        # (services.resolve_ip_for_localhost) unless multi-node is off, as on macOS: then
        # this Ray, and every process it starts, stays on 127.0.0.1 and no node can join.
        env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        # Ray starts a worker per CPU for the first driver to connect, with no runtime env:
        # here that driver is the runner host, whose runs ask for processes of their own
        # runtime envs (its warm pool), so those workers only sat idle, 80 MiB each.
        env["RAY_prestart_worker_first_driver"] = "0"
        return env

    def runner_path(self) -> Path:
        """The folder that holds orch's runner under its shipped name for this instance."""
        return link_in(self.dir / "runner")

    # -- what an instance run as another OS user changes (providers/isolated.py) ----------

    def _python(self) -> str:
        """The interpreter this instance's processes run: orch's own here."""
        return sys.executable

    def _ray_command(self) -> list:
        """What starts `ray start` under that interpreter."""
        return [ray_executable()]

    def _prepare(self, temp_dir: Path) -> None:
        """Make what this instance's processes need before they start: nothing here."""

    def _spawn_as(self) -> dict:
        """subprocess arguments that start this instance's processes: as orch's user here."""
        return {}

    def _own_env(self) -> dict:
        """What this instance's environment sets beside the allowlist: nothing here."""
        return {}

    def _gpu_args(self) -> list:
        """`ray start`'s GPU arguments: none here (Ray counts the machine's)."""
        return []

    def _mine(self, proc) -> bool:
        """Whether a process that names this instance is one of its own: all are here."""
        return True

    def _write(self, state: dict) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    def _start_host(self, state: dict, env: dict) -> str:
        """Start the runner host (jobs/host.py) beside this Ray; it listens once it is ready
        (it imports torch and Ray Train first), and jobs that come before wait for it."""
        sock = str(Path(state["temp_dir"]) / "orch-host.sock")
        state["host_runner"] = runner_digest()
        with open(self.dir / "host.log", "w") as out:
            # Its --address ends with this Ray's GCS port: `down` stops it with the rest. It
            # starts in the runner's folder: never where `orch local up` ran (another checkout
            # of orch there, or a job's modules, would be first on its path and its workers').
            proc = subprocess.Popen([self._python(), "-m", module("host"), "--socket", sock,
                                     "--workers", str(min(state["cpus"], _WARM_WORKERS)),
                                     "--address", state["address"],
                                     *(["--pool-mb", str(self.warm_pool_mb)]
                                       if self.warm_pool_mb is not None else [])],
                                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, cwd=env["PYTHONPATH"].split(os.pathsep)[0],
                                    start_new_session=True, **self._spawn_as())
        # Written here as well as by the host, so that an `up` right after this one finds it.
        Path(pid_file(sock)).write_text(str(proc.pid))
        self._give(Path(pid_file(sock)))
        return sock

    def _stop_old_host(self, state: dict) -> None:
        """Stop a runner host that another version of orch's runner started (an upgrade, or
        an edited checkout): it would speak the old protocol to new jobs' drivers. Only while
        no job runs on this Ray (providers/runner_host.py)."""
        running = [j for j in self._jobs(state) if j.get("type", "SUBMISSION") == "SUBMISSION"
                   and j.get("status") in ("PENDING", "RUNNING")]  # not the host's own driver
        started = in_session(self.temp_dir()).running()
        stop_stale_host(state["host_socket"], len(running) + len(started))

    def _jobs(self, state: dict) -> list[dict]:
        """The Ray jobs of this instance, from its Jobs API (no Ray import)."""
        req = urllib.request.Request(state["dashboard_url"] + "/api/jobs/", headers=self.headers())
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                jobs = json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise BackendError(f"the local Ray did not list its jobs: {e}",
                               "`orch local status`; `orch local down` and up again") from None
        return [j for j in jobs if isinstance(j, dict)] if isinstance(jobs, list) else []

    def _give(self, path: Path) -> None:
        """Hand a file orch made to this instance's user: nothing to do here."""

    def host_socket(self) -> Optional[str]:
        """The runner host's socket, where this instance has one (started with it)."""
        state = self._state()
        return state.get("host_socket") if state else None

    def down(self) -> int:
        """Stop this instance's processes; returns how many were stopped."""
        with self._lock():
            state = self._state()
            if not state:
                return 0
            n = self._stop_processes(state)
            self.state_file.unlink(missing_ok=True)
            return n

    def _processes(self, state: dict) -> list:
        import psutil

        roots = [p for p in processes_matching(state["temp_dir"], f":{state['ports']['gcs']}")
                 if self._mine(p)]
        found = {p.pid: p for p in roots}
        for p in roots:
            try:
                for child in p.children(recursive=True):
                    found.setdefault(child.pid, child)
            except psutil.Error:
                pass
        return list(found.values())

    def _stop_processes(self, state: dict, grace_s: float = 5.0) -> int:
        import psutil

        procs = self._processes(state)
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.terminate()
        _, alive = psutil.wait_procs(procs, timeout=grace_s)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=5)
        return len(procs)


def processes_matching(text: str, suffix: Optional[str] = None) -> list:
    """Processes (not this one) with `text` in an argument, or an argument ending in `suffix`:
    how an instance's processes are told from another Ray's on the same machine."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            args = p.info["cmdline"] or []
        except (psutil.Error, OSError):
            continue
        if p.pid != os.getpid() and any(text in a or (suffix and a.endswith(suffix)) for a in args):
            found.append(p)
    return found


# What of orch's environment every process of its local Ray (so every job there) gets: what
# a shell, Python, Ray and CUDA need to run, nothing that names or holds a value of orch's.
_BASE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
             "TERM", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "LD_LIBRARY_PATH", "SSL_CERT_FILE",
             "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")
_BASE_PREFIXES = ("LC_", "NCCL_")  # the locale; NCCL's network settings (which interface)


def job_base_env(environ: Mapping[str, str], pass_env: Sequence[str] = ()) -> dict[str, str]:
    """The allowlisted part of `environ`: _BASE_ENV, the locale and NCCL's settings, and the
    names the admin listed in `local.pass_env`."""
    keep = set(_BASE_ENV) | set(pass_env)
    return {k: v for k, v in environ.items() if k in keep or k.startswith(_BASE_PREFIXES)}


def ray_env(token_file: Path) -> dict:
    """Environment for processes that talk to an orch-started Ray (token in our own file)."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file),
            "RAY_USAGE_STATS_ENABLED": "0"}
