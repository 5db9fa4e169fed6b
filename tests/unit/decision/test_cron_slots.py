"""Which slot of a cron schedule is due (decision.cron_slots): from its minute on, once,
and after downtime only the latest missed one."""

from __future__ import annotations

from orchestrator.decision import cron_slots as cron
from orchestrator.store import iso

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z, a whole minute
DAY = 86_400.0


def test_a_slot_is_due_from_its_minute_on_and_only_the_latest_missed_one_runs():
    every = "* * * * *"
    assert cron.next_slot(every, T0) == T0 + 60  # strictly after
    assert cron.latest_slot(every, T0) == T0  # at or before
    assert cron.due(every, T0 + 60, T0 + 59.9) is None
    d = cron.due(every, T0 + 60, T0 + 60)
    assert (d.slot, d.skipped, d.next_at) == (T0 + 60, 0, T0 + 120)
    assert cron.due(every, T0 + 60, T0 + 119.9).slot == T0 + 60
    # Down from before T0+60 until T0+310: slots 60..240 are skipped, 300 runs.
    d = cron.due(every, T0 + 60, T0 + 310)
    assert (d.slot, d.skipped, d.first_skipped, d.last_skipped, d.next_at) == (
        T0 + 300, 4, T0 + 60, T0 + 240, T0 + 360)


def test_a_nightly_job_after_two_days_down_runs_once_for_the_latest_night():
    nightly = "0 3 * * *"
    night1 = T0 - 5 * 3600 + DAY  # 2027-01-16T03:00:00Z
    assert iso(night1) == "2027-01-16T03:00:00Z"
    assert cron.next_slot(nightly, T0) == night1
    assert cron.due(nightly, night1, night1 - 60) is None
    d = cron.due(nightly, night1, night1 + 2 * DAY + 7 * 3600)  # back on the 18th at 10:00
    assert (d.slot, d.skipped, d.next_at) == (night1 + 2 * DAY, 2, night1 + 3 * DAY)
    assert not cron.valid("61 * * * *") and cron.valid("*/5 * * * 1-5")
