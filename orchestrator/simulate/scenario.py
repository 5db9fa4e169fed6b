"""What the simulated team owns and rents: owned GPUs and enabled clouds, from settings or flags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from orchestrator.base.errors import InputError
from orchestrator.base.targets import ONPREM
from orchestrator.decision.models import Offer
from orchestrator.decision.pricing import fmt_money, onprem_offer

EXAMPLE_CATALOG = Path(__file__).resolve().parents[2] / "examples" / "catalog"
DEFAULT_CLOUDS = ("lambda", "runpod", "aws")
# A server with four A100 40GB, bought for 40,000 USD: the scenario when settings name none.
DEFAULT_ONPREM = "A100:4:40000"


@dataclass(frozen=True)
class Scenario:
    owned: tuple  # settings.OwnedGpus
    clouds: tuple[str, ...]
    catalog_dir: Optional[Path]
    offers: tuple[Offer, ...]  # owned pools and every cloud offer, priced
    source: str  # where owned and clouds came from, in words
    # The true spot preemptions per running hour, which the policies do not know (they
    # believe the spot_preemptions_per_hour setting); None: the simulate call's rate.
    spot_rate: Optional[float] = None

    @property
    def owned_offers(self) -> tuple[Offer, ...]:
        return tuple(o for o in self.offers if o.target == ONPREM)

    def describe(self, currency: str = "USD", rate: float = 1.0) -> str:
        pools = []
        for inv, o in zip(self.owned, self.owned_offers):
            per_gpu = o.price_per_hour / max(o.count, 1)
            pools.append(f"{inv.count}x {o.gpu} owned ({fmt_money(inv.purchase_price, currency, rate)}, "
                         f"{fmt_money(per_gpu, currency, rate)}/GPU-h in full)")
        where = str(self.catalog_dir) if self.catalog_dir else "SkyPilot's catalogs"
        clouds = f"clouds {', '.join(self.clouds)} from {where}" if self.clouds else "no clouds"
        return f"{'; '.join(pools) or 'no owned GPUs'}; {clouds} ({self.source})"


def parse_onprem(text: str):
    """'GPU:COUNT:PRICE[:WATTS]' -> settings.OwnedGpus, e.g. A100:4:40000 or RTX4090:8:24000:450."""
    from orchestrator.settings import OwnedGpus

    parts = text.split(":")
    hint = "write --onprem GPU:COUNT:PURCHASE_PRICE_USD[:WATTS_PER_GPU], e.g. A100:4:40000"
    if len(parts) not in (3, 4) or not parts[0].strip():
        raise InputError(f"--onprem {text}: expected GPU:COUNT:PRICE", hint)
    try:
        count, price = int(parts[1]), float(parts[2])
        watts = float(parts[3]) if len(parts) == 4 else None
    except ValueError:
        raise InputError(f"--onprem {text}: COUNT must be a whole number and PRICE (and WATTS) "
                         "numbers", hint) from None
    if count < 1 or price < 0 or (watts is not None and watts < 0):
        raise InputError(f"--onprem {text}: COUNT must be 1 or more, PRICE and WATTS 0 or more", hint)
    return OwnedGpus.model_validate({"gpu": parts[0].strip(), "count": count, "purchase_price": price,
                                     **({} if watts is None else {"watts": watts})})


def load_scenario(settings, onprem: Sequence[str] = (), clouds: Optional[str] = None,
                  catalog_dir: Optional[Path] = None, cloud_offers=None,
                  spot_rate: Optional[float] = None) -> Scenario:
    """Flags over settings over the default scenario (4 owned A100s; lambda, runpod and
    aws priced from examples/catalog). `cloud_offers(clouds, dir)` reads the catalogs;
    tests pass their own."""
    notes = []
    if onprem:
        owned = tuple(parse_onprem(t) for t in onprem)
        notes.append("owned GPUs from --onprem")
    elif settings.onprem:
        owned = tuple(settings.onprem)
        notes.append("owned GPUs from settings")
    else:
        owned = (parse_onprem(DEFAULT_ONPREM),)
        notes.append(f"default owned GPUs ({DEFAULT_ONPREM}): settings name none")
    if clouds is not None:
        names = tuple(c.strip().lower() for c in clouds.split(",") if c.strip())
        notes.append("clouds from --clouds")
        cat = catalog_dir or settings.catalog_dir
    elif settings.clouds:
        names = tuple(settings.clouds)
        notes.append("clouds from settings")
        cat = catalog_dir or settings.catalog_dir
    else:
        names = DEFAULT_CLOUDS
        cat = catalog_dir or settings.catalog_dir or EXAMPLE_CATALOG
        notes.append("default clouds: settings enable none")
    if cat is not None and not Path(cat).is_dir():
        raise InputError(f"--catalog-dir {cat}: no such directory",
                         "give a directory holding <cloud>/vms.csv (SkyPilot's catalog format)")
    owned_offers = [onprem_offer(inv, settings.electricity_price) for inv in owned]
    for inv, o in zip(owned, owned_offers):
        if o.gpu is None:
            raise InputError(f"owned pool {inv.gpu}: the simulator places GPU jobs; give a GPU model")
    if cloud_offers is None:
        from orchestrator.offers.catalog import cloud_offers
    offers = list(cloud_offers(list(names), Path(cat) if cat else None)) if names else []
    offers += owned_offers
    return Scenario(owned=owned, clouds=names, catalog_dir=Path(cat) if cat else None,
                    offers=tuple(offers), source="; ".join(notes), spot_rate=spot_rate)


def policy_settings(settings, scenario: Scenario):
    """The settings orch's own policy decides with: hybrid, the scenario's GPUs and clouds."""
    return settings.model_copy(update=dict(mode="hybrid", onprem=list(scenario.owned),
                                           clouds=list(scenario.clouds),
                                           catalog_dir=scenario.catalog_dir, ray_address=None))
