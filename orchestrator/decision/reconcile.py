"""Reconcile: what to do with a job's record, given what is known of its backend and now.

Pure policy, no I/O: the service (orchestrator/service/following.py) gathers the facts
(the record, the submitting process, the backend's answer), asks here, and carries the
step out. A fact not gathered yet is None, and the step says to ask for it ("ask"), so
the service asks the backend only when the answer can change the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
NEVER_LAUNCHED = ("never launched: the orch that submitted it stopped before the launch; "
                  "submit the job again")
ADOPTED = "found on the backend after its orch stopped: followed from here"

Action = Literal["keep", "ask", "fail", "adopt", "finish", "running"]


@dataclass(frozen=True)
class Step:
    """`keep` the record as it is; `ask` the backend, then decide again; `fail` it now
    (FAILED, `message`), before any launch; `adopt` the backend's job under orch's id;
    `finish` it (`status`, `message`: its log and ledger line are kept); `running`: record
    RUNNING with `message`, read its log's metrics and check its budget."""
    action: Action
    status: Optional[str] = None
    message: Optional[str] = None


def unlaunched(*, age_s: float, submitter_gone: bool, backend_gone: bool,
               backend_knows: Optional[bool], grace_s: float, launch_grace_s: float) -> Step:
    """A job recorded with no backend id: its submit died, or is still launching. While the
    submitting orch lives (or for `grace_s` when it cannot be told), leave it; then the
    backend, which knows a job by orch's id, decides: a job it has is adopted, one it does
    not have failed, except within its `launch_grace_s` (a cloud launch takes minutes to
    reach SkyPilot's queue). A backend that is itself gone (the local Ray stopped) has
    nothing to ask."""
    if not submitter_gone and age_s < grace_s:
        return Step("keep")
    if backend_gone:
        return Step("fail", "FAILED", NEVER_LAUNCHED)
    if backend_knows is None:
        return Step("ask")
    if backend_knows:
        return Step("adopt", message=ADOPTED)
    if age_s < launch_grace_s:
        return Step("keep")
    return Step("fail", "FAILED", NEVER_LAUNCHED)


def launched(*, gone: Optional[str], backend_status: Optional[str],
             backend_message: Optional[str] = None, cancel_requested: bool = False,
             budget_stop: Optional[str] = None) -> Step:
    """A launched job, by what its backend says. `gone`: why the backend itself is no more
    (the job went with it); `backend_status` None: not asked yet. An end the backend
    reports is CANCELLED when orch asked to cancel (a cancel reaches a backend as a stop),
    and says why orch stopped it at its budget when it did."""
    if gone:
        return Step("finish", "FAILED", gone)
    if backend_status is None:
        return Step("ask")
    if backend_status in TERMINAL:
        return Step("finish", "CANCELLED" if cancel_requested else backend_status,
                    budget_stop or backend_message)
    if backend_status == "RUNNING":
        return Step("running", "RUNNING", backend_message)
    return Step("keep")


def group_status(tasks: list[tuple[str, bool]]) -> str:
    """A job group's one status from its tasks' (status, primary): running while any task
    is not finished; then SUCCEEDED when every primary task succeeded (an auxiliary task
    stopped at the group's end is how a group ends well), FAILED when one failed, else
    CANCELLED."""
    ended = ("SUCCEEDED", "FAILED", "CANCELLED")
    if any(s not in ended for s, _ in tasks):
        return "PENDING" if all(s == "PENDING" for s, _ in tasks) else "RUNNING"
    primary = [s for s, p in tasks if p] or [s for s, _ in tasks]
    if all(s == "SUCCEEDED" for s in primary):
        return "SUCCEEDED"
    return "FAILED" if "FAILED" in primary else "CANCELLED"
