"""The stored decision (`Placement`) and cost entry (`CostEntry`): what a store row written by
an earlier orch holds still loads, and what this orch writes reads back as it was."""

from __future__ import annotations

import json

import pytest

from orchestrator.decision import job_ledger as ledger
from orchestrator.records import JobRecord
from orchestrator.records.cost import CostEntry
from orchestrator.records.placement import PlacedOffer, Placement
from tests.conftest import job_row

# A decision as an orch of a year ago stored it: no nodes, credentials, full-cost split,
# warnings, notes or decided_by; a key this version no longer writes.
OLD_CHOICE = {"target": "local", "cloud": None, "region": None, "gpu": "RTX4090", "count": 1,
              "spot": False, "price_per_hour": 700.0, "est_hours": 2.0, "est_cost": 1400.0,
              "excluded": None, "old_rank": 3}
OLD_ROW = {"kind": "steady", "target": "local", "reasons": ["ran 3 times"],
           "estimate": {"hours": 2.0, "cost": 1400.0, "currency": "KRW", "cost_usd": 1.0},
           "choice": OLD_CHOICE,
           "alternatives": [OLD_CHOICE, {"target": "cloud", "cloud": "runpod", "region": "CA",
                                         "gpu": "RTX4090", "count": 1, "spot": True,
                                         "price_per_hour": 980.0, "est_hours": 2.0,
                                         "est_cost": 2100.0, "excluded": None}]}


def test_a_decision_stored_by_an_older_orch_loads_with_defaults_and_keeps_unknown_keys():
    placed = Placement.read(json.loads(json.dumps(OLD_ROW)))
    assert placed is not None and placed.choice is not None
    assert (placed.kind, placed.target, placed.choice.gpu) == ("steady", "local", "RTX4090")
    assert placed.choice.nodes == 1 and placed.choice.full_cost_known  # the defaults
    assert placed.choice.price_per_hour_usd is None and placed.warnings == []
    assert placed.estimate.rate == pytest.approx(1400.0)  # KRW per USD when it was planned
    assert placed.choice.model_extra == {"old_rank": 3}  # kept, not dropped
    assert placed.to_json()["choice"]["old_rank"] == 3
    assert Placement.read(None) is None


def test_an_old_rows_job_is_priced_and_shown_from_what_it_held():
    rec = job_row({"id": "orch-old", "name": "old", "status": "SUCCEEDED", "kind": "steady",
                   "target": "local", "created_at": 0.0, "started_at": 0.0,
                   "finished_at": 7200.0, "decision": OLD_ROW})
    e = ledger.entry(rec, now=7200.0)
    # 700 KRW/h shown at 1400 KRW per USD: 0.5 USD/h for 2 h; no power figure, so cash = full.
    assert (e.cost_usd, e.cash_usd) == (pytest.approx(1.0), pytest.approx(1.0))
    assert e.alternative is not None and e.alternative.where == "runpod/CA"
    assert JobRecord.from_row(rec).to_json()["decision"]["choice"]["old_rank"] == 3


def test_what_placement_writes_reads_back_the_same_json():
    row = {**OLD_ROW, "decided_by": "marginal", "notes": ["n"], "warnings": [], "refusal": None,
           "classification": {"kind": "steady", "reasons": []}}
    once = Placement.read(row).to_json()
    assert Placement.read(json.loads(json.dumps(once))).to_json() == once
    assert isinstance(once["choice"]["count"], int)  # 1 GPU stays `1`, not `1.0`
    assert PlacedOffer(count=0.5).count == 0.5


def test_a_cost_entry_saved_before_cash_existed_loads():
    e = CostEntry.model_validate({"id": "j", "name": "j", "status": "SUCCEEDED",
                                  "target": "local", "cost_usd": 1.0, "power_usd": 0.2,
                                  "hours": 2.0, "gpu_hours": 2.0, "alternative": None})
    assert e.cash_usd is None and ledger.cash(e) == pytest.approx(0.2)
