"""The queue policy of `orch serve`: a table of queued jobs and target rooms, each with what
launches now and what waits, and why. No store, no Ray."""

from __future__ import annotations

import pytest

from orchestrator.decision.queue import Demand, Queued, Room, job_demand, ordinal, plan_queue, queue_order
from orchestrator.records.placement import PlacedOffer

CPU2, GPU1, GPU2 = Demand(cpus=2), Demand(gpus=1), Demand(gpus=2)


def job(id_: str, target: str = "local", demand: Demand = CPU2, priority: int = 0,
        at: float = 0.0) -> Queued:
    return Queued(id_, target, demand, priority, at)


def plan(jobs, rooms):
    p = plan_queue(jobs, rooms)
    return {v.id: v for v in p.verdicts}, [v.id for v in p.of("launch")]


def test_priority_first_then_submission_time_then_id():
    jobs = [job("a", at=1), job("b", priority=5, at=3), job("c", at=2), job("d", priority=5, at=3)]
    assert [j.id for j in queue_order(jobs)] == ["b", "d", "a", "c"]


def test_an_empty_target_takes_the_head_job_and_the_rest_wait_with_their_place():
    v, launched = plan([job("a", at=1), job("b", at=2), job("c", at=3)],
                       {"local": Room(total=Demand(cpus=2))})
    assert launched == ["a"]  # what this pass launched counts: b finds no room left
    assert v["b"].action == "wait" and v["b"].position == 1
    assert v["b"].message == (
        "waiting for 2 CPU on local: 0 CPU free of 2 CPU; 1st in line for local")
    assert v["c"].position == 2 and v["c"].message == (
        "waiting for 2 CPU on local: 2nd in line for local, after b (each target starts its "
        "line in order)")


def test_jobs_launched_earlier_count_even_before_ray_shows_them_used():
    # Ray shows nothing used yet; orch launched 1 GPU there a moment ago.
    room = Room(total=Demand(cpus=16, gpus=2), used=Demand(), reserved=GPU1)
    v, launched = plan([job("a", "onprem", GPU2)], {"onprem": room})
    assert launched == [] and v["a"].message == (
        "waiting for 2 GPU on onprem: 1 GPU free of 2 GPU; 1st in line for onprem")
    # Ray shows more used than orch knows of (someone else's work): that counts instead.
    room = Room(total=Demand(cpus=16, gpus=2), used=Demand(cpus=3, gpus=1), reserved=Demand())
    assert plan([job("a", "onprem", GPU2)], {"onprem": room})[1] == []
    assert plan([job("a", "onprem", GPU1)], {"onprem": room})[1] == ["a"]
    # Both: the larger per resource, not the sum (orch's running job is in Ray's view too).
    room = Room(total=Demand(gpus=4), used=Demand(gpus=2), reserved=Demand(gpus=2))
    assert plan([job("a", "onprem", GPU2)], {"onprem": room})[1] == ["a"]


def test_priority_jumps_the_line():
    v, launched = plan([job("old", at=1), job("urgent", priority=9, at=5)],
                       {"local": Room(total=Demand(cpus=2))})
    assert launched == ["urgent"] and v["old"].position == 1


def test_a_big_head_job_blocks_smaller_ones_behind_it_on_its_target_only():
    rooms = {"onprem": Room(total=Demand(cpus=32, gpus=4), used=Demand(gpus=3)),
             "local": Room(total=Demand(cpus=4))}
    jobs = [job("big", "onprem", GPU2, at=1), job("small", "onprem", GPU1, at=2),
            job("here", "local", Demand(cpus=1), at=3)]
    v, launched = plan(jobs, rooms)
    # 1 GPU is free and `small` needs 1, but `big` is first in line: strict order, so it
    # never starves behind a stream of small jobs. Another target's line moves on.
    assert launched == ["here"]
    assert (v["big"].action, v["big"].position, v["small"].action, v["small"].position) == (
        "wait", 1, "wait", 2)
    assert "after big" in v["small"].message


