"""What a cloud job really cost: each launch and recovery, priced, from what the cloud reported.

SkyPilot's managed-job records carry no cost, so orch keeps its own ledger. It is a
pure function of the previous ledger, the job's latest record and the offers it was
placed with, so every poll (however rare) moves it forward the same way.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from orchestrator.records.cost import CloudBill

_CLOSED_BY = {"SUCCEEDED": "succeeded", "CANCELLED": "cancelled", "FAILED": "failed",
              "FAILED_SETUP": "setup failed", "FAILED_PRECHECKS": "prechecks failed",
              "FAILED_NO_RESOURCE": "no capacity", "FAILED_CONTROLLER": "controller failed"}


def price_for(offers: Sequence[dict], cloud: Optional[str], region: Optional[str],
              spot: Optional[bool] = None) -> Optional[dict]:
    """The offer a launch ran on: same cloud and region (and spot-ness when known)."""
    def same(a, b):
        return a is None or b is None or str(a).lower() == str(b).lower()

    for o in offers:
        if same(o.get("cloud"), cloud) and same(o.get("region"), region) and \
                (spot is None or bool(o.get("spot")) == spot):
            return o
    return offers[0] if offers else None


def update_ledger(ledger: Union[CloudBill, Mapping[str, Any], None], record: dict,
                  offers: Sequence[dict], now: float, startup_minutes: float) -> CloudBill:
    """The bill after seeing `record` (a managed-job record, SkyPilot's JSON: status, cloud,
    region, start_at, end_at, last_recovered_at, recovery_count, resources). `ledger`: the
    bill so far, as kept in a job's info (a `CloudBill`, or its stored JSON)."""
    bill = ledger if isinstance(ledger, CloudBill) else CloudBill.model_validate(ledger or {})
    launches = [x.model_dump() for x in bill.launches]
    status = str(record.get("status") or "")
    status = status.split(".")[-1]  # an enum's str() may carry its class name
    recoveries = int(record.get("recovery_count") or 0)
    spot = "spot" in str(record.get("resources") or "").lower() or None
    open_ = launches[-1] if launches and launches[-1].get("ended_at") is None else None

    def close(at: float, reason: str) -> None:
        if open_ is not None:
            open_["ended_at"] = max(open_["started_at"], at)
            open_["reason"] = reason

    def start(at: float) -> None:
        offer = price_for(offers, record.get("cloud"), record.get("region"), spot) or {}
        launches.append({"cloud": record.get("cloud") or offer.get("cloud"),
                         "region": record.get("region") or offer.get("region"),
                         "gpu": offer.get("gpu"), "count": offer.get("count"),
                         "spot": offer.get("spot"), "price_per_hour": offer.get("price_per_hour"),
                         "started_at": at, "ended_at": None, "reason": None})

    if status in ("RUNNING", "WINDING_DOWN", "CANCELLING"):
        # A recovery the polls never saw still shows as a higher recovery count.
        if open_ is not None and recoveries > len(launches) - 1:
            close(record.get("last_recovered_at") or now, "preempted")
            open_ = None
        if open_ is None:
            at = record.get("last_recovered_at") if recoveries else record.get("start_at")
            start(at or now)
    elif status == "RECOVERING":
        close(now, "preempted")
    elif status in _CLOSED_BY:
        close(record.get("end_at") or now, _CLOSED_BY[status])
    return summarize(launches, now, startup_minutes)


def summarize(launches: list[dict], now: float, startup_minutes: float) -> CloudBill:
    """Billed time x price over every launch, each with its start-up time."""
    cost = hours = 0.0
    for x in launches:
        run_h = ((x["ended_at"] or now) - x["started_at"]) / 3600.0
        billed = max(run_h, 0.0) + startup_minutes / 60.0
        hours += billed
        cost += billed * float(x.get("price_per_hour") or 0.0)
    return CloudBill.model_validate({"launches": launches, "billed_hours": round(hours, 6),
                                     "cost_usd": round(cost, 6), "recoveries": max(0, len(launches) - 1)})
