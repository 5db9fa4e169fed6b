"""A test backend added as docs/backends.md says a backend is added: this folder (its Backend
here, its offers in offers.py) and one `declare` and one `register` line, which
tests/unit/providers/test_new_backend.py plays. A rented target that runs each job as a
subprocess of this machine, its output in a file under the settings' home."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

from providers.base import Backend, BackendState, Launch
from providers.runner_package import link_in, module

NAME = "toy"


class ToyBackend(Backend):
    name = NAME

    def __init__(self, folder: Path):
        self.folder = folder
        self.address = f"toy://{folder}"
        self.runs: dict[str, subprocess.Popen] = {}

    @classmethod
    def module_command(cls, name: str) -> str:
        """The runner under this interpreter (its folder on the job's Python path: submit)."""
        return f"{shlex.quote(sys.executable)} -m {module(name)}"

    def prepare(self) -> None:
        link_in(self.folder)  # the runner, under its shipped name

    def submit(self, launch: Launch) -> str:
        run_id = launch.submission_id or launch.job_id
        if run_id not in self.runs:  # idempotent by the job's id
            with open(self.folder / f"{run_id}.log", "wb") as out:
                env = {**os.environ, **launch.env, **launch.secrets,
                       "PYTHONPATH": str(self.folder)}
                self.runs[run_id] = subprocess.Popen(
                    launch.entrypoint, shell=True, stdout=out, stderr=subprocess.STDOUT,
                    env=env, cwd=launch.workdir, start_new_session=True)
        return run_id

    def state(self, backend_id: str, info: Optional[dict] = None) -> BackendState:
        run = self.runs.get(backend_id)
        if run is None:
            return BackendState("FAILED", f"{self.address} has no job {backend_id}", unknown=True)
        code = run.poll()
        if code is None:
            return BackendState("RUNNING")
        if code < 0:
            return BackendState("CANCELLED", f"stopped by signal {-code}", exit_code=code)
        return BackendState("SUCCEEDED" if code == 0 else "FAILED",
                            None if code == 0 else f"exit code {code}", exit_code=code)

    def logs(self, backend_id: str) -> str:
        path = self.folder / f"{backend_id}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def cancel(self, backend_id: str) -> None:
        run = self.runs.get(backend_id)
        if run is not None and run.poll() is None:
            os.killpg(run.pid, signal.SIGTERM)
