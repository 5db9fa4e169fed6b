"""How many warm processes the runner host (jobs/host.py) keeps, and when it starts them.

Why a pool at all, and why it is used up: a run's controller, its synchronization actor and
its workers are Ray actors, and Ray gives each actor a process of its own that exits with
the actor (an actor's worker is never handed back to the idle pool, unlike a task's). Ray
Train 2.60 creates all three per run (`TrainController`, `SynchronizationActor`,
`RayTrainWorker`) and they end with the run, so no process outlives a run: what a run took
from the pool must be started again, one torch import each (about 3 CPU-s here; a one-worker
run's three processes about 9 CPU-s).

So the pool holds runs' worth of processes for the next jobs, not only for the next one:
from the start, two runs' (the second `SPARE_AFTER_S` later); then as many runs as started
lately (`RECENT_S`), at least one more than ran at once, and one for each job the caller
knows is coming (`queued`), each with the largest recent run's workers. It is refilled
once the jobs pause (`IDLE_S`), not between two jobs of a burst: on 2 cores a refill beside
the burst's next job slowed that job more than it saved. The whole is bounded by memory
(`pool_mb`, `local.warm_pool_mb`, by default a tenth of the machine's, `machine_pool_mb`):
the first run's processes are always kept; more only as they fit, fewer workers given up
before fewer runs. A job that finds too few warm has the host start what it lacks at once,
side by side (`missing`), instead of waiting for a refill.

Standard library only: this runs on the target. Pure: the clock is passed in.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

# Runs that started within this long count as "lately": after a longer pause the pool
# keeps one run's processes.
RECENT_S = 120.0
# The pool is refilled once no run has started or ended for this long: longer than a
# submit takes to reach the host after the job before it ended (2.5-3 s here).
IDLE_S = 10.0
# How long after the host starts its first run's processes it starts a second run's (so
# that their imports do not slow a first job that comes at once).
SPARE_AFTER_S = 20.0
# How many runs' processes the host keeps from the start, where memory allows. Three let a
# first burst of three find each its own warm (the third, cold, took 6.9 s against 2.4-2.5),
# but one of the five processes asked for at once did not come in 1 of 4 fresh clones (as
# one of six had not in stop 57): Ray's raylet starts few worker processes at a time, and
# a prestart beyond that is dropped. Two until the pool counts what it holds and tops up.
SPARE_RUNS = 2
# The memory the pool may hold, MiB, where `local.warm_pool_mb` does not say: a tenth of
# the machine's (24 GiB: 2410, three one-worker runs' processes), within these bounds.
# The floor holds two one-worker runs' processes, or a two-worker run's and a second
# controller and synchronization actor.
DEFAULT_POOL_MB = 1536
MAX_POOL_MB = 4096


class Sizes(NamedTuple):
    """Memory of one idle warm process, MiB: its proportional share (PSS, torch's shared
    libraries counted once across them), measured with torch 2.13 (CPU) and Ray 2.60 at
    244-289 MiB for a process with torch imported and 104-108 MiB for the light one."""

    controller: int = 300
    sync: int = 120
    worker: int = 300


SIZES = Sizes()


def default_pool_mb(total_mb: float) -> int:
    """The pool's memory on a machine of `total_mb` MiB: a tenth, within the bounds above."""
    return int(min(MAX_POOL_MB, max(DEFAULT_POOL_MB, total_mb // 10)))


def machine_pool_mb(meminfo: str = "/proc/meminfo") -> int:
    """`default_pool_mb` of this machine (the floor where its memory cannot be read)."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return default_pool_mb(int(line.split()[1]) / 1024)
    except (OSError, ValueError, IndexError):
        pass
    return DEFAULT_POOL_MB


def run_mb(runs: int, workers: int, sizes: Sizes = SIZES) -> int:
    """Memory of `runs` runs' controllers and synchronization actors and `workers` workers."""
    return runs * (sizes.controller + sizes.sync) + workers * sizes.worker


def fit(runs: int, workers: int, first_workers: int, pool_mb: int,
        sizes: Sizes = SIZES) -> tuple[int, int]:
    """(runs, workers) cut to what `pool_mb` holds: fewer workers first, down to one a run
    (a run whose controller is warm starts its missing workers side by side at once), then
    fewer runs; never below one run and `first_workers`."""
    runs, workers = max(1, runs), max(first_workers, workers)
    while run_mb(runs, workers, sizes) > pool_mb:
        if workers > max(first_workers, runs):
            workers -= 1
        elif runs > 1:
            runs -= 1
        else:
            break
    return runs, workers


class Stock:
    """The warm processes started and not yet taken, and how many the next jobs need.

    `initial_workers` is what the host starts with (one per CPU, up to a cap), with one
    run's controller and synchronization actor; up to `SPARE_RUNS` runs' follow
    `SPARE_AFTER_S` later where `pool_mb` holds them, so that the second of two jobs back
    to back finds its own warm at once; after a burst and a pause, as many as it held.
    """

    def __init__(self, initial_workers: int, pool_mb: int = DEFAULT_POOL_MB,
                 window_s: float = RECENT_S, sizes: Sizes = SIZES):
        self.base_workers = max(1, initial_workers)
        self.pool_mb = pool_mb
        self.window_s = window_s
        self.sizes = sizes
        self.runs = 0  # warm controllers (with a synchronization actor each), not yet taken
        self.workers = 0
        self.running = 0
        self.last = float("-inf")  # when a run last started or ended
        self.recent: deque[tuple[float, int, int]] = deque(maxlen=32)  # (start, workers, at once)

    def initial(self) -> tuple[int, int]:
        """What to start with: (runs, workers), one run's worth."""
        return self._fill(1, self.base_workers)

    def spare(self) -> tuple[int, int]:
        """Up to `SPARE_RUNS` runs' controllers, synchronization actors and a worker each,
        where memory allows (fewer workers given up first, then fewer runs): nothing while
        a run is running (the pool is refilled once the jobs pause)."""
        if self.running:
            return 0, 0
        return self._fill(*self._fit(SPARE_RUNS, max(self.base_workers, SPARE_RUNS)))

    def missing(self, workers: int) -> tuple[int, int]:
        """What a run of `workers` workers would not find warm: (runs, workers). The host
        starts those at once, side by side: left to Ray, a cold run's controller starts
        first and asks for its workers only once it is up, one import after the other."""
        return (0 if self.runs >= 1 else 1), max(0, workers - self.workers)

    def take(self, workers: int, now: float) -> bool:
        """A run starts and takes one run's processes and `workers` workers; whether it
        found them all warm (False: some of its processes start cold)."""
        warm = self.runs >= 1 and self.workers >= workers
        self.runs = max(0, self.runs - 1)
        self.workers = max(0, self.workers - workers)
        self.running += 1
        self.last = now
        self.recent.append((now, workers, self.running))
        return warm

    def done(self, now: float) -> None:
        """A run is over. Nothing starts now: the next job of a burst may come in a second."""
        self.running = max(0, self.running - 1)
        self.last = now

    def idle(self, now: float, idle_s: float = IDLE_S, queued: int = 0) -> tuple[int, int]:
        """What to start (runs, workers) once no run has run, started or ended for
        `idle_s`: the pool brought to what the next jobs need. Nothing while jobs come."""
        if self.running or now - self.last < idle_s:
            return 0, 0
        return self._fill(*self.target(now, queued))

    def target(self, now: float, queued: int = 0) -> tuple[int, int]:
        """(runs, workers) the pool should hold now: as many runs as started lately (a
        burst of three: three), at least one more than ran at once and one for each job
        known to be coming (`queued`), with the largest recent run's workers for each; one
        run after a pause; all within `pool_mb`."""
        recent = [r for r in self.recent if now - r[0] <= self.window_s]
        queued = max(0, queued)
        if not recent:
            return self._fit(max(1, queued), max(1, queued) * self.base_workers)
        runs = max(max(r[2] for r in recent) + 1, len(recent), queued)
        per_run = max(r[1] for r in recent)
        return self._fit(runs, max(self.base_workers, runs * per_run))

    def _fit(self, runs: int, workers: int) -> tuple[int, int]:
        return fit(runs, workers, self.base_workers, self.pool_mb, self.sizes)

    def _fill(self, runs: int, workers: int) -> tuple[int, int]:
        add = (max(0, runs - self.runs), max(0, workers - self.workers))
        self.runs += add[0]
        self.workers += add[1]
        return add
