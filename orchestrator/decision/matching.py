"""Which offers could take a job at all: offers indexed for matching, a job's needs, misfits."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Optional

from orchestrator.base.targets import ONPREM, OWNED, TIE_ORDER
from orchestrator.decision.gpus import canonical_gpu, expand
from orchestrator.decision.models import Offer


class OfferIndex:
    """Offers grouped for matching, built once and shared by many decisions: cloud
    offers by (GPU model, count), owned pools by model, CPU-only machines apart."""

    def __init__(self, offers: Iterable[Offer]):
        self.offers = tuple(offers)
        self.cloud: dict[tuple[str, float], list[Offer]] = {}
        self.owned: dict[str, list[Offer]] = {}
        self.cpu: list[Offer] = []
        for o in self.offers:
            if o.gpu is None:
                self.cpu.append(o)
            elif not o.owned:
                self.cloud.setdefault((canonical_gpu(o.gpu), o.count), []).append(o)
            else:
                self.owned.setdefault(canonical_gpu(o.gpu), []).append(o)
        self.has_onprem = any(o.target == ONPREM for o in self.offers)
        # The same, each list split by kind (target and spot-ness), as placement prices them.
        self.cloud_kinds = {k: _by_kind(v) for k, v in self.cloud.items()}
        self.cpu_kinds = _by_kind(self.cpu)
        self.repeats = len({id(o) for o in self.offers}) < len(self.offers)  # one offer given twice
        self.ties: dict[int, tuple] = {}  # id(offer) -> tie_break(offer), as offers are priced

    def tie_break(self, o: Offer) -> tuple:
        """The offer's own fields, which order two options of the same cost (owned first,
        then by cloud, region, ...); kept, as each offer is priced for many jobs."""
        t = self.ties[id(o)] = (TIE_ORDER[o.target], o.cloud or "", o.region or "",
                                o.gpu or "", o.count, o.spot, o.price_per_hour,
                                o.instance_type or "")
        return t

    def models(self) -> dict[str, list[float]]:
        """GPU model -> the counts offered."""
        out: dict[str, set] = {}
        for g, c in self.cloud:
            out.setdefault(g, set()).add(c)
        for g, os_ in self.owned.items():
            out.setdefault(g, set()).update(o.count for o in os_)
        return {g: sorted(c) for g, c in sorted(out.items())}


@dataclass(frozen=True, slots=True)
class Needs:
    """A job's resources in the form the matcher wants."""

    choices: tuple[tuple[str, float], ...]  # canonical GPU, count
    cpus: Optional[float]
    memory: Optional[float]
    cloud: Optional[str]
    region: Optional[str]
    use_spot: bool
    gpu_allowed: bool
    gpu_workers: float = 1.0  # GPUs a job without `accelerators` needs to run on GPUs
    gpu_required: bool = False  # a train job with `use_gpu: true`: a GPU for each worker
    nodes: int = 1  # num_nodes: VMs rented on the cloud; a Ray cluster spans its own nodes
    train: bool = False  # a `train:` job (its Ray Train workers are `gpu_workers`)
    cloud_only: tuple[tuple[str, str], ...] = ()  # (key, what): only a cloud VM honors it
    instance_type: Optional[str] = None
    max_hourly_cost: Optional[float] = None  # SkyPilot's cap on a VM's price per hour
    # Whether misfit can rule out an offer of a requested model and count: most jobs name
    # no cloud, region, size or instance type, and misfit need not run for each offer.
    narrow: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "narrow", bool(
            self.cloud_only or self.instance_type or self.nodes > 1 or self.cloud
            or self.max_hourly_cost is not None or self.region or self.cpus or self.memory
            or self.gpu_required))

    @classmethod
    def variants(cls, spec) -> list[Needs]:
        """One Needs per candidate of the job's resources (any_of / ordered), in order."""
        return [cls.of(spec, r) for r in spec.resources.variants()]

    @classmethod
    def of(cls, spec, resources=None) -> Needs:
        """The job's needs; `resources`: one of its candidates (spec.resources by default)."""
        from orchestrator.spec import quantity_min

        r = spec.resources if resources is None else resources
        cloud, region = r.cloud, r.region
        if r.infra:  # SkyPilot's 'cloud/region[/zone]'
            parts = r.infra.split("/")
            cloud = cloud or parts[0] or None
            region = region or (parts[1] if len(parts) > 1 and parts[1] != "*" else None)
        return cls(choices=tuple(expand([(c.name, c.count) for c in r.accelerator_choices()])),
                   cpus=quantity_min(r.cpus), memory=quantity_min(r.memory),
                   cloud=cloud.lower() if cloud else None, region=region, use_spot=r.use_spot,
                   gpu_allowed=spec.scaling.use_gpu is not False,
                   gpu_workers=float(spec.scaling.min_workers) if spec.train is not None else 1.0,
                   gpu_required=spec.train is not None and spec.scaling.use_gpu is True,
                   nodes=spec.num_nodes, train=spec.train is not None,
                   cloud_only=spec.cloud_only(r),
                   instance_type=r.instance_type, max_hourly_cost=r.max_hourly_cost)

    def nodes_on(self, o: Offer) -> int:
        """The machines the job takes on this offer: num_nodes VMs of a cloud offer (each
        with the offer's GPUs, as SkyPilot counts them); owned hardware is one pool."""
        return 1 if o.target in OWNED else self.nodes  # o.owned, inline (a hot path)

    def describe(self) -> str:
        parts = [", ".join(f"{g}:{c:g}" for g, c in self.choices) or "no accelerator"]
        if self.cpus:
            parts.append(f"{self.cpus:g}+ CPUs")
        if self.memory:
            parts.append(f"{self.memory:g}+ GiB")
        if self.cloud:
            parts.append(f"cloud {self.cloud}" + (f"/{self.region}" if self.region else ""))
        return ", ".join(parts)


