"""Which backend serves a target: the one place a target's name picks a backend class, and
where the backend is built from the settings, what it offers a job is asked, and the
capacity of one with a fixed size is read (docs/backends.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, Union

from orchestrator.base.errors import BackendError, InputError
from orchestrator.base.targets import CLOUD, LOCAL, ONPREM
from providers.base import Backend, HasCapacity
from providers.cloud import CloudProvider
from providers.cloud import offers as cloud_offers
from providers.local import LocalProvider, local_ray
from providers.local import offers as local_offers
from providers.offering import OffersOf, Seen
from providers.onprem import OnPremProvider
from providers.onprem import offers as onprem_offers

if TYPE_CHECKING:
    from orchestrator.decision.models import Offer
    from orchestrator.settings import Settings
    from orchestrator.spec import JobSpec
    from providers.ray_cluster import ClusterSnapshot


# Every backend by the target it serves; their capabilities are the mixins they subclass.
BACKENDS: dict[str, type[Backend]] = {
    LOCAL: LocalProvider, ONPREM: OnPremProvider, CLOUD: CloudProvider}
# What each offers a job (its folder's offers.py), asked in this order: a plan lists the
# offers so, and two that cost the same are then ranked by base.targets.TIE_ORDER.
OFFERS: dict[str, OffersOf] = {
    CLOUD: cloud_offers.offers, ONPREM: onprem_offers.offers, LOCAL: local_offers.offers}


# How a backend other than the three above is built from the settings (`register`).
BUILDERS: dict[str, Callable[[Settings], Backend]] = {}


def register(name: str, kind: type[Backend], offers_of: OffersOf,
             build: Callable[[Settings], Backend]) -> None:
    """One more backend, serving the target `name` (declared in base.targets): its class,
    what it offers a job and how it is built from the settings. The one line a backend adds
    here (docs/backends.md); a backend under tests/ calls it the same way."""
    BACKENDS[name], OFFERS[name], BUILDERS[name] = kind, offers_of, build


def unregister(name: str) -> None:
    """Undo `register` (a test backend, at its end)."""
    for table in (BACKENDS, OFFERS, BUILDERS):
        table.pop(name, None)


def offers(spec: JobSpec, settings: Settings, seen: Seen) -> list[Offer]:
    """Every backend's offers for `spec`, in OFFERS' order."""
    return [o for of in OFFERS.values() for o in of(spec, settings, seen)]


def read_capacity(target: str, settings: Settings) -> Union[ClusterSnapshot, BackendError]:
    """What `target` holds and runs now, read through its `HasCapacity` as `orch serve`
    reads it, or why it could not be read; never raises, so a plan can go on without it
    (placement says the target is unreachable). InputError for a target without a fixed
    size or not configured, which a caller asks only after checking."""
    backend = backend_for(target, settings)
    if not isinstance(backend, HasCapacity):
        raise InputError(f"target {target!r} has no fixed size to read")
    try:
        return backend.capacity()
    except BackendError as e:
        return e
    except (KeyError, TypeError, AttributeError, ValueError) as e:  # an answer of another shape
        return BackendError(f"{target} at {backend.address} answered in a shape orch does not "
                            f"know ({type(e).__name__}: {e})", getattr(backend, "hint", None))


def unavailable(target: str) -> InputError:
    return InputError(f"target {target!r} is not available in this version of orch",
                      "use placement.allow: [local] or ORCH_MODE=local")


def backend_class(target: str) -> type[Backend]:
    """The class of `target`'s backend, which says what a launch looks like there without
    reaching it; InputError for a target orch has no backend for."""
    if target not in BACKENDS:
        raise unavailable(target)
    return BACKENDS[target]


def backend_for(target: str, settings: Settings,
                on_ray_start: Optional[Callable[[], None]] = None) -> Backend:
    """A backend for `target`, as the settings configure it; nothing is reached yet (its
    `prepare` does that). `on_ray_start` is called when a job starts the local Ray.
    InputError for a target that is unknown or not configured (on-prem without
    ORCH_RAY_ADDRESS)."""
    kind = backend_class(target)
    if kind is LocalProvider:
        if settings.serve_isolation == "per-user":
            from providers.isolated import IsolatedLocalProvider

            return IsolatedLocalProvider(settings, on_ray_start)
        return LocalProvider(local_ray(settings), on_ray_start)
    if kind is OnPremProvider and settings.ray_address:
        if settings.onprem_isolation == "per-user":
            from providers.onprem_users import OnPremUsersProvider

            return OnPremUsersProvider(settings)
        return OnPremProvider(settings.ray_address, settings.ray_token_file)
    if kind is CloudProvider:
        return CloudProvider(startup_minutes=settings.cloud_startup_minutes)
    if target in BUILDERS:
        return BUILDERS[target](settings)
    raise unavailable(target)
