"""Local-only mode: the Ray Jobs provider pointed at a Ray instance orch runs on this machine."""

from __future__ import annotations

import secrets
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from orchestrator.base.targets import LOCAL
from providers.base import BackendState, KeepsLogs, Launch
from providers.local_ray import LocalRay
from providers.process_jobs import ProcessJobs, in_session, raylet_of, read_file
from providers.ray_jobs import RayJobsProvider

if TYPE_CHECKING:
    from orchestrator.settings import Settings
    from providers.ray_cluster import ClusterSnapshot


def local_ray(settings: Settings) -> LocalRay:
    """The local Ray instance of these settings (started or not)."""
    return LocalRay(settings.home, cpus=settings.local.cpus,
                    object_store_mb=settings.local.object_store_mb,
                    runner_host=settings.local.runner_host, pass_env=settings.local.pass_env,
                    warm_pool_mb=settings.local.warm_pool_mb)


class LocalProvider(RayJobsProvider, KeepsLogs):
    """Jobs on this machine, under the interpreter orch runs in (the local Ray's too)."""

    def __init__(self, ray: LocalRay, on_start: Optional[Callable[[], None]] = None):
        self.ray = ray
        self.on_start = on_start
        state = ray.status(details=False) if ray.state_file.exists() else None
        super().__init__(LOCAL, state["dashboard_url"] if state else "", ray.headers(),
                         hint="`orch local status` shows the local Ray; `orch local up` starts it")

    @classmethod
    def default_storage(cls, settings: Settings) -> Optional[str]:
        """ORCH_HOME/checkpoints: this machine's disk is where the job runs; none in the
        per-user isolation mode, whose jobs cannot open ORCH_HOME (Ray Train's default then:
        ray_results in the job user's home)."""
        if settings.serve_isolation == "per-user":
            return None
        return str(settings.home / "checkpoints")

    @classmethod
    def module_command(cls, name: str) -> str:
        """The runner's module under this very interpreter, which has orch and its Ray (whose
        processes import it under its shipped name: LocalRay puts it on their path)."""
        from providers.runner_package import module

        return f"{shlex.quote(sys.executable)} -m {module(name)}"

    @classmethod
    def shell_prelude(cls) -> str:
        """`python` in a run: or setup: line means the interpreter orch (and its Ray) runs in;
        for a job orch starts itself, a warm one of it (providers/warm_python.py)."""
        return (f'export PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"\n'
                '[ -z "${ORCH_WARM_PYTHON_BIN:-}" ] || export PATH="$ORCH_WARM_PYTHON_BIN:$PATH"\n')

    def job_env(self, public: dict) -> dict:
        """Where the local Ray has a runner host: its socket, for the runner to hand the job to
        (jobs/hosted.py), and which of the job's values are its own."""
        sock = self.ray.host_socket()
        if sock is None:
            return {}
        from jobs.hosted import HOST_VAR, PUBLIC_VAR

        return {HOST_VAR: sock, PUBLIC_VAR: ",".join(sorted(public))}

    def prepare(self) -> None:
        state = self.ray.up(on_start=self.on_start)
        if state["dashboard_url"] != self.address:
            self.address, self.headers, self._client = state["dashboard_url"], self.ray.headers(), None
        super().prepare()

    # -- jobs started without a Ray job (providers/process_jobs.py) ----------------------

    @property
    def processes(self) -> ProcessJobs:
        """The jobs orch started itself on the local Ray's current session."""
        return in_session(self.ray.temp_dir())

    def submit(self, launch: Launch) -> str:
        started = self._start_process(launch)
        return started if started is not None else super().submit(launch)

    def _start_process(self, launch: Launch) -> Optional[str]:
        """A job on the local Ray started by orch itself (providers/process_jobs.py): its
        id. None for one that goes through Ray's Jobs API: a workdir only Ray's client packs,
        or a `train:` job while no runner host answers (its runner would drive Ray itself).
        A `run:` job's own `ray.init()` finds its job's runtime env as a Ray job's driver
        does, so an unmodified Ray script runs the same either way."""
        from jobs import job_values, secret_env
        from jobs.hosted import RAYLET_VAR, host_alive
        from jobs.request import ENV_VAR
        from providers.ray_package import plain_package

        state = self.ray._state() if self.address else None
        if not state:
            return None
        sock = self.ray.host_socket()
        if ENV_VAR in launch.env and not (sock and host_alive(sock)):
            return None
        package = plain_package(Path(launch.workdir), launch.excludes) if launch.workdir else b""
        if package is None:
            return None
        raylet = state.get("raylet_pid")
        if not (isinstance(raylet, int) and job_values.named_raylet(str(raylet))):
            raylet = raylet_of(state["temp_dir"])
            if raylet:
                self.ray._write({**state, "raylet_pid": raylet})
        public, hidden = launch.split_env()
        ray_env = {**public, **self.job_env(public)}  # what a Ray job's runtime env held
        # A Ray job inherits the environment the Ray was started in (`orch local up`'s, and
        # the values `local.pass_env` names from it), not the submitting process's.
        base = self.ray.job_env(_environ_of(raylet))
        env = {**base, **ray_env, "RAY_ADDRESS": state["address"]}
        if raylet:
            env[RAYLET_VAR] = str(raylet)
        if ENV_VAR not in launch.env:  # a run: command's `python` forked warm
            from providers import warm_python

            if public.get(warm_python.SOCKET_VAR) != "0":  # the job's envs turn it off
                env.update(warm_python.job_env(Path(state["temp_dir"]), self.ray.runner_path(),
                                               base, raylet))
        entrypoint, secret_file = launch.entrypoint, None
        if hidden:
            name = f".orch-env-{secrets.token_hex(8)}"
            env[secret_env.FILE_VAR] = name
            secret_file = (name, secret_env.dumps(hidden).encode())
            entrypoint = self.with_secrets(entrypoint)
        return self.processes.submit(launch.submission_id or launch.job_id, entrypoint, env,
                                     package or None, launch.tags.as_strings(), secret_file,
                                     ray_env=ray_env)

    def state(self, backend_id: str, info: Optional[dict] = None) -> BackendState:
        if self.processes.has(backend_id):
            launched = (info or {}).get("launched_at")
            return self.processes.state(backend_id, launched if isinstance(launched, (int, float))
                                        else None)
        return super().state(backend_id, info)

    def logs(self, backend_id: str) -> str:
        if self.processes.has(backend_id):
            return self.processes.logs(backend_id)
        return super().logs(backend_id)

    def cancel(self, backend_id: str) -> None:
        if self.processes.has(backend_id):
            return self.processes.cancel(backend_id)
        return super().cancel(backend_id)

    def forget_secrets(self, backend_id: str) -> None:
        if self.processes.has(backend_id):
            return self.processes.forget_secrets(backend_id)
        return super().forget_secrets(backend_id)

    def gone(self) -> Optional[str]:
        """The local Ray is not running: every job it ran ended with it."""
        if self.running:
            return None
        return ("the local Ray instance stopped while the job was running "
                "(`orch local up` starts a new one)")

    def saved_logs(self, backend_id: str) -> str:
        """A stopped local Ray leaves its session's files on disk: the job's driver log there."""
        if self.processes.has(backend_id):
            return self.processes.logs(backend_id)
        names = [f"logs/job-driver-{backend_id}.log"]
        if self.processes.folder(backend_id):  # one of an earlier session's
            names.append(f"orch-jobs/{backend_id}/log")
        for path in sorted(p for name in names for p in self.ray.temp_dir().glob(f"session_*/{name}")):
            return read_file(path) or ""
        return ""

    def capacity(self) -> ClusterSnapshot:
        """What the local Ray holds and runs now; before it is started, what it will hold
        (`local.cpus`, or every CPU, and this machine's GPUs) with nothing running."""
        if self.running:
            return self.processes.add_to(super().capacity())
        import os

        from orchestrator.offers.local import detect_gpus
        from providers.ray_cluster import ClusterSnapshot

        cpus = float(self.ray.cpus or os.cpu_count() or 1)
        return ClusterSnapshot("local Ray (not started)", (), total={
            "CPU": cpus, "GPU": float(sum(detect_gpus().values()))}, used={})

    @property
    def running(self) -> bool:
        return bool(self.address)


def _environ_of(pid: Optional[int]) -> Optional[dict]:
    """The environment process `pid` was started with (the local Ray's raylet); None where
    it cannot be read."""
    if not pid:
        return None
    import psutil

    try:
        return psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return None
