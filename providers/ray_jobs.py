"""Runs jobs on a Ray cluster through the Ray Jobs API: the local instance or an on-prem one."""

from __future__ import annotations

from typing import Optional

from orchestrator.errors import BackendError
from providers.base import BackendState, Launch

# Ray's job states to orch's. STOPPED is what Ray calls a job stopped on request.
_STATES = {"PENDING": "PENDING", "RUNNING": "RUNNING", "SUCCEEDED": "SUCCEEDED",
           "FAILED": "FAILED", "STOPPED": "CANCELLED"}


class RayJobsProvider:
    def __init__(self, name: str, address: str, headers: Optional[dict] = None,
                 hint: str = "check that the Ray cluster is running"):
        self.name = name
        self.address = address
        self.headers = headers or {}
        self.hint = hint
        self._client = None

    def _connect(self):
        if self._client is None:
            from ray.job_submission import JobSubmissionClient

            try:
                self._client = JobSubmissionClient(self.address, headers=self.headers)
            except Exception as e:  # ConnectionError, AuthenticationError, version mismatch
                raise BackendError(f"cannot reach Ray at {self.address}: {_short(e)}", self.hint) from None
        return self._client

    def prepare(self) -> None:
        self._connect()

    def submit(self, launch: Launch, extra_runtime_env: Optional[dict] = None) -> str:
        client = self._connect()
        runtime_env: dict = {"env_vars": {**launch.env, **launch.secrets}, **(extra_runtime_env or {})}
        if launch.workdir:
            runtime_env["working_dir"] = launch.workdir
        try:
            return client.submit_job(entrypoint=launch.entrypoint, submission_id=launch.job_id,
                                     runtime_env=runtime_env,
                                     metadata={k: str(v) for k, v in launch.metadata.items()})
        except Exception as e:
            if "already exists" in str(e):
                return launch.job_id  # submitted before a crash: never launch twice
            raise BackendError(f"Ray at {self.address} rejected job {launch.job_id}: {_short(e)}",
                               self.hint) from None

    def state(self, backend_id: str, info: Optional[dict] = None) -> BackendState:
        client = self._connect()
        try:
            info = client.get_job_info(backend_id)
        except Exception as e:
            if "does not exist" in str(e) or "404" in str(e):
                return BackendState("FAILED", f"Ray at {self.address} has no job {backend_id}")
            raise BackendError(f"cannot read job {backend_id} from Ray at {self.address}: {_short(e)}",
                               self.hint) from None
        status = _STATES.get(str(info.status), "FAILED")
        message = info.message
        if status == "FAILED" and info.driver_exit_code is not None:
            message = f"{message} (exit code {info.driver_exit_code})"
        # Ray's own clock for when the job held the cluster: what the ledger prices.
        times = {k: t / 1000.0 for k, t in (("backend_start", info.start_time),
                                             ("backend_end", info.end_time)) if t}
        return BackendState(status, message, times or None)

    def logs(self, backend_id: str) -> str:
        try:
            return self._connect().get_job_logs(backend_id)
        except BackendError:
            raise
        except Exception as e:
            raise BackendError(f"cannot read logs of {backend_id} from Ray at {self.address}: {_short(e)}",
                               self.hint) from None

    def capacity(self):
        """What the cluster holds and runs now, over its dashboard (HasCapacity)."""
        from providers.ray_cluster import snapshot

        return snapshot(self.address, self.headers)

    def cancel(self, backend_id: str) -> None:
        try:
            self._connect().stop_job(backend_id)
        except BackendError:
            raise
        except Exception as e:
            raise BackendError(f"cannot stop {backend_id} on Ray at {self.address}: {_short(e)}",
                               self.hint) from None


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[-1] if text else type(e).__name__
