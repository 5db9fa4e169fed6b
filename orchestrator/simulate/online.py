"""`online-truth`: the reference orch is judged by, a greedy that knows each job's truth on arrival.

It is run on the jobs told the truth (`build_jobs(..., "truth")`: each `Ask` carries the
true wall hours and speeds), with the true spot preemption rate in its settings, so it
knows on arrival how long the job takes on every offer and, since every job it placed
said its true hours, when each running and queued owned job ends. It knows no future
arrival, except the cron schedules' next slots, which any team (and orch) knows ahead.

For each job it prices every candidate at what the team pays (rent; power on owned
GPUs, plus the rent of any cron run it would make late there) and takes the cheapest that
ends by the job's deadline and, for exploratory work, starts within the cloud's start-up
(the wait goal); steady work without a deadline waits at most `max_wait_minutes`. With
no option meeting those, the one that ends first.
"""

from __future__ import annotations

import bisect
import math
from typing import Optional

from orchestrator.decision.pricing import job_cost
from orchestrator.simulate.engine import LOST_WORK_H, Choice, Pool, View
from orchestrator.simulate.jobs import Ask, believed_hours

NAME = "online-truth"


def _replay(pool: Pool, now_h: float, extra: Optional[tuple[float, float]]) -> list[tuple]:
    """The pool's owned GPUs from now on, as the engine will run them (first in, first
    out): (start_h, end_h, used) of every running and queued job, and last of `extra`
    (used, hours) when given. Every job's hours here are true (its Choice said them)."""
    free, t = pool.free, now_h
    ends = sorted((start + (est or 0.0), used) for used, start, est, _ in pool.running.values())
    out = [(start, start + (est or 0.0), used) for used, start, est, _ in pool.running.values()]
    waiting = [(c.used, c.est_hours or 0.0) for _, c in pool.queue]
    if extra is not None:
        waiting.append(extra)
    for used, hours in waiting:
        while free < used - 1e-9 and ends:
            t_end, u = ends.pop(0)
            t, free = max(t, t_end), free + u
        free -= used
        out.append((t, t + hours, used))
        ends.append((t + hours, used))
        ends.sort()
    return out


def _late_crons(pool: Pool, view: View, busy: list[tuple], horizon_h: float) -> set:
    """The cron slots due on this pool within `horizon_h` that `busy` leaves too few GPUs
    to start within their slack (each cron run, once started, holds its GPUs for its true
    hours); as (arrival_h, name)."""
    late, held = set(), list(busy)
    scheduled = view.scheduled
    i = bisect.bisect_right([c.arrival_h for c in scheduled], view.now_h)
    for cron in scheduled[i:]:
        if cron.arrival_h > view.now_h + horizon_h:
            break
        used = next((u for o, u in cron.candidates if o == pool.offer), None)
        if used is None:
            continue
        hours = believed_hours(cron, pool.gpu, used, view.settings.gpu_speeds,
                               view.settings.default_job_hours)
        start = _first_room(held, pool.offer.count, used, cron.arrival_h)
        if start - cron.arrival_h > cron.slack_h + 1e-9:
            late.add((cron.arrival_h, cron.name, math.inf if cron.rent_usd is None else cron.rent_usd))
        else:
            held.append((start, start + hours, used))
    return late


def _first_room(held: list[tuple], count: float, need: float, at: float) -> float:
    """The first time from `at` when `need` GPUs of `count` are free of `held`."""
    times = sorted({at} | {e for _, e, _ in held if e > at})
    for t in times:
        if count - sum(u for s, e, u in held if s <= t + 1e-9 and e > t + 1e-9) >= need - 1e-9:
            return t
    return math.inf


def online_truth(a: Ask, view: View) -> Optional[Choice]:
    """The cheapest option that keeps the job's deadline and the wait goal, by its truth."""
    s, now = view.settings, view.now_h
    startup_h = s.cloud_startup_minutes / 60.0
    due = math.inf if a.deadline_h is None else a.arrival_h + a.deadline_h
    wait_ok = startup_h if a.kind != "steady" else (
        math.inf if a.deadline_h is not None else s.max_wait_minutes / 60.0)
    lost_h = LOST_WORK_H + startup_h
    best, fallback = None, None
    for o, u in a.candidates:
        if o.spot and not a.checkpoints:
            continue
        h = believed_hours(a, o.gpu, u, s.gpu_speeds, s.default_job_hours)
        if not o.owned:
            run_h = h * (1 + s.spot_preemptions_per_hour * lost_h) if o.spot else h
            cost = job_cost(o, run_h, u, s.cloud_startup_minutes)[0]
            start, end = now + startup_h, now + startup_h + run_h
            wait = 0.0
        else:
            pool = view.pool_for(o)
            before = _replay(pool, now, None)
            busy = _replay(pool, now, (u, h))
            start, end = busy[-1][0], busy[-1][1]
            wait = start - now
            power = job_cost(o, h, u, 0.0)[1] or 0.0
            horizon = view.lookahead_h
            made_late = _late_crons(pool, view, busy, horizon) - _late_crons(
                pool, view, before, horizon)
            cost = power + sum(rent for _, _, rent in made_late)
        key = (cost, end, o.cloud or "", o.region or "", o.instance_type or "")
        if end <= due + 1e-9 and wait <= wait_ok + 1e-9:
            if best is None or key < best[0]:
                best = (key, Choice(o, u, h, a.kind))
        fkey = (end, cost)
        if fallback is None or fkey < fallback[0]:
            fallback = (fkey, Choice(o, u, h, a.kind))
    pick = best or fallback
    return None if pick is None else pick[1]
