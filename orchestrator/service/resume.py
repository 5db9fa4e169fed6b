"""Which earlier run a job continues (`checkpoint.resume_from`), checked before recording."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from orchestrator.records import JobRow
from orchestrator.spec import JobSpec
from orchestrator.store import TERMINAL


@dataclass(frozen=True)
class ResumePoint:
    """The earlier run a job continues: its job, its run's folder under its storage."""
    job_id: str
    run_name: str
    storage_path: str


def resume_point(spec: JobSpec, earlier_jobs: Sequence[JobRow]) -> Optional[ResumePoint]:
    """The run `checkpoint.resume_from` continues (a `train:` job's checkpoints, a `run:`
    job's folder), or None
    when the spec resumes nothing. `earlier_jobs` are the candidates, newest first. Raises
    SpecError at checkpoint.resume_from when the reference names no job, an unfinished one,
    or one whose storage differs."""
    ref = spec.checkpoint.resume_from
    if not ref:
        return None
    key = "checkpoint.resume_from"
    name = spec.name or "job"
    found = list(earlier_jobs)
    if ref == "latest":
        found = [r for r in found if r.name == name and r.info.storage_path]
        if not found:
            raise spec.error(key, f"no earlier job named {name!r} kept checkpoints",
                             "`orch status` lists the jobs; give a job id instead")
    else:
        exact = [r for r in found if r.id == ref]
        found = exact or [r for r in found if r.id.startswith(ref)]
        if len(found) != 1:
            raise spec.error(key, f"no job {ref!r}" if not found else
                             f"{ref!r} matches several jobs", "`orch status` lists the jobs "
                             "with their ids; give more of the id")
    earlier = found[0]  # newest first
    info = earlier.info
    storage = info.storage_path
    if not storage:
        raise spec.error(key, f"job {earlier.id} kept no checkpoints or files (never "
                              "launched, or its storage is not a path)",
                         "name a job that ran and kept its folder (`orch artifacts ID`)")
    if earlier.status not in TERMINAL:
        raise spec.error(key, f"job {earlier.id} is still {earlier.status}: two runs "
                              "would write the same checkpoints",
                         f"wait for it to end, or `orch cancel {earlier.id}`")
    mine = spec.checkpoint.storage
    if mine and mine.rstrip("/") != storage.rstrip("/"):
        raise spec.error(key, f"job {earlier.id} kept its checkpoints in {storage}, "
                              f"not in this job's checkpoint.storage {mine}",
                         f"set checkpoint.storage to {storage}, or leave it out")
    return ResumePoint(job_id=earlier.id, run_name=info.run_name or earlier.id,
                       storage_path=storage)
