"""On-prem offers read from the Ray cluster's own nodes, when no [[onprem]] inventory prices them.

Pure: nodes in (anything with alive, cpus, gpus and gpu_model, as providers.ray_cluster.Node),
offers and notes out. The purchase price of such hardware is unknown, so its offers count
power alone, at stated default wattages, and say what to add to price them in full.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Mapping, Optional, Sequence

from orchestrator.base.targets import ONPREM
from orchestrator.decision.gpus import SPEED, canonical_gpu
from orchestrator.decision.matching import Needs, misfit
from orchestrator.decision.models import Capacity, Offer
from orchestrator.decision.pricing import owned_hourly

if TYPE_CHECKING:  # placement imports this module: no pydantic for an annotation
    from orchestrator.records import JobRow

GPU_WATTS = 300.0  # per GPU under load, host share included: OwnedGpus.watts's default
CPU_NODE_WATTS = 200.0  # per CPU-only node under load
UNKNOWN_GPU = "GPU"  # a GPU whose model Ray did not report
UNPRICED_PREFIX = "the on-prem cluster's full cost is unknown (no [[onprem]] inventory)"


def ray_gpu_name(model: Optional[str]) -> str:
    """SkyPilot's spelling of a Ray accelerator type: Ray says A100-80G where SkyPilot says
    A100-80GB."""
    if not model:
        return UNKNOWN_GPU
    name = canonical_gpu(model)
    if name not in SPEED and model.upper().endswith("G") and canonical_gpu(model + "B") in SPEED:
        return canonical_gpu(model + "B")
    return name


def _pools(nodes: Iterable) -> tuple[dict[str, list], list]:
    """Alive nodes: those with GPUs by model, and the CPU-only ones."""
    by_model: dict[str, list] = {}
    cpu_only = []
    for n in nodes:
        if not n.alive:
            continue
        if n.gpus:
            by_model.setdefault(ray_gpu_name(n.gpu_model), []).append(n)
        else:
            cpu_only.append(n)
    return by_model, cpu_only


def unpriced_note(gpus: bool, cpu_nodes: bool) -> str:
    """What an offer from the cluster's nodes lacks and how to give it: one sentence for the
    whole cluster, so a plan shows it once."""
    if gpus:
        watts = f"{GPU_WATTS:g} W per GPU" + (
            f" and {CPU_NODE_WATTS:g} W per CPU-only node" if cpu_nodes else "")
        keys = "gpu, count, purchase_price and watts"
    else:
        watts = f"{CPU_NODE_WATTS:g} W per node"
        keys = 'gpu = "CPU", count, cpus, purchase_price and watts'
    return (f"{UNPRICED_PREFIX}: power assumed at {watts}; add [[onprem]] {keys} to the "
            "settings to price it")


def cluster_offers(nodes: Iterable, electricity_price: float) -> list[Offer]:
    """One offer per GPU model (its GPUs and the CPUs of its nodes) and, when the cluster
    has CPU-only nodes, one CPU pool (every alive node's CPUs, a CPU job may land on any);
    power only, `unpriced` set. No alive node: no offers."""
    nodes = [n for n in nodes if n.alive]
    by_model, cpu_only = _pools(nodes)
    note = unpriced_note(bool(by_model), bool(cpu_only))
    offers = []
    for model, ns in sorted(by_model.items()):
        count = sum(n.gpus for n in ns)
        offers.append(_offer(model, count, sum(n.cpus for n in ns), GPU_WATTS * count,
                             electricity_price, note))
    if cpu_only:
        offers.append(_offer(None, 0, sum(n.cpus for n in nodes),
                             CPU_NODE_WATTS * len(cpu_only), electricity_price, note))
    return offers


def _offer(gpu: Optional[str], count: float, cpus: float, watts: float,
           electricity_price: float, note: str) -> Offer:
    _, power = owned_hourly(0.0, 1.0, 1.0, watts, electricity_price)
    return Offer(target=ONPREM, pooled=True, gpu=gpu, count=count, cpus=cpus, price_per_hour=power,
                 amortized_per_hour=0.0, power_per_hour=power, unpriced=note,
                 kwh_price=electricity_price)


def unread_offers(needs: Needs, capacity: Optional[Capacity], has_onprem: bool, allow: set,
                  local_only: bool) -> list[Offer]:
    """The on-prem cluster as a plan row when it did not answer and no inventory stands in
    for it: a stand-in shaped as the job's first choice, never chosen, that carries why
    (capacity.unreachable) to the plan's rows, its refusal and its `--json`. None otherwise."""
    if (capacity is None or not capacity.unreachable or has_onprem or local_only
            or ONPREM not in allow):
        return []
    gpu, count = needs.choices[0] if needs.choices else (None, 0.0)
    o = Offer(target=ONPREM, pooled=True, gpu=gpu, count=count, price_per_hour=0.0,
              unread=capacity.unreachable)
    return [] if misfit(o, needs) else [o]


def _counts(gpus: Mapping[str, float]) -> str:
    return ", ".join(f"{n:g}x {g}" for g, n in sorted(gpus.items())) or "no GPUs"


def inventory_mismatch(inventory: Sequence, nodes: Iterable, address: str) -> Optional[str]:
    """One note when the [[onprem]] inventory (settings.OwnedGpus lines) names other GPU
    models or counts, or another number of CPU-only nodes, than the cluster reports; None
    when they agree. A GPU whose model Ray did not report is compared by count alone."""
    by_model, cpu_only = _pools(nodes)
    have = {g: sum(n.gpus for n in ns) for g, ns in by_model.items()}
    said: dict[str, float] = {}
    said_nodes: Optional[int] = None
    for inv in inventory:
        if inv.cpu_pool:
            said_nodes = (said_nodes or 0) + inv.count
        else:
            said[canonical_gpu(inv.gpu)] = said.get(canonical_gpu(inv.gpu), 0) + inv.count
    if UNKNOWN_GPU in have:
        same_gpus = sum(said.values()) == sum(have.values())
    else:
        same_gpus = said == have
    same_nodes = said_nodes is None or said_nodes == len(cpu_only)
    if same_gpus and same_nodes:
        return None
    parts = []
    if not same_gpus:
        parts.append(f"GPUs: the inventory says {_counts(said)}, the cluster has {_counts(have)}")
    if not same_nodes:
        parts.append(f"CPU-only nodes: the inventory says {said_nodes}, the cluster has "
                     f"{len(cpu_only)} alive")
    return (f"the [[onprem]] inventory disagrees with the cluster at {address} ("
            + "; ".join(parts) + "): plans offer and price what the inventory says while "
            "capacity is read from the cluster; update [[onprem]] in the settings to match")


def ran_unpriced(rec: JobRow) -> bool:
    """Whether a job record ran on-prem on hardware whose full cost was unknown (its plan
    priced power only): what `orch cost` says once."""
    decision, choice = rec.decision, rec.choice
    if (rec.target or (choice.target if choice else None)) != ONPREM:
        return False
    if choice is not None and not choice.full_cost_known:
        return True
    return any(str(n).startswith(UNPRICED_PREFIX) for n in (decision.notes if decision else ()))
