"""The preemption contract, on owned hardware: a job whose entrypoint exits with
PREEMPTED_EXIT (75, EX_TEMPFAIL: "try again later") has saved what it needs and asks to be
run again; orch launches it again at once, as the same job (one record, its earlier runs'
output kept before the new one's), up to `settings.preemption_restarts` times, and does not
count it as a failure. On the cloud SkyPilot does the same (providers/cloud.py passes the
code as `job_recovery.recover_on_exit_codes`). docs/preemption.md is the contract as a
script sees it."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from orchestrator.base.errors import BackendError, InputError
from orchestrator.base.preemption import PREEMPTED_EXIT
from orchestrator.base.redact import REDACTED
from orchestrator.base.targets import rented
from orchestrator.records import JobRow, with_info
from orchestrator.service.core import Core
from orchestrator.service.respec import given_values
from providers.base import BackendState


def earlier_runs_file(core: Core, rec: JobRow) -> Path:
    """A resumed job's earlier runs' output as it stood when each ended (logs/<id>.earlier):
    read where the backend no longer has those runs."""
    return core.settings.home / "logs" / f"{rec.id}.earlier"


def earlier_output(core: Core, rec: JobRow, provider) -> str:
    """The output of the job's runs before this one, each from its backend (which has its
    last lines too: a run's own log may still be catching up when orch sees it end), else
    as kept when it ended; "" for a job never resumed."""
    runs = rec.info.earlier_runs or []
    if not runs:
        return ""
    parts = []
    for n, backend_id in enumerate(runs, 1):
        try:
            parts.append(provider.logs(backend_id))
        except BackendError:
            try:
                return earlier_runs_file(core, rec).read_text()
            except OSError:
                return ""
        parts.append(_between(n))
    return "".join(parts)


def _between(n: int) -> str:
    return f"\n[orch] run {n} ended with exit {PREEMPTED_EXIT} (preempted): launching run {n + 1}\n"


def resumed(core: Core, rec: JobRow, state: BackendState, text: str,
            finish: Callable[[Core, JobRow, str, Optional[str]], JobRow],
            write: Callable[[Path, str], None]) -> Optional[JobRow]:
    """The job launched again where its run ended by the contract (exit 75 on owned
    hardware), or finished saying why it may not run again; None where it ended otherwise.
    `text`: the run's output, kept before the next run's; `finish` and `write`:
    following's (a job's end recorded, a private file written whole)."""
    if state.exit_code != PREEMPTED_EXIT or rented(rec.placed_on) or rec.cancel_requested:
        return None
    runs = (rec.info.preemptions or 0) + 1
    limit = core.settings.preemption_restarts
    from orchestrator.service.submitting import launch

    if runs > limit:
        return finish(core, rec, "FAILED", f"exit {PREEMPTED_EXIT} (preempted) in each of its "
                      f"{runs} runs: not run again after {limit} restarts (preemption_restarts)")
    try:
        spec, secrets = _again(core, rec)
    except InputError as e:
        return finish(core, rec, "FAILED", f"exit {PREEMPTED_EXIT} (preempted), and cannot run "
                      f"again: {e.message}")

    write(earlier_runs_file(core, rec), _kept(core, rec) + text + _between(runs))
    rec = core.store.update(rec.id, info=with_info(
        rec, preemptions=runs, earlier_runs=[*(rec.info.earlier_runs or []), rec.backend_id]))
    core.store.set_status(rec.id, "RUNNING", f"preempted (exit {PREEMPTED_EXIT}) in run {runs}: "
                          f"run {runs + 1} resumes from its checkpoint")
    try:
        return launch(core, core.store.get(rec.id), spec, secrets)
    except BackendError:
        return core.store.get(rec.id)  # launch() recorded it FAILED, with why


def _kept(core: Core, rec: JobRow) -> str:
    try:
        return earlier_runs_file(core, rec).read_text() if rec.info.earlier_runs else ""
    except OSError:
        return ""


def _again(core: Core, rec: JobRow):
    """The job's spec and `secrets:` values for another run: from its record, with the
    values given with it from this process's memory (only the orch that launched it holds
    them); InputError where they are held nowhere here."""
    from orchestrator.spec import JobSpec, SourceMap

    held = core.secrets.get(rec.id) or {}
    lost = [k for k in given_values(rec) if k not in held]
    if lost:
        raise InputError(f"the secret values it was given ({', '.join(lost)}) are held by the "
                         "orch that launched it, not this one, and never stored",
                         "give them as `secrets: {NAME: null}` from the environment")
    data = dict(rec.spec)
    data["envs"] = {k: (held[k] if v == REDACTED and k in held else v)
                    for k, v in (data.get("envs") or {}).items()}
    from_env = set(rec.info.env_secrets)
    data["secrets"] = {k: (None if k in from_env else held[k]) for k in data.get("secrets") or {}}
    spec = JobSpec.model_validate(data)
    spec._source = SourceMap(rec.source_file or "<job>", {})
    return spec, None
