"""Which slot of a cron schedule is due: pure functions of the schedule and the clock.

Slots are UTC instants from croniter. The rule, the same at start-up and while running:
at each check, the most recent slot at or before now runs, once, if it is newer than
the last slot handled and less than one period old (the period being the time from
that slot to the next); every earlier slot not yet handled (the server was down, or
busy past several slots) is skipped, and the schedule's log says how many and which.
The most recent slot is, by definition, less than one period old, so after downtime
exactly one catch-up run happens. Running "once, ever" is not up to this module: the
job for slot S is recorded under the idempotency key `cron:<schedule id>:<S>`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from orchestrator.spec.cron import croniter_class

_MAX_COUNT = 100_000  # skipped slots counted one by one up to this many


def valid(cron: str) -> bool:
    croniter = croniter_class()

    return croniter.is_valid(cron)


def next_slot(cron: str, after: float) -> float:
    """The first slot strictly after `after`."""
    croniter = croniter_class()

    return croniter(cron, after).get_next(float)


def latest_slot(cron: str, now: float) -> float:
    """The last slot at or before `now`."""
    croniter = croniter_class()

    # croniter's get_prev is strictly before its start; slots fall on whole seconds.
    return croniter(cron, math.floor(now) + 1).get_prev(float)


@dataclass(frozen=True)
class Due:
    slot: Optional[float]  # the slot to run now; None: nothing to run
    skipped: int  # earlier slots not run
    first_skipped: Optional[float]
    last_skipped: Optional[float]
    next_at: float  # the first slot after this check


def due(cron: str, next_at: float, now: float) -> Optional[Due]:
    """What to do at `now` for a schedule whose first unhandled slot is `next_at`;
    None when that slot is still in the future."""
    if next_at > now:
        return None
    slot = latest_slot(cron, now)
    upcoming = next_slot(cron, slot)
    skipped, first, last = _between(cron, next_at, slot)
    if now - slot >= upcoming - slot:  # older than one period: never the case for the latest
        return Due(None, skipped + 1, first or slot, slot, upcoming)
    return Due(slot, skipped, first, last, upcoming)


def _between(cron: str, start: float, end: float) -> tuple[int, Optional[float], Optional[float]]:
    """How many slots lie in [start, end), and the first and last of them."""
    croniter = croniter_class()

    if start >= end:
        return 0, None, None
    it = croniter(cron, start - 1)
    count, first, last = 0, None, None
    while count < _MAX_COUNT:
        s = it.get_next(float)
        if s >= end:
            break
        count, first, last = count + 1, first if first is not None else s, s
    else:  # a long downtime of a frequent schedule: the rest counted by the period
        assert last is not None  # _MAX_COUNT slots were counted
        period = next_slot(cron, last) - last
        count += int((end - last) // period) - 1 if period > 0 else 0
        last = latest_slot(cron, end - 1)
    return count, first, last
