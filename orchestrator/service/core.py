"""The service's core: its settings, its store, its clock, the providers it launches on,
and the one way it calls them (bounded in time, retried: `retrying`). Every module of the service
(budgets, launch_spec, submitting, following, pipelines, placing) is plain functions of a
`Core`; `orch.Orch` puts them behind one object."""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Callable, Optional

from orchestrator.records import JobRow
from orchestrator.settings import Settings
from orchestrator.store import Store, open_store, store_exists

if TYPE_CHECKING:
    from orchestrator.service.retrying import Retrying
    from providers.base import Backend
    from providers.local_ray import LocalRay
    from providers.ray_cluster import ClusterSnapshot


def _now() -> float:
    return time.time()  # looked up at each call: a test's patched clock is seen


class Core:
    def __init__(self, settings: Settings, on_ray_start: Optional[Callable[[], None]] = None,
                 held: Optional[dict[str, dict]] = None, clock: Callable[[], float] = _now):
        self.settings = settings
        self.on_ray_start = on_ray_start
        self.clock = clock
        self.providers: dict[str, Backend] = {}
        # job id -> secret values, in this process only, from launch until the job's end
        # (redaction by value): `held` is a longer-lived process's own (`orch serve`'s).
        self.secrets: dict[str, dict] = {} if held is None else held
        # job id -> (spec, secrets) of a pipeline's stage this process submitted, for its launch
        self.stages: dict[str, tuple] = {}
        # Whether another live process (a replica of `orch serve`) holds a job's secret
        # values: that one follows and finishes the job, and keeps its log redacted by them,
        # not this one by their digests alone. None: no other process holds any.
        self.values_elsewhere: Optional[Callable[[JobRow], bool]] = None

    @functools.cached_property
    def store(self) -> Store:
        # Opened on first use, so a rejected job file never creates or touches the store.
        return open_store(self.settings)

    def opened_store(self) -> Optional[Store]:
        """The store if this core has opened it, else None (and none is opened)."""
        return self.__dict__.get("store")

    def store_if_exists(self) -> Optional[Store]:
        """The store, or None before it exists: a plan or a check must never create it."""
        if self.opened_store() is None and not store_exists(self.settings):
            return None
        return self.store

    def close(self) -> None:
        store = self.__dict__.pop("store", None)
        if store is not None:
            store.close()

    def get(self, job_id: str) -> JobRow:
        return self.store.get(job_id)

    # -- providers --------------------------------------------------------------------

    def local_ray(self) -> LocalRay:
        """This machine's local Ray instance, as the settings configure it (started or not)."""
        from providers.local import local_ray

        return local_ray(self.settings)

    def provider(self, target: str) -> Backend:
        """The backend of `target`, built once per Orch (providers.registry); InputError
        for a target this orch cannot run on."""
        if target not in self.providers:
            from providers.registry import backend_for

            self.providers[target] = backend_for(target, self.settings, self.on_ray_start)
        return self.providers[target]

    def capacity(self, target: str) -> Optional[ClusterSnapshot]:
        """What `target` holds and runs now, when it has a fixed size (HasCapacity: a Ray
        cluster); None for a target that rents what each job needs (the cloud). Raises
        BackendError when it cannot be read."""
        from providers.base import HasCapacity

        provider = self.provider(target)
        return provider.capacity() if isinstance(provider, HasCapacity) else None

    @staticmethod
    def backend_class(target: str) -> type[Backend]:
        """The class of `target`'s backend: what a launch looks like there, known without
        reaching it (so tests and `orch plan` need no cluster)."""
        from providers.registry import backend_class

        return backend_class(target)

    def retrying(self, provider: Backend) -> Retrying:
        """`provider` called with bounded retries and time (service/retrying.py): every
        submit, state, logs and cancel of the service goes through it."""
        from orchestrator.service.retrying import Retrying

        return Retrying(provider, self.settings)
