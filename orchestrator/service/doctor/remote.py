"""Doctor's checks of what orch reaches over the network: the on-prem Ray cluster, SkyPilot's
clouds and price catalogs, and S3 storage. Nothing is started, and no credential is shown."""

from __future__ import annotations

from typing import Iterable

from orchestrator.base.errors import NotFound, OrchError
from orchestrator.service.doctor.check import Check, guarded
from orchestrator.settings import Settings


def onprem_check(settings: Settings, timeout: float = 5.0) -> Check:
    if not settings.ray_address:
        return Check("on-prem cluster", None, "not configured (ORCH_RAY_ADDRESS)")
    from providers.onprem import HINT, token_for
    from providers.ray_cluster import get_json, snapshot

    token = token_for(settings.ray_token_file)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    version = get_json(settings.ray_address, "/api/version", headers, timeout, hint=HINT)
    snap = snapshot(settings.ray_address, headers, timeout)
    alive = sum(n.alive for n in snap.nodes)
    gpus = ", ".join(f"{m} x{n:g}" for m, n in snap.gpu_models.items())
    return Check("on-prem cluster", True,
                 f"Ray {version.get('ray_version', '?')} at {settings.ray_address}: {alive} nodes "
                 f"alive, GPUs {snap.free('GPU'):g}/{snap.total.get('GPU', 0):g} free"
                 + (f" ({gpus})" if gpus else "") + f", {len(snap.jobs)} jobs active")


def cluster_mode_check(settings: Settings) -> list[Check]:
    """How the on-prem cluster's jobs share it (base.targets.SHARED_CLUSTER, or a cluster per
    user: PER_USER_CLUSTER); none without one."""
    from orchestrator.base.targets import PER_USER_CLUSTER, SHARED_CLUSTER

    if not settings.ray_address:
        return []
    if settings.onprem_isolation == "per-user":
        return [Check("cluster mode", True, PER_USER_CLUSTER)]
    return [Check("cluster mode", True, SHARED_CLUSTER)]


def skypilot_checks(settings: Settings) -> list[Check]:
    if not settings.clouds:
        return [Check("SkyPilot", None, "no clouds configured (ORCH_CLOUDS)")]
    from orchestrator.offers.catalog import cloud_offers
    from providers.cloud import enabled_clouds

    ok, why = enabled_clouds(settings.clouds)
    if why:
        clouds = Check("SkyPilot", False, (f"enabled: {', '.join(ok)}; " if ok else "")
                       + "; ".join(f"{c}: {r}" for c, r in why.items()),
                       f"`sky check {next(iter(why))}` says how to set up its credentials; or "
                       "remove it from ORCH_CLOUDS")
    else:
        clouds = Check("SkyPilot", True, f"enabled: {', '.join(ok)}")
    try:
        offers = cloud_offers(settings.clouds, settings.catalog_dir)
    except OrchError as e:
        return [clouds, Check("price catalogs", False, e.message, e.hint)]
    per = {c: sum(o.cloud == c for o in offers) for c in settings.clouds}
    return [clouds, Check("price catalogs", True, "readable: " + ", ".join(
        f"{c} ({n} offers)" for c, n in per.items()))]


def _s3_locations(settings: Settings) -> Iterable[tuple[str, str]]:
    seen = set()
    for key in ("cloud_storage", "onprem_checkpoint_storage"):
        loc = getattr(settings, key)
        if loc and loc.startswith("s3://") and loc not in seen:
            seen.add(loc)
            yield key, loc


def s3_checks(settings: Settings) -> list[Check]:
    locations = list(_s3_locations(settings))
    if not locations:
        return [Check("S3", None, "no s3:// storage configured (ORCH_CLOUD_STORAGE, "
                                  "ORCH_ONPREM_CHECKPOINT_STORAGE)")]

    def one(key: str, location: str) -> Check:  # each location checked on its own
        return guarded(f"S3 {key}", lambda: [_s3_check(settings, key, location)])[0]

    return [one(key, loc) for key, loc in locations]


def _s3_check(settings: Settings, key: str, location: str) -> Check:
    """Whether the bucket can be listed, with credentials from boto3's own chain; only the
    chain's kind (env, shared file, role) is named, never a key."""
    from providers.artifacts import S3Artifacts

    s3 = S3Artifacts(location, settings.s3_endpoint_url or None)  # "" is unset too
    name = f"S3 {key}"
    try:
        client = s3.client()
        client.list_objects_v2(Bucket=s3.bucket, Prefix=s3.prefix, MaxKeys=1)
    except OrchError as e:
        return Check(name, False, e.message, e.hint)
    except Exception as e:
        err = s3.error(e)
        if not isinstance(err, OrchError):
            raise
        if isinstance(err, NotFound):  # the setting names it: say which one to change
            return Check(name, False, err.message, f"create the bucket, or point "
                         f"ORCH_{key.upper()} at one that exists")
        return Check(name, False, err.message, err.hint)
    import boto3

    creds = boto3.Session().get_credentials()  # which link of the chain, never the keys
    source = getattr(creds, "method", None) or "boto3's chain"
    return Check(name, True, f"{location} on {s3.where}: listable (credentials from {source})")
