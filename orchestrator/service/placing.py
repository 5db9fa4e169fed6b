"""The service's one plan entry: `orch plan`, `orch submit`, a schedule's registration and
`orch serve`'s plans and submits all place a job here, so what a plan shows is what a
submit does. First the checks a job must pass wherever it would go (it can run there, its
git workdir is pinned, its `resume_from` names a usable run), then the facts it is placed
by, read in the core's one store session, then the pure decision (service.planning)."""

from __future__ import annotations

from typing import NamedTuple, Optional

from orchestrator.base.errors import InputError
from orchestrator.decision.models import Decision
from orchestrator.records.placement import Placement, Plan
from orchestrator.service import fingerprint as fingerprint_module
from orchestrator.service import git_workdir, planning
from orchestrator.service.core import Core
from orchestrator.service.launch_spec import resume_point
from orchestrator.spec import JobSpec
from orchestrator.spec.check_memo import CheckMemo, memo_path
from orchestrator.spec.checks import check_runnable


class Planned(NamedTuple):
    """Where a job would run and why, with the code it was planned for."""
    fingerprint: str
    dirty: bool  # its code has uncommitted changes
    decision: Decision
    notes: list[str]  # what the record keeps in its reasons and warnings

    def record(self) -> Placement:
        """The decision as `orch plan --json` shows it and a job's record keeps it."""
        return planning.as_record(self.decision, self.notes)

    def shown(self) -> Plan:
        """`orch plan --json`: the decision and the fingerprint it was made for."""
        return Plan(**self.record().model_dump(), fingerprint=self.fingerprint)


def prepared(core: Core, spec: JobSpec, client: Optional[bool] = None) -> tuple[str, bool]:
    """The checks a plan and a submit share before placement (the job can run where it
    would go, its git workdir is pinned, its resume_from names a usable run); returns
    its fingerprint and whether its code has uncommitted changes. `client`: the job is a
    client's of `orch serve` (None: when these settings serve clients)."""
    serves = git_workdir.serves_clients(core.settings) if client is None else client
    if serves:
        check_runnable(spec, serves_clients=True)
    git_workdir.pin(spec, git_workdir.reach(core.settings, server=serves))
    resume_point(core, spec)
    if serves:
        # `orch serve` runs no git in a client's folder: its repository's config could
        # make git run anything (docs/security.md). The code is its files' content.
        return fingerprint_module.fingerprint(spec, content_only=True)
    found = fingerprint_module.fingerprint(spec)
    # What passed for this fingerprint (code, command, config) is not checked again.
    check_runnable(spec, memo=CheckMemo(memo_path(core.settings.home), found[0]))
    return found


def decided(core: Core, spec: JobSpec, fp: str, dirty: bool,
            owner: Optional[str] = None) -> Planned:
    """The decision for a prepared job: its hours learn `owner`'s bias (how their runs
    compare with their estimates); the store is read in the core's session."""
    decision, notes = planning.plan(spec, core.settings, fingerprint=fp, code_dirty=dirty,
                                    owner=owner, store=core.store_if_exists())
    return Planned(fp, dirty, decision, notes)


def plan(core: Core, spec: JobSpec, owner: Optional[str] = None, *,
         client: Optional[bool] = None) -> Planned:
    """The plan a submit by `owner` would make (None: this machine's user): checked, then
    decided. Raises what a submit would refuse before recording."""
    return decided(core, spec, *prepared(core, spec, client), owner)


def placement(spec: JobSpec, planned: Planned) -> Placement:
    """The decision a job is recorded with; InputError when it has no place to run."""
    if planned.decision.choice is None:
        raise InputError(f"{spec.source_file or spec.name}: no place to run this job: "
                         f"{planned.decision.refusal}",
                         "`orch plan FILE` lists every alternative and why it was excluded")
    record = planned.record()
    record.alternatives = record.alternatives[:10]  # the record keeps the best few
    return record
