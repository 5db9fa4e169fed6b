"""utilization_policy over a run's workers: the driver's decision, its warnings and its stop."""

from __future__ import annotations

import io

import pytest

from jobs import events
from jobs.idle_policy import Watch, run_idle
from jobs.request import BadRequest, RunRequest, WorkerOptions
from jobs.telemetry import IdlePolicy

STOP = IdlePolicy(min_utilization=20, window_minutes=1, action="stop")
WARN = IdlePolicy(min_utilization=20, window_minutes=1, action="warn")


@pytest.mark.parametrize("posts, workers, idle", [
    ({0: 3.0}, 1, "the device stayed below 20% busy for 1 min (highest 3%)"),
    ({0: None}, 1, None),  # busy
    ({}, 1, None),  # not posted yet: not known to be idle
    ({0: 3.0, 1: None}, 2, None),  # one busy device of two
    ({0: 3.0}, 2, None),  # the second worker has not said
    ({0: 3.0, 1: 7.5}, 2, "all 2 devices stayed below 20% busy for 1 min (highest 8%)"),
    ({0: 3.0, 1: 7.5, 5: None}, 2, "all 2 devices stayed below 20% busy for 1 min (highest 8%)"),
])
def test_a_run_is_idle_once_every_worker_has_posted_an_idle_device(posts, workers, idle):
    assert run_idle(STOP, posts, workers) == idle


def _watch(policy, boards):
    stops = []
    out = io.StringIO()
    with events.redirect(out):
        watch = Watch(policy, "orch-1/ab", 2, on_stop=stops.append, poll_s=0.01,
                      reader=lambda board: boards.pop(0))
    return watch, stops, out


def test_warn_says_so_once_per_idle_spell_and_the_run_goes_on():
    boards = [{0: 3.0, 1: None}, {0: 3.0, 1: 4.0}, {0: 3.0, 1: 4.0}, {0: None, 1: 4.0}, {0: 2.0, 1: 4.0}]
    watch, stops, out = _watch(WARN, boards)
    with events.redirect(out):
        assert [watch.check() for _ in range(5)] == [False] * 5
    assert watch.warned == 2 and stops == [] and watch.stopped is None
    evs = [e for e in events.parse(out.getvalue()) if e["event"] == "utilization"]
    assert [e["action"] for e in evs] == ["warn", "warn"]
    assert evs[0]["reason"] == "all 2 devices stayed below 20% busy for 1 min (highest 4%)"
    assert "warning: all 2 devices stayed below" in out.getvalue()


def test_stop_ends_the_run_once_with_its_reason():
    boards = [{0: 3.0, 1: None}, {0: 3.0, 1: 4.0}]
    watch, stops, out = _watch(STOP, boards)
    with events.redirect(out):
        assert watch.check() is False and stops == []
        assert watch.check() is True
    reason = "stopped by utilization_policy: all 2 devices stayed below 20% busy for 1 min (highest 4%)"
    assert stops == [reason] and watch.stopped == reason


def test_the_watch_thread_writes_where_its_maker_writes_and_signs_as_it_signs():
    boards = [{0: 3.0, 1: 4.0}]
    out = io.StringIO()
    keys = []
    with events.redirect(out), events.signing("k" * 32):
        watch = Watch(STOP, "orch-1/ab", 2, on_stop=lambda reason: keys.append(events.current_key()),
                      poll_s=0.01, reader=lambda board: boards[0])
    watch.start()
    watch._thread.join(timeout=5)  # it ends once it has stopped the run
    assert keys == ["k" * 32] and not watch._thread.is_alive()
    assert any(e["event"] == "utilization" for e in events.parse(out.getvalue()))


def test_the_run_request_carries_the_policy_to_every_worker():
    req = RunRequest(job_id="orch-1", target="image-classification", utilization_policy=STOP)
    back = RunRequest.from_json(req.to_json())
    assert back.utilization_policy == STOP
    assert WorkerOptions.of(back, None).utilization_policy == STOP
    for bad in ({"min_utilization": 0, "window_minutes": 1}, {"min_utilization": 20, "window_minutes": 1,
                                                               "action": "kill"},
                {"min_utilization": 20}, {"min_utilization": 20, "window_minutes": 1, "grace": 2}, "stop"):
        with pytest.raises(BadRequest, match="utilization_policy"):
            RunRequest.from_dict({"job_id": "orch-1", "target": "x:y", "utilization_policy": bad})