def _by_kind(offers: Iterable[Offer]) -> list[list[Offer]]:
    """The offers split by target and spot-ness, each part in the order given."""
    kinds: dict[tuple, list[Offer]] = {}
    for o in offers:
        kinds.setdefault((o.target, o.spot), []).append(o)
    return list(kinds.values())


def candidates(needs: Needs, index: OfferIndex) -> list[tuple[float, list[Offer]]]:
    """(GPUs used, offers) for each requested model and count, the offers of one kind (one
    target, spot or not) together. Cloud instances must match the count exactly, as in
    SkyPilot; owned pools need enough. A job without accelerators spreads its workers over
    num_nodes cloud VMs."""
    out: list[tuple[float, list[Offer]]] = []
    if needs.choices:
        wanted = dict.fromkeys(needs.choices)  # a model named twice is matched once
    elif needs.gpu_allowed:  # any GPU model, one per Ray Train worker
        wanted = dict.fromkeys((g, needs.gpu_workers) for g in index.models())
    else:
        wanted = {}
    for gpu, count in wanted:
        per_vm = count if needs.choices else float(math.ceil(count / needs.nodes))
        out.extend((per_vm, kind) for kind in index.cloud_kinds.get((gpu, per_vm), ()))
        out.extend((count, kind) for kind in _by_kind(o for o in index.owned.get(gpu, ())
                                                       if o.count >= count))
    if not needs.choices:
        out.extend((0.0, kind) for kind in index.cpu_kinds)
    return out


def misfit(o: Offer, needs: Needs) -> Optional[str]:
    if needs.cloud_only and o.owned:
        key, what = needs.cloud_only[0]
        return f"{key} asks for {what}, which only a cloud VM has"
    if needs.instance_type and not o.owned and o.instance_type != needs.instance_type:
        return f"the job asks for instance type {needs.instance_type}"
    if needs.nodes > 1 and not o.owned and needs.train and needs.gpu_workers < needs.nodes:
        # The runner spreads its workers over the VMs' Ray cluster: a VM without one idles.
        return (f"num_nodes {needs.nodes} with {needs.gpu_workers:g} Ray Train workers: a rented "
                f"node would have no worker (set scaling.num_workers to {needs.nodes} or more)")
    if needs.cloud and (o.cloud or o.target) != needs.cloud:
        return f"the job asks for cloud {needs.cloud}"
    if needs.max_hourly_cost is not None and not o.owned and o.price_per_hour > needs.max_hourly_cost:
        # As SkyPilot's optimizer does: it would refuse this VM at launch.
        return (f"${o.price_per_hour:.2f}/h is over the job's max_hourly_cost "
                f"${needs.max_hourly_cost:.2f}/h")
    if needs.region and (o.region or "").lower() != needs.region.lower():
        return f"the job asks for region {needs.region}"
    if needs.cpus and o.cpus is not None and o.cpus < needs.cpus:
        return f"{o.cpus:g} CPUs < {needs.cpus:g}"
    if needs.memory and o.memory_gb is not None and o.memory_gb < needs.memory:
        return f"{o.memory_gb:g} GiB memory < {needs.memory:g}"
    gpus = o.count * needs.nodes_on(o)
    if needs.gpu_required and o.gpu and gpus < needs.gpu_workers:
        # Ray Train would wait forever for a GPU per worker that is not there.
        return (f"{needs.gpu_workers:g} workers with use_gpu: true need {needs.gpu_workers:g} "
                f"GPUs, it has {gpus:g}")
    return None
