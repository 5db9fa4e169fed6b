"""One root error and a few subclasses that callers catch by meaning."""

from __future__ import annotations


class OrchError(Exception):
    """Anything orch reports to the user as one message; `hint` says what to do next."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  -> {self.hint}"


class InputError(OrchError):
    """Bad input from the user (job file, settings, arguments): exit 2, nothing written."""

    exit_code = 2


class SpecError(InputError):
    """A job file problem, located by file, line and key."""

    def __init__(self, file: str, line: int | None, key: str | None, problem: str,
                 hint: str | None = None):
        where = file if line is None else f"{file}:{line}"
        what = f"{key}: {problem}" if key else problem
        super().__init__(f"{where}: {what}", hint)
        self.file, self.line, self.key, self.problem = file, line, key, problem


class NotFound(OrchError):
    """A job id or other named thing that does not exist."""

    exit_code = 2


class Forbidden(OrchError):
    """Another user's job or schedule (HTTP 403)."""

    exit_code = 2


class BackendError(OrchError):
    """The place a job runs (local Ray, a cluster, a cloud) failed or cannot be reached."""


class StoreError(OrchError):
    """The job store cannot be opened or is not orch's."""
