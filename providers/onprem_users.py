"""The on-prem target in the per-user isolation mode (`onprem_isolation = "per-user"`, issue
46 part 3): each owner's jobs run in a Ray cluster of that owner's own on the owned nodes,
as an OS user of its own, with its own token, temp dirs and GPUs (jobs/user_cluster.py).

Why through the base cluster rather than SSH: the base cluster already reaches every node
as root, places work where there is room and hands out GPUs, so the user's cluster is a
Ray job of it holding a placement group (one bundle a node) whose actors run `ray start` as
the user: it needs no SSH keys or sudo on the nodes, its GPUs are the ones Ray gave the
bundle (never another user's), and what it holds stays counted on the base cluster, which
orch's queue reads. Only orch submits to the base cluster in this mode; clients' jobs go to
their own clusters, whose tokens orch keeps under ORCH_HOME.

A cluster starts with its owner's first job (sized to it: its nodes, and its CPUs and GPUs
a node), is reused while it runs, and is stopped (its base job stopped: every process of
the user on every node ends) once it ran nothing for `serve_isolation_idle_s`. A job with
no owner (orch used on a node, not through its API) runs on the base cluster as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from orchestrator.base.errors import BackendError
from providers.base import BackendState, Launch
from providers.job_index import locked, read_index, write_index
from providers.onprem import HINT, OnPremProvider
from providers.ray_cluster import get_json
from providers.user_ray import os_user_name

if TYPE_CHECKING:
    from orchestrator.settings import Settings
    from providers.ray_cluster import ClusterSnapshot

_START_TIMEOUT_S = 300.0


class UserClusterProvider(OnPremProvider):
    """The Jobs API of one owner's cluster, with its token (a file of orch's)."""

    def __init__(self, state: dict, token_file: Path):
        super().__init__(state["dashboard_url"], token_file)
        self.cluster = state


class OnPremUsersProvider(OnPremProvider):
    """The on-prem target, one Ray cluster per owner (the base cluster for owner None)."""

    def __init__(self, settings: Settings):
        assert settings.ray_address
        super().__init__(settings.ray_address, settings.ray_token_file)
        self.settings = settings
        self.dir = settings.home / "onprem-users"
        self.index_file = self.dir / "index.json"

    # -- one owner's cluster ----------------------------------------------------------

    def _paths(self, os_name: str) -> tuple[Path, Path, Path]:
        folder = self.dir / os_name
        return folder / "cluster.json", folder / "token", folder / "busy"

    def _cluster(self, os_name: str) -> Optional[UserClusterProvider]:
        """The owner's cluster while its base job runs and its dashboard answers."""
        state_file, token_file, _ = self._paths(os_name)
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            return None
        if super().state(state["holder"]).status != "RUNNING":
            return None
        p = UserClusterProvider(state, token_file)
        try:  # a plain HTTP probe: Ray's Jobs client imports Ray (seconds) and can hang
            get_json(p.address, "/api/version", p.headers, timeout=5.0, hint=HINT)
        except BackendError:
            return None
        return p

    def _start(self, os_name: str, launch: Launch) -> UserClusterProvider:
        """A new cluster for `os_name`, sized to `launch`, through the base cluster."""
        state_file, token_file, busy = self._paths(os_name)
        state_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        token = secrets.token_hex(24)
        token_file.unlink(missing_ok=True)
        fd = os.open(token_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token)
        nodes = max(1, launch.tags.nodes)
        python = self.settings.serve_isolation_python
        spec = {"user": os_name, "root": str(self.settings.serve_isolation_root),
                "token": token, "nodes": nodes,
                "cpus": max((launch.tags.cpus or 1) / nodes, 0.01),
                "gpus": launch.tags.gpus / nodes,
                "python": str(python) if python else None,
                "object_store_mb": self.settings.local.object_store_mb}
        from jobs.user_cluster import FAILED, SPEC_VAR, UP

        holder = f"orch-uc-{os_name}-{secrets.token_hex(4)}"
        client = self._connect()
        try:
            client.submit_job(
                entrypoint=self.module_command("user_cluster"), submission_id=holder,
                runtime_env={**self.extra_runtime_env(), "env_vars": {
                    SPEC_VAR: json.dumps(spec), "RAY_JOB_STOP_WAIT_TIME_S": "30"}},
                metadata={"orch_user_cluster": os_name})
        except Exception as e:  # noqa: BLE001
            raise BackendError(f"the base cluster at {self.address} refused to start "
                               f"{os_name}'s cluster: {e}", self.hint) from None
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            lines = super().logs(holder).splitlines()
            up = next((x[len(UP):] for x in lines if x.startswith(UP)), None)
            failed = next((x[len(FAILED):] for x in lines if x.startswith(FAILED)), None)
            ended = super().state(holder).status not in ("PENDING", "RUNNING")
            if up is not None and not ended:
                break
            if failed is not None or ended or time.monotonic() > deadline:
                with contextlib.suppress(Exception):
                    client.stop_job(holder)
                why = json.loads(failed)["error"] if failed else "\n".join(lines[-15:])
                raise BackendError(f"could not start {os_name}'s own Ray cluster: {why}",
                                   "`orch cluster status` shows what the cluster has free; "
                                   f"the base cluster's job {holder} has the full log")
            time.sleep(0.5)
        state = {**json.loads(up), "holder": holder, "nodes_n": nodes, "cpus": spec["cpus"],
                 "gpus": spec["gpus"], "started_at": time.time()}
        tmp = state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(state_file)
        busy.touch()
        p = UserClusterProvider(state, token_file)
        p.prepare()
        return p

    def _stop(self, os_name: str) -> None:
        state_file, token_file, _ = self._paths(os_name)
        with contextlib.suppress(OSError, ValueError, KeyError):
            holder = json.loads(state_file.read_text())["holder"]
            with contextlib.suppress(Exception):
                self._connect().stop_job(holder)
            deadline = time.monotonic() + 60
            while super().state(holder).status in ("PENDING", "RUNNING") and \
                    time.monotonic() < deadline:
                time.sleep(0.5)
        state_file.unlink(missing_ok=True)
        token_file.unlink(missing_ok=True)

    # -- the Backend interface --------------------------------------------------------

    def submit(self, launch: Launch) -> str:
        if launch.owner is None:
            return super().submit(launch)
        os_name = os_user_name(launch.owner, self.settings.serve_job_users)
        nodes = max(1, launch.tags.nodes)
        gpus = launch.tags.gpus / nodes
        with self._lock():
            p = self._cluster(os_name)
            if p is not None and (p.cluster["nodes_n"] < nodes or p.cluster["gpus"] < gpus) \
                    and not p.capacity().jobs:  # warm, too small for this job, idle: anew
                self._stop(os_name)
                p = None
            if p is None:
                self._stop(os_name)  # what a stopped or failed cluster left
                p = self._start(os_name, launch)
            backend_id = p.submit(launch)
            index = self._index()
            index[backend_id] = os_name
            self._write_index(index)
        self._paths(os_name)[2].touch()
        return backend_id

    def _for_job(self, backend_id: str) -> tuple[Optional[str], Optional[UserClusterProvider]]:
        os_name = self._index().get(backend_id)
        return os_name, (self._cluster(os_name) if os_name else None)

    def state(self, backend_id: str, info: Optional[dict] = None) -> BackendState:
        os_name, p = self._for_job(backend_id)
        if os_name is None:
            return super().state(backend_id, info)
        if p is None:
            return BackendState("FAILED", "its owner's Ray cluster stopped while the job "
                                "was on it")
        return p.state(backend_id, info)

    def logs(self, backend_id: str) -> str:
        os_name, p = self._for_job(backend_id)
        if os_name is None:
            return super().logs(backend_id)
        if p is None:
            raise BackendError(f"the Ray cluster that ran {backend_id} is stopped, and its "
                               "log with it", "orch keeps what it read of it (`orch logs`)")
        return p.logs(backend_id)

    def cancel(self, backend_id: str) -> None:
        os_name, p = self._for_job(backend_id)
        if os_name is None:
            return super().cancel(backend_id)
        if p is not None:
            p.cancel(backend_id)

    def forget_secrets(self, backend_id: str) -> None:
        os_name, p = self._for_job(backend_id)
        if os_name is None:
            return super().forget_secrets(backend_id)
        if p is not None:
            p.forget_secrets(backend_id)

    def capacity(self) -> ClusterSnapshot:
        """The base cluster (what each user's cluster holds is used there), with the jobs of
        every user's cluster."""
        import dataclasses

        snap = super().capacity()
        jobs = list(snap.jobs)
        for os_name in self._names():
            p = self._cluster(os_name)
            if p is not None:
                with contextlib.suppress(BackendError):
                    theirs = p.capacity().jobs
                    if theirs:
                        self._paths(os_name)[2].touch()
                    jobs += theirs
        return dataclasses.replace(snap, jobs=tuple(jobs))

    def stop_idle(self, everyone: bool = False) -> list[str]:
        """Stop each user's cluster that ran nothing for serve_isolation_idle_s, or every
        one (`everyone`): the OS users whose cluster was stopped."""
        stopped = []
        with self._lock():
            for os_name in self._names():
                p = self._cluster(os_name)
                if p is None:
                    if self._paths(os_name)[0].exists():
                        self._stop(os_name)
                    continue
                if not everyone:
                    with contextlib.suppress(BackendError):
                        if p.capacity().jobs:
                            self._paths(os_name)[2].touch()
                            continue
                    if _idle_for(self._paths(os_name)[2]) <= self.settings.serve_isolation_idle_s:
                        continue
                self._stop(os_name)
                stopped.append(os_name)
        return stopped

    # -- which cluster ran a job ------------------------------------------------------

    def _names(self) -> list[str]:
        return sorted(p.name for p in self.dir.iterdir() if p.is_dir()) if self.dir.is_dir() else []

    def _index(self) -> dict[str, str]:
        return read_index(self.index_file)

    def _write_index(self, index: dict) -> None:
        write_index(self.index_file, index)

    def _lock(self):
        return locked(self.dir / "lock")


def _idle_for(path: Path) -> float:
    try:
        return time.time() - os.stat(path).st_mtime
    except OSError:
        return float("inf")
