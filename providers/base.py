"""The small interface every place a job can run implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol

from orchestrator.redact import looks_secret


@dataclass(frozen=True)
class Launch:
    """What to run on the target, independent of where that is."""

    job_id: str
    entrypoint: str  # a shell command line, run on the target
    env: dict = field(default_factory=dict)
    # Passed to the job like `env`, but secret: never logged, shown or kept by orch; a
    # backend that can keep them apart (SkyPilot) is told they are secrets, and Ray, which
    # logs and shows a runtime env, gets them in a file instead (jobs/secret_env.py).
    # Credential-like names in `env` are treated the same (split_env).
    secrets: dict = field(default_factory=dict)
    workdir: Optional[str] = None
    metadata: dict = field(default_factory=dict)
    # For a cloud VM: what SkyPilot provisions. `offers` are the chosen offer first, then
    # the next-best in cost order, each a dict as `orch plan --json` shows alternatives.
    setup: Optional[str] = None
    file_mounts: dict = field(default_factory=dict)
    offers: tuple = ()
    num_nodes: int = 1
    disk_size: Optional[int] = None

    def split_env(self) -> tuple[dict, dict]:
        """(public, secret): `secrets` and every credential-like `env` name on the secret
        side, the rest public. A backend that logs or shows its job environment (Ray) is
        given only the public part."""
        return split_env(self.env, self.secrets)


def split_env(env: dict, secrets: dict) -> tuple[dict, dict]:
    public = {k: v for k, v in env.items() if not looks_secret(k) and k not in secrets}
    hidden = {**{k: v for k, v in env.items() if looks_secret(k)}, **secrets}
    return public, hidden


@dataclass(frozen=True)
class BackendState:
    status: str  # one of orch's statuses: PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED
    message: Optional[str] = None
    info: Optional[dict] = None  # facts to keep with the job (a cloud job's cost ledger)


class Provider(Protocol):
    name: str

    def prepare(self) -> None:
        """Make the target ready to accept a job (may start a local Ray; may block seconds)."""

    def submit(self, launch: Launch) -> str:
        """Start the job and return the backend's id for it. Submitting the same job_id
        twice never starts it twice: the second call returns the existing id."""

    def state(self, backend_id: str, info: Optional[dict] = None) -> BackendState:
        """The job's state as the backend sees it; `info` is what orch kept from earlier
        calls. Raises BackendError when the backend cannot be reached."""

    def logs(self, backend_id: str) -> str:
        """Everything the job printed so far."""

    def cancel(self, backend_id: str) -> None:
        """Ask the backend to stop the job; a job that already ended is left as it is."""


class HasCapacity(Protocol):
    """A target with a fixed size (a Ray cluster), whose queue `orch serve` holds until a
    job fits. A provider without `capacity` (the cloud) rents what each job needs."""

    def capacity(self):
        """A `providers.ray_cluster.ClusterSnapshot` of what the target holds and runs now,
        read in seconds; raises BackendError when it cannot be read."""
