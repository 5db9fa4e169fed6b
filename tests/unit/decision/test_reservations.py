"""Cron schedules due on owned GPUs, as placement's reservations: a table of schedules."""

from __future__ import annotations

import pytest

from orchestrator.decision.reservations import schedule_reservations

NOW = 1_700_000_000.0
H = 3600.0


def sched(name="weekly", in_h=2.0, spec=None, paused=False):
    from orchestrator.records.schedule import ScheduleRow

    return ScheduleRow(id=f"sched-{name}", name=name, cron="0 8 * * 6", next_at=NOW + in_h * H,
                       paused=paused,
                       spec=spec if spec is not None else {"resources": {"accelerators": "A100:4"}})


CASES = [
    ("due soon, four A100s", [sched()], [(2.0, 4.0, "A100", "cron schedule 'weekly'", 1.0)]),
    ("beyond the horizon", [sched(in_h=30)], []),
    ("already past", [sched(in_h=-1)], []),
    ("paused", [sched(paused=True)], []),
    ("no GPU: reserves nothing", [sched(spec={"run": "echo"})], []),
    ("dict and list accelerator forms", [
        sched("a", 1, {"resources": {"accelerators": {"H100": 2}}}),
        sched("b", 0.5, {"resources": {"accelerators": ["L4:1", "A10G:1"]}})],
     [(0.5, 1.0, "L4", "cron schedule 'b'", 1.0), (1.0, 2.0, "H100", "cron schedule 'a'", 1.0)]),
    ("a deadline leaves slack after the estimate", [sched(spec={
        "resources": {"accelerators": "A100:1"}, "estimate": {"hours": 3},
        "schedule": {"deadline_hours": 10}})], [(2.0, 1.0, "A100", "cron schedule 'weekly'", 7.0)]),
    ("a train job's workers each hold a GPU", [sched(spec={
        "train": {"job": "x"}, "scaling": {"num_workers": 2, "use_gpu": True}})], None),
]


@pytest.mark.parametrize("name,schedules,expected", CASES, ids=[c[0] for c in CASES])
def test_schedule_reservations(name, schedules, expected):
    got = schedule_reservations(schedules, NOW, horizon_h=24, default_slack_h=1.0)
    if expected is None:  # what decision.demand says the job holds, whatever that is
        from orchestrator.decision.demand import job_demand

        assert [r.gpus for r in got] == [job_demand(schedules[0].spec).gpus]
        return
    assert [(round(r.in_hours, 6), r.gpus, r.gpu, r.what, r.slack_hours) for r in got] == expected


def test_a_schedule_that_may_not_rent_says_so():
    import math

    onprem = {"resources": {"accelerators": "A100:1"}, "placement": {"allow": ["onprem"]}}
    hybrid = {"resources": {"accelerators": "A100:1"}, "placement": {"allow": ["onprem", "cloud"]}}
    got = schedule_reservations([sched("a", 1, onprem), sched("b", 2, hybrid), sched("c", 3)],
                                NOW, 24, 1.0)
    assert [r.cloud_cost for r in got] == [math.inf, None, None]


def schedule_holds(settings, name: str = "j"):
    """The schedules a plan of job `name` finds due on the owned GPUs (the [[onprem]]
    inventory's), as the service gathers them from the store."""
    from orchestrator.service.planning import gather
    from orchestrator.spec import load_spec_text

    facts = gather(load_spec_text(f"name: {name}\nrun: x\n"), settings, NOW, fingerprint="f",
                   history=(), offers=[], spent_this_month=0.0)
    return facts.capacity.reservations if facts.capacity else ()


def test_schedule_holds_reads_the_stores_schedules(tmp_path):
    from orchestrator.settings import OwnedGpus, Settings
    from orchestrator.store import open_store

    owned = [OwnedGpus(gpu="A100", count=4, purchase_price=40000, watts=400)]
    settings = Settings(home=tmp_path / "home", onprem=owned)
    assert schedule_holds(settings) == ()  # no store yet: nothing due, nothing created
    assert not (tmp_path / "home").exists()
    store = open_store(settings)
    try:
        for name, in_h in (("weekly", 3.0), ("monthly", 100.0), ("self", 1.0)):
            store.add_schedule(name=name, owner=None, cron="0 8 * * 6",
                               spec={"name": name, "resources": {"accelerators": "A100:4"}},
                               source_text="", source_file=None, next_at=NOW + in_h * H)
    finally:
        store.close()
    held = schedule_holds(settings, name="self")
    assert [(r.what, r.in_hours, r.gpus, r.gpu) for r in held] == [
        ("cron schedule 'weekly'", 3.0, 4.0, "A100")]
    # The look-ahead is one setting, cron_lookahead_hours (the simulator reads it too).
    wide = Settings(home=tmp_path / "home", onprem=owned, cron_lookahead_hours=120)
    assert [r.what for r in schedule_holds(wide, name="self")] == [
        "cron schedule 'weekly'", "cron schedule 'monthly'"]
