"""The runner host's warm pool (jobs/warm.py): what it starts with, when and how far it is
refilled, what memory bounds it and when a job finds none warm."""

from __future__ import annotations

from jobs.warm import (
    DEFAULT_POOL_MB,
    MAX_POOL_MB,
    Sizes,
    Stock,
    default_pool_mb,
    fit,
    machine_pool_mb,
    run_mb,
)
from orchestrator.settings.hardware import LocalMachine

BIG = 100_000  # MiB: memory no rule below reaches


def _started(workers: int = 2, **kw) -> Stock:
    stock = Stock(initial_workers=workers, **kw)
    stock.initial()
    stock.spare()
    return stock


def test_the_pool_starts_with_one_run_then_a_spare_so_the_second_job_finds_its_own_warm():
    stock = Stock(initial_workers=2)  # the default memory: two runs
    assert stock.initial() == (1, 2)
    assert stock.spare() == (1, 0)  # a second run's controller and synchronization actor
    assert stock.take(1, now=0.0) is True
    stock.done(now=5.0)
    assert stock.take(1, now=6.0) is True  # the spare, warm


def test_with_a_tenth_of_a_24_gib_machine_the_next_burst_of_three_finds_each_its_own_warm():
    stock = Stock(initial_workers=2, pool_mb=default_pool_mb(24_105))  # CI's machine, MiB
    assert stock.initial() == (1, 2)
    assert stock.spare() == (1, 0)  # a second run's controller and synchronization actor
    now = 0.0
    for i in range(3):  # a first burst: each submitted as the one before ends
        assert stock.take(1, now) is (i < 2)  # the third starts cold
        stock.done(now + 2.0)
        now += 2.5
    assert stock.idle(now + 20.0) == (3, 3)  # the pause: three runs' worth (2160 of 2410 MiB)
    now += 30.0
    for _ in range(3):  # the next burst of three: each its own warm
        assert stock.take(1, now) is True
        stock.done(now + 2.0)
        now += 2.5
    assert stock.take(1, now) is False  # a fourth: cold


def test_the_default_memory_is_a_tenth_of_the_machines_within_bounds(tmp_path):
    assert LocalMachine().warm_pool_mb is None  # unset: the host asks the machine
    assert run_mb(2, 2) <= DEFAULT_POOL_MB < min(run_mb(2, 3), run_mb(3, 3))  # the floor: two runs
    assert default_pool_mb(8 * 1024) == DEFAULT_POOL_MB
    assert run_mb(3, 3) <= default_pool_mb(24_105) == 2410
    assert default_pool_mb(256 * 1024) == MAX_POOL_MB
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683520 kB\nMemFree:        1 kB\n")
    assert machine_pool_mb(str(meminfo)) == 2410
    assert machine_pool_mb(str(tmp_path / "none")) == DEFAULT_POOL_MB


def test_nothing_is_refilled_while_a_burst_goes_on_and_all_of_it_once_it_pauses():
    stock = _started(pool_mb=BIG)
    now = 0.0
    for _ in range(2):  # a sweep: each job submitted as the one before ends
        assert stock.take(1, now) is True
        assert stock.idle(now + 1.0, idle_s=2.0) == (0, 0)  # running
        now += 6.0
        stock.done(now)
        assert stock.idle(now + 1.0, idle_s=2.0) == (0, 0)  # the next job may come in a second
        now += 1.5
    assert stock.missing(1) == (1, 1)  # a third one finds none warm: the host starts its own
    assert stock.take(1, now) is False
    stock.done(now + 6.0)
    assert stock.idle(now + 7.0, idle_s=2.0) == (0, 0)
    assert stock.idle(now + 8.5, idle_s=2.0) == (3, 3)  # the pause: three runs, as many as came
    assert (stock.runs, stock.workers) == (3, 3)
    assert stock.idle(now + 20.0, idle_s=2.0) == (0, 0)  # full


def test_memory_bounds_the_refill_fewer_workers_first_then_fewer_runs():
    sizes = Sizes(controller=400, sync=100, worker=400)
    # Three runs of two workers would be 3*500 + 6*400 = 3900 MiB.
    assert fit(3, 6, 2, 4000, sizes) == (3, 6)
    assert fit(3, 6, 2, 3000, sizes) == (3, 3)  # one worker a run: 1500 + 1200
    assert fit(3, 6, 2, 2000, sizes) == (2, 2)  # then a run less: 1000 + 800
    assert fit(1, 4, 2, 1000, sizes) == (1, 2)  # the first run's, even over the bound: 1300
    assert fit(1, 4, 1, 1500, sizes) == (1, 2)  # 500 + 800 fits, a third worker does not


def test_the_refill_follows_the_largest_recent_run_within_the_memory():
    sizes = Sizes(controller=400, sync=100, worker=400)
    stock = _started(pool_mb=4200, sizes=sizes)
    assert stock.take(4, now=0.0) is False  # two warm workers for a four-worker run
    stock.done(now=10.0)
    # Two runs of four workers (1000 + 3200) fit in 4200 MiB.
    assert stock.idle(now=13.0, idle_s=2.0) == (1, 8)
    assert (stock.runs, stock.workers) == (2, 8)
    small = _started(pool_mb=2500, sizes=sizes)
    small.take(4, now=0.0)
    small.done(now=10.0)
    assert small.target(now=13.0) == (2, 3)  # 1000 + 1200


def test_jobs_at_once_keep_one_run_more_warm_than_ran_together():
    stock = _started(pool_mb=BIG)
    stock.take(1, now=0.0)
    stock.take(1, now=0.5)
    assert stock.take(1, now=1.0) is False  # a third at once: it starts cold
    for t in (8.0, 8.5, 9.0):
        stock.done(now=t)
    assert stock.target(now=12.0) == (4, 4)  # three ran at once: four
    assert stock.idle(now=12.0, idle_s=2.0) == (4, 4)


def test_jobs_known_to_be_coming_are_counted():
    stock = _started(pool_mb=BIG)
    assert stock.target(now=0.0) == (1, 2)  # nothing ran yet
    assert stock.target(now=0.0, queued=3) == (3, 6)
    stock.take(1, now=0.0)
    stock.done(now=5.0)
    assert stock.target(now=20.0) == (2, 2)
    assert stock.target(now=20.0, queued=5) == (5, 5)


def test_no_spare_while_a_first_job_runs_the_pause_after_it_refills_instead():
    stock = Stock(initial_workers=2)
    stock.initial()
    stock.take(1, now=0.0)
    assert stock.spare() == (0, 0)
    stock.done(now=5.0)
    assert stock.idle(now=8.0, idle_s=2.0) == (2, 1)


def test_no_spare_where_the_memory_holds_one_run():
    stock = Stock(initial_workers=2, pool_mb=0)
    assert stock.initial() == (1, 2)
    assert stock.spare() == (0, 0)


def test_after_a_long_pause_the_pool_asks_for_one_run():
    stock = Stock(initial_workers=2, window_s=120.0, pool_mb=BIG)
    stock.take(2, now=0.0)
    stock.done(now=5.0)
    assert stock.target(now=500.0) == (1, 2)
