"""The small interface every place a job can run implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Protocol


@dataclass(frozen=True)
class Launch:
    """What to run on the target, independent of where that is."""

    job_id: str
    entrypoint: str  # a shell command line, run on the target
    env: dict = field(default_factory=dict)
    workdir: Optional[str] = None
    metadata: dict = field(default_factory=dict)


@dataclass(frozen=True)
class BackendState:
    status: str  # one of orch's statuses: PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED
    message: Optional[str] = None


class Provider(Protocol):
    name: str

    def prepare(self) -> None:
        """Make the target ready to accept a job (may start a local Ray; may block seconds)."""

    def submit(self, launch: Launch) -> str:
        """Start the job and return the backend's id for it. Submitting the same job_id
        twice never starts it twice: the second call returns the existing id."""

    def state(self, backend_id: str) -> BackendState:
        """The job's state as the backend sees it. Raises BackendError when unreachable."""

    def logs(self, backend_id: str) -> str:
        """Everything the job printed so far."""

    def cancel(self, backend_id: str) -> None:
        """Ask the backend to stop the job; a job that already ended is left as it is."""
