"""The whole-job bound: the bound's program with each job wholly owned on one pool or wholly
rented (a MIP, HiGHS through scipy.optimize.milp, stopped at a number of branch-and-bound
nodes: a limit that does not move with the machine's load, so the bound on one trace is
the same on any machine; a wall-clock limit stays only as a safety cap).

Every simulated policy runs a job whole: on one owned pool, or on one cloud offer. So the
linear program's rows hold for such a schedule and, besides, its job's cloud share is 0
or 1 and its owned GPU-hours all sit on one pool: the MIP adds a binary per choice. Its
owned work may still spread over the segments of the job's window outside the part
every one-piece run covers (bound_model.py: a relaxation of running it in one piece), so
the MIP's optimum is a lower bound of every whole-job schedule's power + cloud, and so is any proven bound on that optimum: HiGHS's dual bound,
valid even when the time limit stops the search before the optimum is proven. An
incumbent is a whole-job point of the relaxation, not a schedule: it is no upper bound of
a policy's cost, only of the MIP's optimum (the gap says how far the search had got).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from orchestrator.simulate.bound_model import Program

# The search stops once its incumbent is proven within 0.1 % of the optimum: the bound
# then is that close to the whole-job optimum, and closing the last 0.01 % can take 10x as long.
MIP_REL_GAP = 1e-3


@dataclass(frozen=True)
class WholeJobBound:
    dual_bound: Optional[float]  # USD of power + cloud: a proven lower bound; None if none found
    incumbent: Optional[float]  # USD of power + cloud of the best whole-job point found
    gap: Optional[float]  # (incumbent - dual bound) / incumbent
    seconds: float
    time_limit_s: float
    hit_limit: bool  # the search stopped at a limit (the optimum is not proven)
    message: str
    node_limit: Optional[int] = None  # the deterministic limit; None: the time limit alone
    nodes: Optional[int] = None  # nodes the search explored

    @property
    def solved(self) -> bool:
        return not self.hit_limit and self.dual_bound is not None and self.incumbent is not None

    def summary(self) -> dict:
        return {"dual_bound": _usd(self.dual_bound), "incumbent": _usd(self.incumbent),
                "gap": None if self.gap is None else round(self.gap, 4),
                "seconds": round(self.seconds, 2), "time_limit_s": self.time_limit_s,
                "node_limit": self.node_limit, "nodes": self.nodes,
                "hit_limit": self.hit_limit, "message": self.message}


def _usd(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 2)


def whole_job_bound(prog: Program, time_limit_s: float,
                    node_limit: Optional[int] = None) -> WholeJobBound:
    """Solve the whole-job MIP for at most `node_limit` branch-and-bound nodes (None: no
    such limit) and `time_limit_s` seconds, and say what it proved."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_matrix, hstack, vstack

    t0 = time.perf_counter()
    n_v = prog.n_vars
    cloud = prog.pool < 0
    # A job with one owned pool: its cloud share binary makes it whole. A job with two or
    # more: one binary per pool w[j,p], its pool's GPU-hours / G = w[j,p], sum_p w + z = 1.
    pairs = np.unique(np.stack([prog.job[~cloud], prog.pool[~cloud]], axis=1), axis=0)
    multi_jobs, counts = np.unique(pairs[:, 0], return_counts=True) if len(pairs) else (
        np.zeros(0, np.int64), np.zeros(0, np.int64))
    multi = set(multi_jobs[counts > 1].tolist())
    link = [tuple(p) for p in pairs.tolist() if p[0] in multi]
    n_w = len(link)
    if n_w:
        link_ix = {jp: i for i, jp in enumerate(link)}
        owned = np.flatnonzero(~cloud & np.isin(prog.job, list(multi)))
        rows = np.array([link_ix[(int(prog.job[v]), int(prog.pool[v]))] for v in owned])
        y_part = coo_matrix((prog.per_job[owned], (rows, owned)), shape=(n_w, n_v))
        w_part = coo_matrix((-np.ones(n_w), (np.arange(n_w), np.arange(n_w))), shape=(n_w, n_w))
        linking = hstack([y_part, w_part]).tocsr()
        cloud_of = np.zeros(prog.n_jobs, dtype=np.int64)  # each job's one cloud variable
        cloud_of[prog.job[cloud]] = np.flatnonzero(cloud)
        jobs_w = np.array([jp[0] for jp in link])
        choose_rows = {j: i for i, j in enumerate(sorted(multi))}
        c_part = coo_matrix((np.ones(len(multi)), ([choose_rows[j] for j in sorted(multi)],
                                                   [int(cloud_of[j]) for j in sorted(multi)])),
                            shape=(len(multi), n_v))
        w_rows = coo_matrix((np.ones(n_w), ([choose_rows[int(j)] for j in jobs_w], np.arange(n_w))),
                            shape=(len(multi), n_w))
        choose = hstack([c_part, w_rows]).tocsr()
    pad = coo_matrix((prog.a_eq.shape[0], n_w))
    a_eq = hstack([prog.a_eq, pad]).tocsr()
    a_ub = hstack([prog.a_ub, coo_matrix((prog.a_ub.shape[0], n_w))]).tocsr()
    constraints = [LinearConstraint(a_eq, 1.0, 1.0), LinearConstraint(a_ub, -np.inf, prog.b_ub)]
    if n_w:
        constraints.append(LinearConstraint(vstack([linking, choose]).tocsr(),
                                            np.r_[np.zeros(n_w), np.ones(len(multi))],
                                            np.r_[np.zeros(n_w), np.ones(len(multi))]))
    c = np.r_[prog.cost, np.zeros(n_w)]
    hi = np.r_[np.where(cloud, 1.0, prog.hi), np.ones(n_w)]
    integrality = np.r_[cloud.astype(int), np.ones(n_w, dtype=int)]
    options: dict = {"time_limit": float(time_limit_s), "mip_rel_gap": MIP_REL_GAP}
    if node_limit is not None:
        options["node_limit"] = int(node_limit)
    res = milp(c, integrality=integrality, bounds=Bounds(np.zeros(len(c)), hi),
               constraints=constraints, options=options)
    seconds = time.perf_counter() - t0
    nodes = getattr(res, "mip_node_count", None)
    at_nodes = node_limit is not None and nodes is not None and nodes >= node_limit
    message = f"node limit reached ({nodes} node{'s' if nodes != 1 else ''})" if at_nodes and res.status != 0 else str(res.message)
    incumbent = float(res.fun) if res.x is not None and res.fun is not None else None
    dual = getattr(res, "mip_dual_bound", None)
    dual = float(dual) if dual is not None and math.isfinite(dual) else None
    if res.status == 0 and dual is None:
        dual = incumbent  # proven optimal: the optimum is its own bound
    if dual is not None and incumbent is not None:
        dual = min(dual, incumbent)  # HiGHS's tolerances may leave the bound a hair above
    gap = ((incumbent - dual) / incumbent if dual is not None and incumbent else None)
    return WholeJobBound(dual_bound=dual, incumbent=incumbent, gap=gap, seconds=seconds,
                         time_limit_s=float(time_limit_s),
                         hit_limit=res.status == 1 or (at_nodes and res.status != 0),
                         message=message, node_limit=node_limit, nodes=nodes)
