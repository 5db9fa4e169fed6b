"""`orch doctor`'s checks, as data: the store, local Ray, job isolation, on-prem, SkyPilot, S3.

Each check returns `Check`s and never raises: a broken thing is what doctor is for. Nothing
here starts Ray or a SkyPilot API server, or prints a credential; `repair_store` is the
way out for a damaged store, and it keeps the damaged file.

`check` holds the result type; `local` this machine's files and Ray, `store` the job
store, `repair` its salvage, `remote` the cluster, clouds and S3.
"""

from __future__ import annotations

from orchestrator.service.doctor.check import Check, guarded
from orchestrator.service.doctor.local import (
    STORE,
    job_isolation_check,
    local_ray_check,
    modes_check,
    serve_local_check,
    serves_team,
)
from orchestrator.service.doctor.remote import cluster_mode_check, onprem_check, s3_checks, skypilot_checks
from orchestrator.service.doctor.repair import LOST, repair_store
from orchestrator.service.doctor.store import REPAIR, integrity_check, pg_store_check, store_checks
from orchestrator.settings import Settings

__all__ = ["LOST", "REPAIR", "STORE", "Check", "integrity_check", "job_isolation_check",
           "local_ray_check", "modes_check", "onprem_check", "pg_store_check", "repair_store",
           "run_checks", "s3_checks", "serve_local_check", "skypilot_checks", "store_checks"]


def run_checks(settings: Settings, timeout: float = 5.0) -> list[Check]:
    checks: list[Check] = []
    for name, fn in (("store", lambda: store_checks(settings.home, settings)),
                     ("local Ray", lambda: [local_ray_check(settings)]),
                     ("job isolation", lambda: [job_isolation_check(settings)]),
                     ("local target",
                      lambda: [serve_local_check(settings, serves_team(settings))]),
                     ("on-prem cluster", lambda: [onprem_check(settings, timeout)]),
                     ("cluster mode", lambda: cluster_mode_check(settings)),
                     ("SkyPilot", lambda: skypilot_checks(settings)),
                     ("S3", lambda: s3_checks(settings))):
        checks.extend(guarded(name, fn))
    return checks