def test_the_cloud_has_no_room_to_wait_for():
    jobs = [job(f"c{i}", "cloud", Demand(gpus=8), at=i) for i in range(5)]
    _, launched = plan(jobs, {"cloud": None, "local": Room(total=Demand(cpus=1))})
    assert launched == ["c0", "c1", "c2", "c3", "c4"]
    assert plan([job("x", "cloud", GPU1)], {})[1] == ["x"]  # a target without a room: no limit


def test_a_job_that_can_never_fit_fails_and_does_not_block_the_line():
    rooms = {"local": Room(total=Demand(cpus=2)), "onprem": Room(total=Demand(cpus=8, gpus=2),
                                                                 most=Demand(cpus=8, gpus=4))}
    jobs = [job("huge", "local", Demand(cpus=4), at=1), job("ok", "local", CPU2, at=2),
            job("gpus", "onprem", Demand(gpus=8), at=3), job("later", "onprem", GPU2, at=4),
            job("node-down", "onprem", Demand(gpus=4), at=0)]
    v, launched = plan(jobs, rooms)
    assert launched == ["ok"]  # `huge` left the line: `ok` is first now
    assert v["huge"].action == "never" and v["huge"].message.startswith(
        "never launched: it needs 4 CPU, and local has 2 CPU in all, so it would wait forever")
    assert v["gpus"].action == "never" and "onprem has 4 GPU in all" in v["gpus"].message
    # 4 GPUs are owned (settings) though only 2 are up now: it waits for them, at the head.
    assert v["node-down"].action == "wait" and v["node-down"].position == 1
    assert v["later"].action == "wait" and "after node-down" in v["later"].message


def test_an_unreadable_target_holds_its_jobs_and_says_why():
    room = Room(total=Demand(),
                problem="cannot read its capacity: cannot reach Ray at http://x:8265")
    v, launched = plan([job("a", "onprem", GPU1), job("b", "onprem", GPU1, at=1)], {"onprem": room})
    assert launched == [] and v["a"].message == (
        "waiting for onprem: cannot read its capacity: cannot reach Ray at http://x:8265; "
        "1st in line for onprem") and v["b"].position == 2


@pytest.mark.parametrize("spec, choice, demand", [
    ({"train": {"job": "x"}, "scaling": {"num_workers": 2, "use_gpu": False}}, None, CPU2),
    ({"train": {"job": "x"}, "scaling": {"num_workers": 3, "use_gpu": "auto"},
      "resources": {"cpus": "2+"}}, {"gpu": None, "count": 0}, Demand(cpus=3)),
    ({"train": {"job": "x"}, "scaling": {"num_workers": 4, "use_gpu": True}}, None, Demand(gpus=4)),
    ({"train": {"job": "x"}, "scaling": {"num_workers": 2},
      "resources": {"accelerators": "A100:2"}}, {"gpu": "A100", "count": 2}, GPU2),
    # auto with one GPU for two workers: they run on CPUs, as the runner decides
    ({"train": {"job": "x"}, "scaling": {"num_workers": 2},
      "resources": {"accelerators": "A100:1"}}, {"gpu": "A100", "count": 1}, CPU2),
    # auto on a GPU the placement chose: Ray Train will use it
    ({"train": {"job": "x"}, "scaling": {"num_workers": 1}}, {"gpu": "RTX4090", "count": 1}, GPU1),
    ({"run": "python t.py", "resources": {"accelerators": {"H100": 8}}},
     {"gpu": "H100", "count": 8}, Demand(gpus=8)),
    ({"run": "python t.py", "resources": {"accelerators": ["H100:2", "A100:4"]}}, None, GPU2),
    ({"run": "echo hi"}, None, Demand(cpus=1)),
    ({"run": "make -j4", "resources": {"cpus": 4}}, None, Demand(cpus=4)),
    ({"run": "echo", "scaling": {"use_gpu": False}, "resources": {"accelerators": "A100:1"}},
     None, Demand(cpus=1)),
])
def test_what_a_job_holds(spec, choice, demand):
    assert job_demand(spec, None if choice is None else PlacedOffer(**choice)) == demand


def test_ordinals():
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]
