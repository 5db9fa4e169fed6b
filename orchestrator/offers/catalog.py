"""Cloud GPU offers from SkyPilot's price catalogs, read from disk only, never the network.

SkyPilot's own `sky.catalog.list_accelerators` downloads a catalog that is missing or
older than its pull interval, with no timeout, and fixes each catalog's path when its
module is first imported. So orch reads the same CSV files itself (from `catalog_dir`,
else SkyPilot's catalog directory) and hands them to SkyPilot's
`list_accelerators_impl`, the function every CSV-backed cloud's catalog uses. What it
makes of each file is kept in the user's cache folder (orchestrator/base/skycache.py), with the
cloud names SkyPilot knows and its catalog directory: a process that finds them there
imports neither SkyPilot nor pandas (about 2.5 CPU-s).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from pathlib import Path
from typing import Iterable, Optional

from orchestrator.base import skycache
from orchestrator.base.errors import BackendError, InputError
from orchestrator.base.targets import CLOUD
from orchestrator.decision.gpus import canonical_gpu
from orchestrator.decision.models import Offer

# Clusters, not priced clouds; GCP prices a GPU apart from its host VM in its own code.
_NOT_PRICED = {"kubernetes": "a cluster you run", "ssh": "a cluster you run",
               "slurm": "a cluster you run", "vsphere": "a cluster you run",
               "gcp": "its catalog prices GPUs apart from host VMs, which orch does not read yet"}
_FETCH_HINT = ("while online, `sky gpus list --infra {cloud}` downloads it; or point "
               "ORCH_CATALOG_DIR at a directory holding <cloud>/vms.csv; or remove {cloud} "
               "from ORCH_CLOUDS")


def _quiet_sky() -> None:
    # Before `import sky`: no telemetry hosts, no instance-metadata probes.
    os.environ.setdefault("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


class _Problem(Exception):
    """One cloud's catalog cannot be used; collected so the user sees all at once."""


def default_catalog_dir() -> Path:
    """SkyPilot's own catalog directory (honours SKY_RUNTIME_DIR), e.g. ~/.sky/catalogs/v8."""
    def from_skypilot() -> str:
        _quiet_sky()
        from sky.catalog import common

        return common.get_catalog_path("")

    # Where it is depends on the installed SkyPilot and on these two: kept for each.
    where = f"{os.environ.get('HOME', '')}|{os.environ.get('SKY_RUNTIME_DIR', '')}"
    return Path(skycache.kept(f"catalog-dir-{_digest(where)}", from_skypilot,
                              lambda found: isinstance(found, str)))


def _all_clouds() -> list[str]:
    """The clouds the installed SkyPilot knows (`sky.skylet.constants.ALL_CLOUDS`)."""
    def from_skypilot() -> list[str]:
        _quiet_sky()
        from sky.skylet import constants

        return list(constants.ALL_CLOUDS)

    return skycache.kept("clouds", from_skypilot, lambda clouds: isinstance(clouds, list) and bool(clouds))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _check_cloud(cloud: str) -> None:
    if cloud in _NOT_PRICED:
        raise InputError(f"ORCH_CLOUDS: {cloud} has no price catalog orch can use "
                         f"({_NOT_PRICED[cloud]})", f"remove {cloud} from ORCH_CLOUDS")
    known = _all_clouds()
    if cloud not in known:
        raise InputError(f"ORCH_CLOUDS: unknown cloud {cloud!r}",
                         "SkyPilot clouds with price catalogs: "
                         f"{', '.join(sorted(set(known) - set(_NOT_PRICED)))}")


