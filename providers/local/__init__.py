"""Local-only mode: the Ray Jobs provider pointed at a Ray instance orch runs on this machine."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from orchestrator.base.targets import LOCAL
from providers.base import KeepsLogs
from providers.local_ray import LocalRay
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
        """`python` in a run: or setup: line means the interpreter orch (and its Ray) runs in."""
        return f'export PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"\n'

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

    def gone(self) -> Optional[str]:
        """The local Ray is not running: every job it ran ended with it."""
        if self.running:
            return None
        return ("the local Ray instance stopped while the job was running "
                "(`orch local up` starts a new one)")

    def saved_logs(self, backend_id: str) -> str:
        """A stopped local Ray leaves its session's files on disk: the job's driver log there."""
        for path in sorted(self.ray.temp_dir().glob(f"session_*/logs/job-driver-{backend_id}.log")):
            return path.read_text(errors="replace")
        return ""

    def capacity(self) -> ClusterSnapshot:
        """What the local Ray holds and runs now; before it is started, what it will hold
        (`local.cpus`, or every CPU, and this machine's GPUs) with nothing running."""
        if self.running:
            return super().capacity()
        import os

        from orchestrator.offers.local import detect_gpus
        from providers.ray_cluster import ClusterSnapshot

        cpus = float(self.ray.cpus or os.cpu_count() or 1)
        return ClusterSnapshot("local Ray (not started)", (), total={
            "CPU": cpus, "GPU": float(sum(detect_gpus().values()))}, used={})

    @property
    def running(self) -> bool:
        return bool(self.address)
