"""Local-only mode: the Ray Jobs provider pointed at a Ray instance orch runs on this machine."""

from __future__ import annotations

from typing import Callable, Optional

from providers.local_ray import LocalRay
from providers.ray_jobs import RayJobsProvider


class LocalProvider(RayJobsProvider):
    def __init__(self, ray: LocalRay, on_start: Optional[Callable[[], None]] = None):
        self.ray = ray
        self.on_start = on_start
        state = ray.status() if ray.state_file.exists() else None
        super().__init__("local", state["dashboard_url"] if state else "", ray.headers(),
                         hint="`orch local status` shows the local Ray; `orch local up` starts it")

    def prepare(self) -> None:
        state = self.ray.up(on_start=self.on_start)
        if state["dashboard_url"] != self.address:
            self.address, self.headers, self._client = state["dashboard_url"], self.ray.headers(), None
        super().prepare()

    def capacity(self):
        """What the local Ray holds and runs now; before it is started, what it will hold
        (`local.cpus`, or every CPU, and this machine's GPUs) with nothing running."""
        if self.running:
            return super().capacity()
        import os

        from providers.local_offer import detect_gpus
        from providers.ray_cluster import ClusterSnapshot

        cpus = float(self.ray.cpus or os.cpu_count() or 1)
        return ClusterSnapshot("local Ray (not started)", (), total={
            "CPU": cpus, "GPU": float(sum(detect_gpus().values()))}, used={})

    @property
    def running(self) -> bool:
        return bool(self.address)
