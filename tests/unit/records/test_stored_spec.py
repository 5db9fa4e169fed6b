"""A stored job file as the decisions read it: typed, and lenient with what older orch wrote."""

from __future__ import annotations

from orchestrator.decision.models import PastRun
from orchestrator.decision.reservations import schedule_reservations
from orchestrator.records import JobRow
from orchestrator.records.schedule import ScheduleRow
from orchestrator.records.stored_spec import StoredSpec


def test_the_sections_the_decisions_read_are_typed():
    spec = StoredSpec.read({"name": "n", "train": {"job": "x"}, "estimate": {"hours": 2, "gpu": "A100"},
                            "budget": {"max_cost": 5.0}, "placement": {"allow": ["onprem"]},
                            "schedule": {"cron": "0 3 * * *", "deadline_hours": 6},
                            "resources": {"accelerators": {"H100": 8}}, "envs": {"A": "1"}})
    assert (spec.estimate.hours, spec.estimate.gpu, spec.budget.max_cost) == (2, "A100", 5.0)
    assert spec.placement.allow == ["onprem"] and spec.schedule.deadline_hours == 6
    assert spec.train == {"job": "x"} and spec.resources.accelerators == {"H100": 8}


def test_an_old_or_odd_job_file_reads_as_unset_never_a_crash():
    odd = {"estimate": "bogus", "budget": None, "schedule": {"deadline_hours": "soon"},
           "placement": {"allow": "onprem"}, "resources": {"accelerators": "A100:1"}}
    spec = StoredSpec.read(odd)
    assert spec.estimate.hours is None and spec.budget.max_cost is None
    assert spec.schedule.deadline_hours is None and spec.placement.allow is None
    assert StoredSpec.read(None).estimate.hours is None and StoredSpec.read([1]).train is None
    row = JobRow(id="j", name="n", status="SUCCEEDED", spec=odd)
    assert PastRun.from_row(row).estimate_hours is None  # was AttributeError: 'str' ... 'get'
    sched = ScheduleRow(id="s", name="n", cron="0 3 * * *", next_at=3600.0, spec=odd)
    got = schedule_reservations([sched], 0.0, 24, 1.0)
    assert [(r.gpu, r.slack_hours) for r in got] == [("A100", 1.0)]  # the default slack
