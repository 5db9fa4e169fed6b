"""`schedule.cron`: five UTC fields, checked the way `orch serve` will run them (croniter)."""

from __future__ import annotations

import re
import time
from typing import Any, Optional

from orchestrator.base.inputs import clip

_FIELD_RE = re.compile(r"^[\d*/,\-A-Za-z?#]+$")
_FIELDS = (("minute", "0-59"), ("hour", "0-23"), ("day", "1-31"),
           ("month", "1-12 or jan-dec"), ("weekday", "0-7 or sun-sat"))
_HELP = "write five fields, minute hour day month weekday, e.g. '0 3 * * *' (UTC)"
# What croniter raises for a field it cannot use, or a schedule with no date to fire on
# (CroniterBadDateError is a ValueError).
_CRONITER_ERRORS = (ValueError, KeyError, IndexError, TypeError, OverflowError)


def croniter_class() -> Any:
    """croniter's class, imported without the `file` process its import runs: croniter asks
    platform.architecture() whether Python is 32-bit, and that runs `file -b` on the
    interpreter (`orch plan` starts no process). The pointer size answers the same."""
    import sys

    if "croniter" not in sys.modules:
        import platform
        import struct

        real = platform.architecture
        platform.architecture = lambda *a, **k: (f"{struct.calcsize('P') * 8}bit", "")
        try:
            import croniter  # noqa: F401
        finally:
            platform.architecture = real
    from croniter import croniter

    return croniter


def cron_problem(v: str) -> Optional[str]:
    """Why `v` is not a schedule `orch serve` can run, naming the field at fault; or None."""
    fields = v.split()
    if len(fields) != 5 or not all(_FIELD_RE.match(f) for f in fields):
        return f"{clip(v)} is not a cron schedule: {_HELP}"
    problem = _croniter_problem(fields)
    return f"{clip(v)}: {problem}" if problem else None


def _croniter_problem(fields: list[str]) -> Optional[str]:
    """Why croniter cannot use these five fields, or None. A schedule that parses but has
    no date to fire on (Feb 31) is refused too."""
    croniter = croniter_class()  # loaded only for a job file with a cron

    # croniter's own errors do not say which field; try each alone to name it.
    for i, (name, allowed) in enumerate(_FIELDS):
        probe = " ".join(f if j == i else "*" for j, f in enumerate(fields))
        try:
            croniter.expand(probe)
        except _CRONITER_ERRORS:
            return f"the {name} field {clip(fields[i])} is not valid ({allowed}); {_HELP}"
    try:
        croniter(" ".join(fields), time.time()).get_next(float)
    except _CRONITER_ERRORS:  # no matching date in croniter's search window
        return ("this schedule never fires (no such date, e.g. February 30 or 31); "
                "day and month must meet on a real date, e.g. '0 3 28 2 *'")
    return None
