"""Sweeps: one job file expanded into runs (spec/sweep.py), placed together. Every run is
checked and placed first (one that cannot run refuses the sweep, nothing written) and the
whole is held to the sweep's budget; then the runs are recorded and launched longest
first, each placed again after the ones before it took their places: the owned GPUs go to
the runs that need them most, the rest to the cheapest rentals. Each run is a job of its
own, with the sweep's id; `orch status` shows the sweep as one row with its best run."""

from __future__ import annotations

import secrets as secrets_module
import time
from typing import Optional

from orchestrator.base.errors import BackendError, InputError
from orchestrator.decision import sweeps as rules
from orchestrator.decision.pricing import fmt_money
from orchestrator.records import JobRow
from orchestrator.service.core import Core
from orchestrator.service.submitting import Checked, Submitted, check, launch, record
from orchestrator.spec import JobSpec
from orchestrator.spec.sweep import run_label
from orchestrator.spec.sweep_runs import expand
from orchestrator.store import TERMINAL
from providers.ray_cluster import ClusterJob, ClusterSnapshot


def new_sweep_id() -> str:
    return f"sweep-{secrets_module.token_hex(4)}"


def _hours(done: Checked) -> float:
    est = done.decision.estimate
    return est.hours if est is not None and est.hours is not None else 0.0


def _cost_usd(done: Checked) -> float:
    est = done.decision.estimate
    return est.cost_usd if est is not None and est.cost_usd is not None else 0.0


def submit_sweep(core: Core, spec: JobSpec, idempotency_key: Optional[str] = None) -> list[Submitted]:
    """Place every run before anything is written, longest first, each on the owned
    capacity the runs before it will hold (one that cannot run refuses the sweep); hold the
    whole to the sweep's budget; then record and launch them all in that order. Returned in
    the file's order. A key seen before returns that sweep's runs, launching nothing."""
    sweep = spec.sweep
    assert sweep is not None
    runs = expand(spec)
    values = sweep.values()
    from orchestrator.service import planning

    cluster = planning.read_cluster(core.settings) if core.settings.ray_address else None
    with planning.cluster_read_as(cluster if isinstance(cluster, ClusterSnapshot) else None):
        alone = [check(core, run) for run in runs]  # each as if it were the only one: the ranking
    order = rules.longest_first([_hours(c) for c in alone])
    placed = _placed_together(core, runs, order, cluster)
    costs = [_cost_usd(placed[i]) for i in range(len(runs))]
    rate = core.settings.currency_rate
    if sweep.max_cost is not None and sum(costs) > sweep.max_cost / rate + 1e-9:
        cur = core.settings.currency
        raise InputError(f"sweep {spec.name}: its {len(runs)} runs are planned at "
                         f"{fmt_money(sum(costs), cur, rate)}, over its max_cost "
                         f"{fmt_money(sweep.max_cost / rate, cur, rate)}",
                         "`orch plan FILE` shows each run's plan; fewer runs, shorter ones, or "
                         "a bigger sweep.max_cost")
    shares = (rules.budget_shares(sweep.max_cost, costs)  # in the job file's currency
              if sweep.max_cost is not None else [None] * len(runs))
    sweep_id = new_sweep_id()
    done: dict[int, Submitted] = {}
    for i in order:
        run = runs[i]
        share, mine = shares[i], run.budget.max_cost
        if share is not None:  # its part of the sweep's budget: together, the whole
            run.budget.max_cost = share if mine is None else min(mine, share)
        info = {"sweep": sweep_id, "sweep_name": spec.name, "sweep_run": i + 1,
                "sweep_runs": len(runs), "sweep_values": run_label(values[i]),
                "sweep_metric": sweep.metric, "sweep_mode": sweep.mode,
                "env_secrets": sorted(k for k, v in run.secrets.items() if v is None)}
        key = f"{idempotency_key}:run{i + 1}" if idempotency_key else None
        rec, secrets, existing = record(core, run, key, info=info, checked=placed[i])
        if not existing:
            try:
                rec = launch(core, rec, run, secrets)
            except BackendError:
                rec = core.store.get(rec.id)  # launch() recorded it FAILED, with why
        done[i] = Submitted(rec, existing)
    return [done[i] for i in range(len(runs))]


def _placed_together(core: Core, runs: list[JobSpec], order: list[int], cluster) -> dict[int, Checked]:
    """Each run placed in `order` on the on-prem cluster as the runs placed before it will
    hold it (`cluster`, read once, with each run placed there added as Ray will report
    it), so the owned GPUs free now go to the first runs and the rest rent."""
    from orchestrator.base.targets import ONPREM
    from orchestrator.service import planning

    placed: dict[int, Checked] = {}
    for i in order:
        with planning.cluster_read_as(cluster if isinstance(cluster, ClusterSnapshot) else None):
            placed[i] = check(core, runs[i])
        if isinstance(cluster, ClusterSnapshot) and placed[i].decision.target == ONPREM:
            cluster = _holding(cluster, runs[i], placed[i], i)
    return placed


def _holding(cluster: ClusterSnapshot, run: JobSpec, done: Checked, i: int) -> ClusterSnapshot:
    """The cluster with `run` on it as Ray will report it once launched."""
    import dataclasses

    from orchestrator.decision.demand import job_demand

    holds = job_demand(run, done.decision.choice)
    est = done.decision.estimate
    job = ClusterJob(f"sweep-run-{i + 1}", "RUNNING", None, run.name, time.time(),
                     est.hours if est is not None else None, holds.cpus, holds.gpus)
    used = dict(cluster.used)
    used["CPU"] = used.get("CPU", 0.0) + holds.cpus
    used["GPU"] = used.get("GPU", 0.0) + holds.gpus
    return dataclasses.replace(cluster, used=used, jobs=(*cluster.jobs, job))


def runs_of(core: Core, sweep_id: str) -> list[JobRow]:
    """The sweep's runs, in the file's order."""
    rows = [r for r in core.store.list(limit=1_000_000) if r.info.sweep == sweep_id]
    return sorted(rows, key=lambda r: r.info.sweep_run or 0)


def cancel_sweep(core: Core, sweep_id: str) -> list[JobRow]:
    """Every unfinished run of the sweep stopped at once (asked, then followed)."""
    from orchestrator.service.following import cancel

    rows = runs_of(core, sweep_id)
    if not rows:
        from orchestrator.base.errors import NotFound

        raise NotFound(f"no sweep {sweep_id}", "`orch status` lists the sweeps")
    out = []
    for rec in rows:
        out.append(rec if rec.status in TERMINAL else cancel(core, rec.id, wait_s=0))
    return out
