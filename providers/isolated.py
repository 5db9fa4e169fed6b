"""The server's local target in the per-user isolation mode (`serve_isolation = "per-user"`,
issue 46 part 3): each owner's jobs run in a Ray instance of that owner's own, as an OS user
of its own (providers/user_ray.py), as Ray advises for several users ("start a Ray cluster
for each user"). A job there holds its own instance's token alone: it cannot list another
owner's packages, read their logs or /proc, or stop their jobs, and cannot open ORCH_HOME.

An instance starts with its owner's first job, on the GPUs no other instance holds (as many
as the job asks for), is reused while it runs, and is stopped once it has run nothing for
`serve_isolation_idle_s` (`orch serve`'s scheduler asks every period: stop_idle). A job
without an owner (orch used on this machine, not through its API) runs on the shared
instance as before. Which instance ran a job is kept in ORCH_HOME/local/isolated.json.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

from providers.base import BackendState, Launch
from providers.job_index import locked, read_index, write_index
from providers.local import LocalProvider, local_ray
from providers.user_ray import UserRay, ensure_user, os_user_name

if TYPE_CHECKING:
    from orchestrator.settings import Settings
    from providers.ray_cluster import ClusterSnapshot


class UserProvider(LocalProvider):
    """The local target on one user's instance: its values taken out under that instance's
    interpreter (serve_isolation_python), which its user can run."""

    ray: UserRay

    def with_secrets(self, entrypoint: str) -> str:
        from providers.runner_package import module

        return f"{shlex.quote(self.ray.python)} -m {module('secret_env')} -- {entrypoint}"

    def _start_process(self, launch: Launch) -> Optional[str]:
        """Never started by orch itself: the job runs as this instance's OS user, whose Ray
        starts it (a Ray job)."""
        return None

    def submit(self, launch: Launch) -> str:
        """The launch with orch's interpreter (the runner's, and `python` on the job's PATH:
        LocalProvider.runner_command, shell_prelude) swapped for this instance's."""
        if self.ray.python != sys.executable:
            ours, theirs = Path(sys.executable), Path(self.ray.python)
            entrypoint = launch.entrypoint.replace(
                shlex.quote(str(ours)), shlex.quote(str(theirs))).replace(
                shlex.quote(str(ours.parent)), shlex.quote(str(theirs.parent)))
            launch = dataclasses.replace(launch, entrypoint=entrypoint)
        return super().submit(launch)


