"""Pipelines: a SkyPilot file of several tasks, recorded as one job a stage, each placed on
its own. A stage launches once the stage before it has succeeded, by whichever orch brings
its record in step first (the `orch submit` that follows the pipeline, an `orch status`,
`orch serve`'s reconcile), and ends CANCELLED, never started, when that one ended otherwise.
"""

from __future__ import annotations

import os
import socket
from typing import Callable, Optional

from orchestrator.base.errors import BackendError, InputError, OrchError
from orchestrator.records import JobRow
from orchestrator.service.core import Core
from orchestrator.service.respec import spec_from_record
from orchestrator.service.submitting import Submitted, check, launch, record
from orchestrator.store import TERMINAL


def submit_pipeline(core: Core, pipeline, idempotency_key: Optional[str] = None) -> list[Submitted]:
    """Check and place every stage first (a stage that cannot run refuses the whole
    pipeline, nothing written), then record them all, each as it was placed, and
    launch the first. A key seen
    before returns that pipeline's stages, launching nothing."""
    checked = [check(core, spec) for spec in pipeline.stages]
    out: list[Submitted] = []
    prev: Optional[JobRow] = None
    n = len(pipeline.stages)
    for i, spec in enumerate(pipeline.stages):
        info: dict = {"pipeline": pipeline.name, "stage": i + 1, "stages": n,
                      "env_secrets": sorted(k for k, v in spec.secrets.items() if v is None)}
        if prev is not None:
            info["after"] = prev.id
        key = f"{idempotency_key}:stage{i + 1}" if idempotency_key else None
        rec, secrets, existing = record(core, spec, key, info=info, checked=checked[i])
        if not existing:
            if prev is None:
                rec = launch(core, rec, spec, secrets)
            else:
                core.stages[rec.id] = (spec, secrets)  # this process launches it with these
                rec = core.store.set_status(rec.id, "PENDING", f"waits for stage {i} "
                                            f"({prev.id}) to succeed")
        out.append(Submitted(rec, existing))
        prev = rec
    return out


def advance_stage(core: Core, rec: JobRow, refresh: Callable[[Core, JobRow], JobRow]) -> JobRow:
    """A stage that waits: launched once the stage before it succeeded; CANCELLED when
    that one failed or was cancelled; left waiting while it runs. `refresh` brings the
    stage before in step with its backend (following.refresh, which calls this)."""
    assert rec.info.after is not None
    prev = core.store.get(rec.info.after)
    if prev.status not in TERMINAL:
        try:
            prev = refresh(core, prev)
        except OrchError:
            return rec  # its backend does not answer now: asked again next time
    if prev.status not in TERMINAL:
        return rec
    if prev.status != "SUCCEEDED":
        return core.store.set_status(rec.id, "CANCELLED", f"not started: stage "
                                     f"{prev.info.stage} ({prev.id}) ended {prev.status}")
    me = f"{socket.gethostname()}:{os.getpid()}"
    if not core.store.claim(rec.id, me):
        return core.store.get(rec.id)  # cancelled, or another orch launches it
    spec, secrets = core.stages.pop(rec.id, (None, None))
    rec = core.store.set_status(rec.id, "PENDING", f"stage {prev.info.stage} ({prev.id}) "
                                "succeeded: launching")
    try:
        return launch(core, rec, spec if spec is not None else spec_from_record(rec), secrets)
    except InputError as e:  # a secret only the submitting process had
        return core.store.set_status(rec.id, "FAILED", f"launch failed: {e.message}")
    except BackendError:
        return core.store.get(rec.id)  # launch() recorded it FAILED, with why
