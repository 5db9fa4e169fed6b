"""The hindsight bound's program: time segments, variables and sparse rows, shared by the LP and the MIP.

Owned capacity is counted per time bucket of `bucket_h` hours (the grid k*bucket_h). A
job's window edges (its arrival, its deadline, an exploratory job's latest useful
finish) rarely fall on the grid; a bucket that holds an edge is kept whole and each job
may put into it at most its GPUs x the exact overlap of the bucket with its window.

Why it stays a lower bound: take any schedule that meets the windows. In a bucket of
length L a pool of C GPUs runs at most C x L GPU-hours, and a job on u GPUs runs at
most u x (the time the bucket shares with its window) of them, since it runs only
inside its window. So the GPU-hours the schedule runs per (job, pool, bucket) satisfy
every row; the rows are implied by the schedule, never stronger than it.

Why consecutive buckets that hold no edge may be merged into one segment, exactly:
inside such a run every window either covers the whole run or misses it. The merged
rows (job <= u x |S|, pool <= C x |S|) are the sums of the per-bucket rows, so every
per-bucket point gives a merged one; and a merged point spread over its buckets in
proportion to their lengths (y x |k| / |S|) meets every per-bucket row. The cost of an
owned GPU-hour does not depend on the bucket, so both programs have the same optimum:
merging changes the size, not the bound. With `bucket_h` = 0 only the window edges cut
time (the limit of ever smaller buckets, the tightest of these bounds).

Runs in one piece (`one_piece`, on by default): every simulated policy runs a job on
owned GPUs from its start to its end without a pause. A run of h hours inside a window
[a, b] then covers [b - h, a + h] whatever its start, when that is not empty (an
exploratory job's window is its run plus the cloud's start-up, so this is nearly all of
it). For each job and pool with such a part C one row says: its GPU-hours in the
segments touching C are at least u x |C| times its share on that pool (sum y / G). A
one-piece schedule meets it (share 1: it runs on u GPUs through C; share 0: both sides
are 0), so the bound stays a lower bound of every one-piece schedule; C's ends are cut
edges, so the segments touching C are C. A window of blocks (below) gets no such row. Without the row, twelve 1-hour runs due 70
minutes after they arrive could share two GPUs as 2.33 runs' work; with it, as 2.

A job whose window is longer than LONG_WINDOW_H would need a variable per segment of
weeks; it gets one per block instead (blocks: runs of whole segments, about BLOCK_H
hours each), bounded by its GPUs x the block's overlap with its window, and counted
only in a row per pool and block: the pool's GPUs x the block's length bounds the
block's GPU-hours of every job, short-window ones included. Any schedule meets these
rows too (a block's GPU-hours are the sum of its segments'), so the bound stays valid;
it only gives up where in the block such a job's work falls (a relaxation, looser only
where a flexible job's own GPU count would bind inside a block).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from orchestrator.base.targets import ONPREM
from orchestrator.decision.pricing import job_cost
from orchestrator.simulate.jobs import owned_cost

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

    from orchestrator.simulate.engine import Simulation

_EPS = 1e-9
# A window longer than this (a job with no deadline may use owned GPUs until the end) gets
# one variable per block of BLOCK_H hours instead of one per segment: see the docstring.
LONG_WINDOW_H = 168.0
BLOCK_H = 24.0


@dataclass
class Program:
    """min cost @ x over lo <= x <= hi, a_eq x = 1 (one row per job), a_ub x <= b_ub
    (one row per pool and segment). Variable v belongs to job job[v], on pool pool[v]
    (-1: its cheapest cloud option)."""

    cost: np.ndarray  # USD per unit (owned: per GPU-hour at power; cloud: per whole job)
    full: np.ndarray  # the same under the per-use chargeback
    hi: np.ndarray  # upper bound per variable (inf for the cloud share)
    job: np.ndarray
    pool: np.ndarray
    per_job: np.ndarray  # fraction of the job per unit (1/G for owned GPU-hours, 1 for cloud)
    in_span: np.ndarray  # share of an owned variable's window-overlap inside the simulated span
    a_eq: csr_matrix
    a_ub: csr_matrix
    b_ub: np.ndarray
    n_jobs: int
    n_segments: int

    @property
    def n_vars(self) -> int:
        return len(self.cost)


def cuts(edges: np.ndarray, bucket_h: float, horizon: float) -> np.ndarray:
    """The segment boundaries: grid points where an edge falls on the grid or at either end
    of a bucket holding an edge, plus 0 and the horizon's bucket end; every edge itself
    when `bucket_h` is 0."""
    edges = np.clip(edges, 0.0, horizon)
    if bucket_h <= 0:
        return np.unique(np.concatenate([[0.0, horizon], edges]))
    q = edges / bucket_h
    near = np.round(q)
    on_grid = np.abs(q - near) < _EPS
    lo = np.where(on_grid, near, np.floor(q))
    hi = np.where(on_grid, near, np.ceil(q))
    top = math.ceil(horizon / bucket_h - _EPS)
    ks = np.unique(np.concatenate([[0, top], lo, hi]).astype(np.int64))
    out = ks.astype(float) * bucket_h
    out[-1] = max(out[-1], horizon)  # the last bucket reaches every window's end
    return out


def sure_part(a: float, stop: float, h: float) -> Optional[tuple[float, float]]:
    """The part of the window [a, stop] that a run of `h` hours in one piece covers wherever
    it starts, [stop - h, a + h]; None when empty, or for a window of blocks (docstring)."""
    lo, hi = max(a, stop - h), min(stop, a + h)
    return (lo, hi) if stop - a <= LONG_WINDOW_H and hi - lo > _EPS else None


def build(sim: Simulation, end_h: float, bucket_h: float, one_piece: bool = True) -> Program:
    """The program for every job of `sim`: for each owned pool a job fits, its GPU-hours in
    each segment of its window; and its share sent to its cheapest cloud option.
    `one_piece`: add the rows that hold for runs that never pause (see the docstring)."""
    from scipy.sparse import coo_matrix

    pools = [o for o in sim.offers if o.target == ONPREM]
    pool_ix = {p: i for i, p in enumerate(pools)}
    startup = sim.settings.cloud_startup_minutes
    horizon = max([1.0, end_h] + [sj.job.due_h for sj in sim.jobs if math.isfinite(sj.job.due_h)])
    # Per job: (pool, GPUs used, GPU-hours G, USD per GPU-hour at power, in full, window).
    options: list[list[tuple[int, float, float, float, float, float, float]]] = []
    clouds: list[float] = []
    edges: list[float] = []
    for sj in sim.jobs:
        a = sj.job.arrival_h
        cloud = min((job_cost(o, sim.hours(sj, o.gpu, u), u, startup)[0]
                     for o, u in sj.candidates
                     if not o.owned and (sj.job.checkpoints or not o.spot)), default=math.inf)
        end = sj.job.due_h if math.isfinite(cloud) and math.isfinite(sj.job.due_h) else end_h
        opts = []
        for o, u in sj.candidates:
            if o.target != ONPREM:
                continue
            h = sim.hours(sj, o.gpu, u)
            full, c = owned_cost(o, h, u)
            g = h * u
            stop = min(end, a + startup / 60.0 + h) if sj.kind == "exploratory" else end
            stop = min(stop, horizon)
            opts.append((pool_ix[o], u, g, c / g, full / g, a, stop))
            edges += [a, stop]
            sure = sure_part(a, stop, h) if one_piece else None
            if sure:
                edges += list(sure)  # its ends cut the segments
        if not math.isfinite(cloud):
            cloud = min((c * g for _, _, g, c, _, _, _ in opts), default=math.inf)  # late, owned
        if not math.isfinite(cloud):
            cloud = 0.0  # nothing fits this job anywhere: every policy leaves it unplaced
        options.append(opts)
        clouds.append(cloud)
    cut = cuts(np.array(edges, dtype=float), bucket_h, horizon)
    n_s, n_p = len(cut) - 1, max(1, len(pools))
    # Blocks of about BLOCK_H hours, each a run of whole segments (by where they start).
    blk = np.floor(cut[:-1] / BLOCK_H + _EPS).astype(np.int64)
    blk_ids, blk = np.unique(blk, return_inverse=True)
    n_b = len(blk_ids)
    blk_lo = np.full(n_b, np.inf)
    blk_hi = np.zeros(n_b)
    np.minimum.at(blk_lo, blk, cut[:-1])
    np.maximum.at(blk_hi, blk, cut[1:])
    longs = any(stop - a > LONG_WINDOW_H for opts in options for *_, a, stop in opts)
    span = sim.span_h
    parts: dict[str, list[np.ndarray]] = {k: [] for k in
                                          ("cost", "full", "hi", "job", "pool", "per", "span", "row", "blk")}

    n_added = 0
    # Per (job, pool) whose window is shorter than twice its run: a row saying a run in one
    # piece covers the part of the window every start time covers (see the docstring).
    must: dict[str, list[np.ndarray]] = {"row": [], "col": [], "val": []}

    def add(j: int, p: int, u: float, g: float, c: float, full: float, window: tuple[float, float],
            lo_t, hi_t, row, brow) -> None:
        nonlocal n_added
        overlap = hi_t - lo_t
        keep = overlap > _EPS
        lo_t, hi_t, overlap, row, brow = lo_t[keep], hi_t[keep], overlap[keep], row[keep], brow[keep]
        n = len(overlap)
        sure = sure_part(*window, g / u) if one_piece and n else None
        if sure:
            c_lo, c_hi = sure
            touch = (np.minimum(hi_t, c_hi) - np.maximum(lo_t, c_lo)) > _EPS
            must["row"].append(np.full(n, len(must["val"])))
            must["col"].append(np.arange(n_added, n_added + n))
            must["val"].append(u * (c_hi - c_lo) / g - touch.astype(float))
        n_added += n
        parts["cost"].append(np.full(n, c))
        parts["full"].append(np.full(n, full))
        parts["hi"].append(u * overlap)
        parts["job"].append(np.full(n, j))
        parts["pool"].append(np.full(n, p))
        parts["per"].append(np.full(n, 1.0 / g))
        parts["span"].append(np.clip(np.minimum(hi_t, span) - lo_t, 0.0, None) / overlap)
        parts["row"].append(row)
        parts["blk"].append(brow)

    for j, (opts, cloud) in enumerate(zip(options, clouds)):
        for p, u, g, c, full, a, stop in opts:
            i0 = max(0, int(np.searchsorted(cut, a, side="right")) - 1)
            i1 = min(n_s, int(np.searchsorted(cut, stop, side="left")))
            seg = np.arange(i0, max(i0, i1))
            brow = n_p * n_s + p * n_b + blk[seg]
            if stop - a > LONG_WINDOW_H:  # one variable per block, in the block's row only
                b = np.unique(blk[seg])
                add(j, p, u, g, c, full, (a, stop), np.maximum(blk_lo[b], a), np.minimum(blk_hi[b], stop),
                    n_p * n_s + p * n_b + b, np.full(len(b), -1))
            else:
                add(j, p, u, g, c, full, (a, stop), np.maximum(cut[seg], a), np.minimum(cut[seg + 1], stop),
                    p * n_s + seg, brow if longs else np.full(len(seg), -1))
        parts["cost"].append(np.array([cloud]))
        parts["full"].append(np.array([cloud]))
        parts["hi"].append(np.array([np.inf]))
        parts["job"].append(np.array([j]))
        parts["pool"].append(np.array([-1]))
        parts["per"].append(np.array([1.0]))
        parts["span"].append(np.array([0.0]))
        parts["row"].append(np.array([-1]))
        parts["blk"].append(np.array([-1]))
        n_added += 1
    cat = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in parts.items()}
    job = cat["job"].astype(np.int64)
    pool = cat["pool"].astype(np.int64)
    n_v, n_j = len(job), len(sim.jobs)
    a_eq = coo_matrix((cat["per"], (job, np.arange(n_v))), shape=(n_j, n_v)).tocsr()
    rows = np.concatenate([cat["row"], cat["blk"]]).astype(np.int64)
    cols = np.concatenate([np.arange(n_v), np.arange(n_v)])
    used = rows >= 0
    n_rows = n_p * (n_s + (n_b if longs else 0))
    n_must = len(must["val"])
    rows = np.concatenate([rows[used]] + [n_rows + r for r in must["row"]]).astype(np.int64)
    cols = np.concatenate([cols[used]] + must["col"]).astype(np.int64)
    vals = np.concatenate([np.ones(int(used.sum()))] + must["val"])
    a_ub = coo_matrix((vals, (rows, cols)), shape=(n_rows + n_must, n_v)).tocsr()
    counts = [float(p.count) for p in pools] or [0.0]
    b_ub = np.concatenate([c * np.diff(cut) for c in counts]
                          + ([c * (blk_hi - blk_lo) for c in counts] if longs else [])
                          + [np.zeros(n_must)])
    return Program(cost=cat["cost"], full=cat["full"], hi=cat["hi"], job=job, pool=pool,
                   per_job=cat["per"], in_span=cat["span"], a_eq=a_eq, a_ub=a_ub, b_ub=b_ub,
                   n_jobs=n_j, n_segments=n_s)
