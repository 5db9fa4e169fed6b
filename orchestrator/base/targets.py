"""The places a job can run: their names, defined once, and which of them orch owns.

Owned hardware (this workstation, the on-prem Ray cluster) costs its purchase and power and
is held by a job from its submission on; a rented target (a cloud VM) costs its rent, billed
from its start-up. Code that asks "owned or rented?" asks `owned()` / `rented()` (or
`Offer.owned`), never compares a target's name with "cloud"; a name is compared only where
one target's own behaviour is meant (the on-prem cluster's capacity, the local Ray).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Optional

# A target's name: one that `declare` was given (a job file's `placement.allow` is checked
# against them at load, before any backend is imported).
Target = str

LOCAL: Final = "local"  # this machine's Ray
ONPREM: Final = "onprem"  # the on-prem Ray cluster at ORCH_RAY_ADDRESS
CLOUD: Final = "cloud"  # SkyPilot managed jobs on rented VMs


@dataclass(frozen=True)
class Declared:
    """What orch knows of a target before its backend is imported: whether its hardware is
    the team's, its place when two options cost exactly the same (owned hardware first), and
    whether a choice of it needs a SkyPilot cloud's credentials here."""

    name: str
    owned: bool
    tie: int
    cloud_credentials: bool = False


# The declared targets, kept live by `declare` (these are the objects every importer holds).
TARGETS: list[Target] = []
OWNED: set[str] = set()
TIE_ORDER: dict[str, int] = {}
CLOUD_CREDENTIALS: set[str] = set()
DECLARED: dict[str, Declared] = {}


def declare(name: str, *, owned: bool, tie: int, cloud_credentials: bool = False) -> None:
    """Make `name` a target (docs/backends.md): one line here per backend, as below; a
    backend under tests/ declares itself the same way. Declaring it again replaces it."""
    forget(name)
    DECLARED[name] = Declared(name, owned, tie, cloud_credentials)
    TARGETS.append(name)
    TIE_ORDER[name] = tie
    if owned:
        OWNED.add(name)
    if cloud_credentials:
        CLOUD_CREDENTIALS.add(name)


def forget(name: str) -> None:
    """Undo `declare` (a test backend, at its end)."""
    if DECLARED.pop(name, None) is not None:
        TARGETS.remove(name)
        TIE_ORDER.pop(name, None)
        OWNED.discard(name)
        CLOUD_CREDENTIALS.discard(name)


declare(LOCAL, owned=True, tie=1)
declare(ONPREM, owned=True, tie=0)
declare(CLOUD, owned=False, tie=2, cloud_credentials=True)


def owned(target: Optional[str]) -> bool:
    """Whether `target` is hardware orch's users own (False for None: not placed)."""
    return target in OWNED


def rented(target: Optional[str]) -> bool:
    """Whether `target` rents its machines (False for None: not placed)."""
    return target is not None and target not in OWNED


def needs_cloud_credentials(target: Optional[str]) -> bool:
    """Whether a choice of `target` launches on a SkyPilot cloud that needs credentials here."""
    return target in CLOUD_CREDENTIALS


# How the jobs of one Ray cluster (the local Ray, the on-prem cluster) share it: the default;
# both also have a per-user mode (serve_isolation, providers/isolated.py; onprem_isolation,
# providers/onprem_users.py). Named wherever the cluster is shown (`orch doctor`, `orch cluster
# status`).
PER_USER_CLUSTER: Final = ("per-user clusters: each client user's jobs run in a Ray cluster of "
                           "their own on the owned nodes, as an OS user of their own with their "
                           "own token (onprem_isolation = \"per-user\"); jobs with no owner "
                           "share the base cluster")
SHARED_CLUSTER_MODE: Final = "shared"
SHARED_CLUSTER: Final = ("shared cluster, a trusted-team mode: its jobs run as one OS user with "
                         "one Ray token, and Ray \"doesn't attempt to enforce isolation\" between "
                         "them (docs/security.md, \"What a job can reach\")")
