"""`orch cluster status`: the on-prem Ray cluster's nodes, GPUs, jobs and hourly cost."""

from __future__ import annotations

import dataclasses
import time

import typer

from orchestrator.cli.render import duration, local_only, out, print_json, table

cluster_app = typer.Typer(no_args_is_help=True, help="The on-prem Ray cluster (ORCH_RAY_ADDRESS).")


@cluster_app.command("status")
def status(json_out: bool = typer.Option(False, "--json", help="JSON on stdout")) -> None:
    """Nodes, GPUs (model, count, free), running and queued jobs, owned cost per hour."""
    from orchestrator.base.errors import InputError
    from orchestrator.base.targets import PER_USER_CLUSTER, SHARED_CLUSTER
    from orchestrator.decision.pricing import fmt_money, onprem_offer
    from orchestrator.settings import load_settings
    from providers.onprem import OnPremProvider

    settings = load_settings()
    local_only("cluster status", "the cluster at ORCH_RAY_ADDRESS, read from this machine")
    if not settings.ray_address:
        raise InputError("no on-prem cluster is configured",
                         "set ORCH_RAY_ADDRESS=http://HEAD:8265 (see infra/README.md)")
    snap = OnPremProvider(settings.ray_address, settings.ray_token_file).snapshot()
    offers = [onprem_offer(inv, settings.electricity_price) for inv in settings.onprem]
    per_hour = sum(o.price_per_hour for o in offers)
    power = sum(o.power_per_hour for o in offers)
    now = time.time()
    if json_out:
        print_json({
            "address": snap.address,
            "nodes": [dataclasses.asdict(n) for n in snap.nodes],
            "total": snap.total, "used": snap.used,
            "free": {r: snap.free(r) for r in ("CPU", "GPU")},
            "gpus": snap.gpu_models,
            "jobs": [dataclasses.asdict(j) for j in snap.jobs],
            "mode": settings.onprem_isolation,
            "cost_per_hour": {"full": per_hour * settings.currency_rate,
                              "power": power * settings.currency_rate,
                              "currency": settings.currency},
        })
        return
    out.print(f"[bold]cluster[/] {snap.address}: {sum(n.alive for n in snap.nodes)} nodes alive, "
              f"CPUs {snap.free('CPU'):g}/{snap.total.get('CPU', 0):g} free, "
              f"GPUs {snap.free('GPU'):g}/{snap.total.get('GPU', 0):g} free")
    out.print("mode: " + (PER_USER_CLUSTER if settings.onprem_isolation == "per-user"
                          else SHARED_CLUSTER))
    out.print(table(["NODE", "IP", "STATE", "HEAD", "CPUS", "GPUS", "GPU MODEL"],
                    [(n.node_id[:12], n.ip, "ALIVE" if n.alive else "DEAD", "yes" if n.is_head else "",
                      f"{n.cpus:g}", f"{n.gpus:g}", n.gpu_model) for n in snap.nodes]))
    if snap.jobs:
        out.print(table(["JOB", "ORCH ID", "NAME", "STATUS", "RUNNING FOR", "EST. HOURS", "CPUS", "GPUS"],
                        [(j.submission_id, j.orch_id, j.name, j.status,
                          duration(now - j.start_time) if j.start_time else None,
                          j.est_hours, f"{j.cpus:g}", f"{j.gpus:g}") for j in snap.jobs]))
    else:
        out.print("no jobs running or queued")
    if offers:
        out.print(f"owned hardware: {fmt_money(per_hour, settings.currency, settings.currency_rate)}/h "
                  f"in full (amortized purchase + power), "
                  f"{fmt_money(power, settings.currency, settings.currency_rate)}/h of it power")
    else:
        out.print("owned hardware: not priced ([[onprem]] inventory missing from the settings)")
