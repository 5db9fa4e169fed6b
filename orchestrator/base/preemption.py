"""The preemption contract's fixed terms, shared by the service (owned hardware's requeue)
and the cloud backend (SkyPilot's recovery): docs/preemption.md is the contract itself."""

from __future__ import annotations

import re
from typing import Final

# sysexits.h EX_TEMPFAIL ("try again later"): a job that exits with it has saved what it
# needs and asks to be run again; it is not a failure.
PREEMPTED_EXIT: Final = 75
EXIT_VAR: Final = "ORCH_PREEMPTED_EXIT_CODE"  # every job is told the code here
CHECKPOINT_VAR: Final = "ORCH_CHECKPOINT_PATH"  # where its checkpoints live across its runs
RESTARTS_VAR: Final = "ORCH_RESTARTS"  # how many runs it had before this one (0: absent)


def run_name(job_id: str, run: int) -> str:
    """The backend's name for a job's `run`th run (from 1): the job's id, then `<id>-r<n>`."""
    return job_id if run <= 1 else f"{job_id}-r{run}"


def job_of(backend_id: str) -> str:
    """The orch job a backend's run belongs to (run_name's inverse)."""
    return re.sub(r"-r\d+$", "", backend_id)
