"""Which backend serves a target: the one place a target's name picks a backend class, and
where the backend is built from the settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from orchestrator.base.errors import InputError
from orchestrator.base.targets import CLOUD, LOCAL, ONPREM
from providers.base import Backend
from providers.cloud import CloudProvider
from providers.local import LocalProvider, local_ray
from providers.onprem import OnPremProvider

if TYPE_CHECKING:
    from orchestrator.settings import Settings

# Every backend by the target it serves; their capabilities are the mixins they subclass.
BACKENDS: dict[str, type[Backend]] = {
    LOCAL: LocalProvider, ONPREM: OnPremProvider, CLOUD: CloudProvider}


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
    raise unavailable(target)
