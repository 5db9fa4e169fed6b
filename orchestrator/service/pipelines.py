"""Pipelines: a SkyPilot file of several tasks, recorded as one job a stage, each placed on
its own. A stage launches once the stage before it has succeeded, by whichever orch brings
its record in step first (the `orch submit` that follows the pipeline, an `orch status`,
`orch serve`'s reconcile), and ends CANCELLED, never started, when that one ended otherwise.
"""

from __future__ import annotations

import os
import socket
from typing import Optional

from orchestrator.base.errors import BackendError, InputError, OrchError
from orchestrator.records import JobRow
from orchestrator.service.following import Following
from orchestrator.service.respec import spec_from_record
from orchestrator.service.submitting import Submitted, Submitting
from orchestrator.store import TERMINAL


class Pipelines(Submitting, Following):
    def submit_pipeline(self, pipeline, idempotency_key: Optional[str] = None) -> list[Submitted]:
        """Check and place every stage first (a stage that cannot run refuses the whole
        pipeline, nothing written), then record them all, each as it was placed, and
        launch the first. A key seen
        before returns that pipeline's stages, launching nothing."""
        checked = [self.check(spec) for spec in pipeline.stages]
        out: list[Submitted] = []
        prev: Optional[JobRow] = None
        n = len(pipeline.stages)
        for i, spec in enumerate(pipeline.stages):
            info: dict = {"pipeline": pipeline.name, "stage": i + 1, "stages": n,
                          "env_secrets": sorted(k for k, v in spec.secrets.items() if v is None)}
            if prev is not None:
                info["after"] = prev.id
            key = f"{idempotency_key}:stage{i + 1}" if idempotency_key else None
            rec, secrets, existing = self.record(spec, key, info=info, checked=checked[i])
            if not existing:
                if prev is None:
                    rec = self.launch(rec, spec, secrets)
                else:
                    self._held[rec.id] = (spec, secrets)  # this process launches it with these
                    rec = self.store.set_status(rec.id, "PENDING", f"waits for stage {i} "
                                                f"({prev.id}) to succeed")
            out.append(Submitted(rec, existing))
            prev = rec
        return out

    def advance_stage(self, rec: JobRow) -> JobRow:
        """A stage that waits: launched once the stage before it succeeded; CANCELLED when
        that one failed or was cancelled; left waiting while it runs."""
        assert rec.info.after is not None
        prev = self.store.get(rec.info.after)
        if prev.status not in TERMINAL:
            try:
                prev = self.refresh(prev)
            except OrchError:
                return rec  # its backend does not answer now: asked again next time
        if prev.status not in TERMINAL:
            return rec
        if prev.status != "SUCCEEDED":
            return self.store.set_status(rec.id, "CANCELLED", f"not started: stage "
                                         f"{prev.info.stage} ({prev.id}) ended {prev.status}")
        me = f"{socket.gethostname()}:{os.getpid()}"
        if not self.store.claim(rec.id, me):
            return self.store.get(rec.id)  # cancelled, or another orch launches it
        spec, secrets = self._held.pop(rec.id, (None, None))
        rec = self.store.set_status(rec.id, "PENDING", f"stage {prev.info.stage} ({prev.id}) "
                                    "succeeded: launching")
        try:
            return self.launch(rec, spec if spec is not None else spec_from_record(rec), secrets)
        except InputError as e:  # a secret only the submitting process had
            return self.store.set_status(rec.id, "FAILED", f"launch failed: {e.message}")
        except BackendError:
            return self.store.get(rec.id)  # launch() recorded it FAILED, with why
