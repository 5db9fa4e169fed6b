"""The places a job can run: their names, defined once, and which of them orch owns.

Owned hardware (this workstation, the on-prem Ray cluster) costs its purchase and power and
is held by a job from its submission on; a rented target (a cloud VM) costs its rent, billed
from its start-up. Code that asks "owned or rented?" asks `owned()` / `rented()` (or
`Offer.owned`), never compares a target's name with "cloud"; a name is compared only where
one target's own behaviour is meant (the on-prem cluster's capacity, the local Ray).
"""

from __future__ import annotations

from typing import Final, Literal, Optional

Target = Literal["local", "onprem", "cloud"]

LOCAL: Final = "local"  # this machine's Ray
ONPREM: Final = "onprem"  # the on-prem Ray cluster at ORCH_RAY_ADDRESS
CLOUD: Final = "cloud"  # SkyPilot managed jobs on rented VMs

TARGETS: tuple[Target, ...] = (LOCAL, ONPREM, CLOUD)
OWNED: frozenset[str] = frozenset({LOCAL, ONPREM})

# Order of preference when two options cost exactly the same: owned hardware first.
TIE_ORDER: dict[str, int] = {ONPREM: 0, LOCAL: 1, CLOUD: 2}


def owned(target: Optional[str]) -> bool:
    """Whether `target` is hardware orch's users own (False for None: not placed)."""
    return target in OWNED


def rented(target: Optional[str]) -> bool:
    """Whether `target` rents its machines (False for None: not placed)."""
    return target is not None and target not in OWNED


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
