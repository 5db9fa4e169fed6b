"""A recorded job's spec again, for a launch that comes after the submit (a queued job, a
pipeline's later stage): from the stored, redacted form, which holds no secret value."""

from __future__ import annotations

from orchestrator.base.errors import InputError
from orchestrator.records import JobRow


def spec_from_record(rec: JobRow):
    """The job spec again from its stored (redacted) form. A secret is read from the
    environment of the process that launches it when the job said so (`info.env_secrets`:
    `secrets: {NAME: null}`); InputError for one whose value was given only to the process
    that submitted it."""
    from orchestrator.spec import JobSpec, SourceMap

    data = dict(rec.spec)
    lost = given_values(rec)
    if lost:
        raise InputError(f"{rec.id}: it launches after its submit (queued, or a later stage of a "
                         f"pipeline), and the secret values it was given ({', '.join(lost)}) "
                         "are never stored", "submit the job again, or give its secrets as "
                         "`secrets: {NAME: null}` and set them in the environment of the orch "
                         "that launches it (the server's, or the shell's that follows the pipeline)")
    data["secrets"] = {k: None for k in data.get("secrets") or {}}
    spec = JobSpec.model_validate(data)
    spec._source = SourceMap(rec.source_file or "<job>", {})
    return spec


def given_values(rec: JobRow) -> list[str]:
    """The names of a job's values that only the process it was sent to holds: secrets
    given with it (not from the environment) and credential-like envs, never stored."""
    from orchestrator.base.redact import REDACTED

    from_env = set(rec.info.env_secrets)
    return sorted([k for k, v in (rec.spec.get("envs") or {}).items() if v == REDACTED]
                  + [k for k in (rec.spec.get("secrets") or {}) if k not in from_env])
