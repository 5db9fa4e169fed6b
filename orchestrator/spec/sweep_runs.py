"""A sweep's runs: its job file once for each run's values (spec/sweep.py reads the key),
each a JobSpec of its own."""

from __future__ import annotations

from pydantic import ValidationError

from orchestrator.base.errors import SpecError
from orchestrator.spec.job import JobSpec
from orchestrator.spec.sweep import MAX_RUNS, run_label, with_values


def expand(spec: JobSpec) -> list[JobSpec]:
    """The sweep's runs, each a JobSpec of its own (no `sweep:`), named `<name>-<n>`; a
    value its job file could not hold is a SpecError at the sweep's line."""
    sweep = spec.sweep
    assert sweep is not None, "expand() is for a job file with a sweep: key"
    src = spec._source
    file = src.file if src else "<job>"
    line = src.line_of(("sweep",)) if src else None
    runs = sweep.values()
    if len(runs) > MAX_RUNS:
        raise SpecError(file, line, "sweep", f"expands to {len(runs)} runs, more than {MAX_RUNS}",
                        "split it into sweeps of its parts, or sample it (random:)")
    base = spec.model_dump(mode="json", exclude_unset=True, exclude={"sweep"})
    out = []
    for i, values in enumerate(runs, 1):
        data = with_values(base, values, file, line)
        data["name"] = f"{spec.name or 'sweep'}-{i}"[:63]
        try:
            run = JobSpec.model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise SpecError(file, line, "sweep", f"run {i} ({run_label(values)}): {where}: "
                            f"{err['msg']}", "give values the job file's keys can hold") from None
        run._source = src
        out.append(run)
    return out
