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

    @property
    def running(self) -> bool:
        return bool(self.address)