def cloud_offers(clouds: Iterable[str], catalog_dir: Optional[Path] = None) -> list[Offer]:
    """On-demand and spot offers for every GPU instance of `clouds`, all regions.

    Raises InputError for a cloud name orch cannot price and BackendError naming every
    catalog that is missing or unreadable."""
    clouds = [c.lower() for c in clouds]
    if not clouds:
        return []
    _quiet_sky()
    for c in clouds:
        _check_cloud(c)
    root = Path(catalog_dir) if catalog_dir else default_catalog_dir()
    offers: list[Offer] = []
    problems: dict[str, str] = {}
    for cloud in clouds:
        try:
            offers.extend(_read_cached(cloud, root / cloud / "vms.csv"))
        except _Problem as e:
            problems[cloud] = str(e)
    if problems:
        raise BackendError("SkyPilot price catalog missing or unreadable: "
                           + "; ".join(problems.values()), _FETCH_HINT.format(cloud=next(iter(problems))))
    return offers


_CACHE: dict[tuple, tuple[Offer, ...]] = {}


def _read_cached(cloud: str, path: Path) -> list[Offer]:
    """A catalog read once while the file is unchanged: in this process (a long-lived orch,
    the simulator and planning many jobs read the same catalogs again and again), and
    across processes through the cache folder, so that a new `orch` process reads the
    offers SkyPilot's code made of this very file without importing SkyPilot."""
    try:
        st = path.stat()
        key = (cloud, str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        return _read(cloud, path)  # missing: _read says so
    if key not in _CACHE:
        _CACHE[key] = tuple(_kept_offers(key, path))
    return list(_CACHE[key])


_OFFER_FIELDS = {f.name for f in dataclasses.fields(Offer)}


def _kept_offers(key: tuple, path: Path) -> list[Offer]:
    """The offers of this catalog file as it is now: kept ones, else read by SkyPilot's code."""
    cloud, file = key[0], list(key[1:])

    def usable(kept) -> bool:
        return (isinstance(kept, dict) and kept.get("file") == file and isinstance(kept.get("offers"), list)
                and all(isinstance(o, dict) and o.keys() == _OFFER_FIELDS for o in kept["offers"]))

    kept = skycache.kept(f"offers-{cloud}-{_digest(key[1])}", lambda: {
        "file": file, "offers": [dataclasses.asdict(o) for o in _read(cloud, path)]}, usable)
    return [Offer(**o) for o in kept["offers"]]


def _read(cloud: str, path: Path) -> list[Offer]:
    import pandas as pd
    from sky.catalog import common

    if not path.is_file():
        raise _Problem(f"{cloud}: no catalog at {path}")
    try:
        df = pd.read_csv(path)
    except Exception as e:  # pandas raises many kinds for a bad file
        raise _Problem(f"{cloud}: cannot read {path}: {type(e).__name__}: {e}") from None
    missing = [c for c in ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs",
                           "MemoryGiB", "Price", "SpotPrice", "Region", "GpuInfo")
               if c not in df.columns]
    if missing:
        raise _Problem(f"{cloud}: {path} is not a SkyPilot catalog (no column "
                       f"{', '.join(missing)})")
    try:
        by_gpu = common.list_accelerators_impl(cloud, df, gpus_only=True, name_filter=None,
                                               region_filter=None, quantity_filter=None,
                                               all_regions=True)
    except Exception as e:  # malformed rows surface as KeyError/TypeError/ValueError
        raise _Problem(f"{cloud}: cannot read {path}: {type(e).__name__}: {e}") from None
    out: list[Offer] = []
    for infos in by_gpu.values():
        for i in infos:
            price, spot = _num(i.price), _num(i.spot_price)
            if price is not None and price > 0:
                out.append(_offer(cloud, i, price, spot=False))
            if spot is not None and spot > 0:
                out.append(_offer(cloud, i, spot, spot=True))
    return out


def _offer(cloud: str, i, price: float, spot: bool) -> Offer:
    """The offer of one catalog row (SkyPilot's InstanceTypeInfo) at one of its prices."""
    return Offer(target=CLOUD, gpu=canonical_gpu(str(i.accelerator_name)),
                 count=float(i.accelerator_count), price_per_hour=price, cloud=cloud,
                 region=str(i.region), spot=spot, cpus=_num(i.cpu_count), memory_gb=_num(i.memory),
                 instance_type=None if i.instance_type is None else str(i.instance_type))


def _num(x) -> Optional[float]:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v
