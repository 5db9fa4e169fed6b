"""The remote client reads a newer server's answers: fields it does not know are left out,
at every level, rather than refused (the records themselves forbid unknown fields, so that
the API's schema says exactly what it sends)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from orchestrator import records
from orchestrator.client.answers import read


def detail(**more) -> dict:
    return {"id": "orch-1", "name": "q", "status": "RUNNING", "history": [
        {"status": "PENDING", "at": "2026-12-05T00:00:00Z", **more.pop("event", {})}],
        "run": {"queued": False, **more.pop("run", {})}, **more}


def test_a_newer_servers_fields_are_left_out_at_every_level():
    answer = detail(gpu_hours=3.5, run={"node": "n1"}, event={"reason": "new"},
                    decision={"target": "local", "a_new_key": 1})
    with pytest.raises(ValidationError):  # the record itself still forbids them
        records.JobDetail.model_validate(answer)
    rec = read(records.JobDetail, answer)
    assert rec.id == "orch-1" and rec.run.queued is False and rec.history[0].status == "PENDING"
    assert not hasattr(rec, "gpu_hours") and "node" not in rec.run.model_dump()
    # A placement keeps what it does not know (the lenient reader of stored decisions).
    assert rec.decision is not None and rec.decision.model_dump()["a_new_key"] == 1


def test_a_wrong_type_is_still_an_error():
    with pytest.raises(ValidationError):
        read(records.JobDetail, detail(status=5, history="none"))