class IsolatedLocalProvider(LocalProvider):
    """The local target, one Ray instance per owner (the shared one for owner None)."""

    def __init__(self, settings: Settings, on_start: Optional[Callable[[], None]] = None):
        super().__init__(local_ray(settings), on_start)
        self.settings = settings
        self.index_file = settings.home / "local" / "isolated.json"
        self._users: dict[str, UserProvider] = {}

    # -- which instance ---------------------------------------------------------------

    def _user_ray(self, os_name: str, gpu_ids=()) -> UserRay:
        user = ensure_user(os_name, self.settings.serve_isolation_root)
        local = self.settings.local
        python = self.settings.serve_isolation_python
        return UserRay(self.settings.home / "isolated" / os_name, user, gpu_ids,
                       python=str(python) if python else None,
                       cpus=local.cpus, object_store_mb=local.object_store_mb,
                       runner_host=local.runner_host, pass_env=local.pass_env)

    def _delegate(self, os_name: str) -> UserProvider:
        if os_name not in self._users:
            self._users[os_name] = UserProvider(self._user_ray(os_name))
        return self._users[os_name]

    def _for_job(self, backend_id: str) -> Optional[UserProvider]:
        os_name = self._index().get(backend_id)
        return self._delegate(os_name) if os_name else None

    def _running(self) -> list[UserProvider]:
        root = self.settings.home / "isolated"
        names = sorted(p.name for p in root.iterdir()) if root.is_dir() else []
        found = []
        for name in names:
            p = self._delegate(name)
            if p.ray.state_file.exists() and p.ray.status() is not None:
                found.append(p)
        return found

    def _free_gpus(self, need: int) -> list[int]:
        """`need` of this machine's GPUs that no running instance holds (fewer when taken)."""
        from orchestrator.offers.local import detect_gpus

        held = {i for p in self._running() for i in (p.ray._state() or {}).get("gpu_ids", [])}
        free = [i for i in range(sum(detect_gpus().values())) if i not in held]
        return free[:need]

    # -- the Backend interface --------------------------------------------------------

    def prepare(self) -> None:
        """Nothing before a launch: submit starts (or reuses) the owner's instance."""

    def submit(self, launch: Launch) -> str:
        if launch.owner is None:
            super().prepare()
            return super().submit(launch)
        os_name = os_user_name(launch.owner, self.settings.serve_job_users)
        need = int(launch.tags.gpus)
        p = self._delegate(os_name)
        with self._index_lock():
            state = p.ray.status() if p.ray.state_file.exists() else None
            if state is not None and len(state.get("gpu_ids", [])) < need and not \
                    p.capacity().jobs:  # warm but with too few GPUs, and idle: start anew
                p.ray.down()
                state = None
            if state is None:
                p = self._users[os_name] = UserProvider(
                    self._user_ray(os_name, self._free_gpus(need)), self.on_start)
            p.prepare()
            ray_state = p.ray._state() or {}
            if "gpu_ids" not in ray_state:
                assert isinstance(p.ray, UserRay)
                p.ray._write({**ray_state, "gpu_ids": list(p.ray.gpu_ids)})
            backend_id = p.submit(launch)
            index = self._index()
            index[backend_id] = os_name
            self._write_index(index)
        _touch(p.ray.dir / "busy")
        self.address = p.address
        return backend_id

    def state(self, backend_id: str, info: Optional[dict] = None) -> BackendState:
        p = self._for_job(backend_id)
        if p is None:
            return super().state(backend_id, info)
        if p.ray.status() is None:
            return BackendState("FAILED", "its owner's Ray instance stopped while the job "
                                "was on it")
        return p.state(backend_id, info)

    def logs(self, backend_id: str) -> str:
        p = self._for_job(backend_id)
        if p is None:
            return super().logs(backend_id)
        return p.logs(backend_id) if p.ray.status() else p.saved_logs(backend_id)

    def saved_logs(self, backend_id: str) -> str:
        p = self._for_job(backend_id)
        return super().saved_logs(backend_id) if p is None else p.saved_logs(backend_id)

    def cancel(self, backend_id: str) -> None:
        p = self._for_job(backend_id)
        if p is None:
            return super().cancel(backend_id)
        if p.ray.status() is not None:
            p.cancel(backend_id)

    def forget_secrets(self, backend_id: str) -> None:
        p = self._for_job(backend_id)
        if p is None:
            return super().forget_secrets(backend_id)
        if p.ray.status() is not None:
            p.forget_secrets(backend_id)

    def gone(self) -> Optional[str]:
        return None  # each job's own instance answers for it (state)

    @property
    def running(self) -> bool:
        return True

    def stop_idle(self, everyone: bool = False) -> list[str]:
        """Stop each user's instance that has run nothing for serve_isolation_idle_s (orch
        serve's scheduler asks every period), or every one (`everyone`); the OS users whose
        instance was stopped."""
        stopped = []
        with self._index_lock():  # never between a submit's start of an instance and its job
            for p in self._running():
                if everyone:
                    p.ray.down()
                    stopped.append(p.ray.user.name)
                elif p.capacity().jobs:
                    _touch(p.ray.dir / "busy")
                elif _idle_for(p.ray.dir / "busy") > self.settings.serve_isolation_idle_s:
                    p.ray.down()
                    stopped.append(p.ray.user.name)
        return stopped

    def capacity(self) -> ClusterSnapshot:
        """This machine: what it holds, what every instance running on it uses."""
        from providers.ray_cluster import ClusterSnapshot

        machine = LocalProvider(self.ray).capacity()
        used = dict(machine.used)
        jobs = list(machine.jobs)
        for p in self._running():
            snap = p.capacity()
            if snap.jobs:
                _touch(p.ray.dir / "busy")
            for r in ("CPU", "GPU"):
                used[r] = used.get(r, 0.0) + snap.used.get(r, 0.0)
            jobs += snap.jobs
        return ClusterSnapshot(machine.address, machine.nodes, machine.total, used,
                               tuple(jobs), time.time())

    # -- which instance ran a job -----------------------------------------------------

    def _index(self) -> dict[str, str]:
        return read_index(self.index_file)

    def _write_index(self, index: dict) -> None:
        write_index(self.index_file, index)

    def _index_lock(self):
        return locked(self.index_file.with_suffix(".lock"))


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.touch()


def _idle_for(path: Path) -> float:
    try:
        return time.time() - os.stat(path).st_mtime
    except OSError:
        return float("inf")
