"""One planning path: the decision `orch submit` records is the one `orch plan --json` shows.

For each job file and settings below, the plan (`Local.plan_spec`, what `orch plan --json`
prints) and the record a submit writes before it launches (`Orch.record`, what `orch
submit --detach` stores) are compared: the same kind, target and choice, the same
reasons and warnings; or the same refusal, with nothing recorded. SkyPilot's credential
check is the cloud's boundary and is the only thing replaced, per case."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import pytest

from orchestrator.base.errors import OrchError
from orchestrator.client import Local
from orchestrator.settings import Settings
from orchestrator.settings.hardware import OwnedGpus
from orchestrator.spec import load_spec_text
from tests.conftest import ROOT

A100S = OwnedGpus(gpu="A100", count=4, purchase_price=40_000, watts=400)
EXPLORE = """name: explore
resources: {accelerators: {H100: 1, A100: 1}}
train: {job: image-classification}
estimate: {hours: 1.5, gpu: A100}
checkpoint: {storage: "s3://bucket/ckpt"}
"""
CPU_JOB = "name: cpu\ntrain: {job: image-classification}\nscaling: {num_workers: 1}\n"
RUN_GPU = "name: run-gpu\nrun: python train.py\nresources: {accelerators: A100:1}\nestimate: {hours: 1, gpu: A100}\n"
NIGHTLY = (ROOT / "examples" / "nightly.yaml").read_text()
# A nightly retrain on all four A100s, for the case where a schedule claims them.
ALL_FOUR = NIGHTLY.replace("{A100: 1, H100: 1}", "A100:4").replace("num_workers: 1", "num_workers: 4")
HYBRID = dict(mode="hybrid", clouds=["lambda", "runpod", "aws"], catalog_dir=ROOT / "examples" / "catalog")


@dataclass
class Case:
    name: str
    job: str
    settings: dict = field(default_factory=dict)
    enabled: Optional[list[str]] = None  # clouds with credentials; None: all configured
    want: str = "local"  # where it runs: local, onprem or cloud; or "refused"
    schedule_due_h: Optional[float] = None  # a cron schedule due then claims all four A100s


CASES = [
    Case("local-only cpu train", CPU_JOB),
    Case("local-only gpu run, no gpu here", RUN_GPU, want="refused"),
    Case("local-only, cloud allowed only", EXPLORE + "placement: {allow: [cloud]}\n", want="refused"),
    Case("hybrid, credentials", EXPLORE, HYBRID, want="cloud"),
    Case("hybrid, cheapest cloud without credentials", EXPLORE, HYBRID, enabled=["lambda", "aws"],
         want="cloud"),
    Case("hybrid, no credentials, cpu job falls back", CPU_JOB + "placement: {allow: [local, cloud]}\n",
         {**HYBRID, "exploratory_backfill": False}, enabled=[]),
    Case("hybrid, no credentials, gpu job refused", EXPLORE + "placement: {allow: [cloud]}\n", HYBRID,
         enabled=[], want="refused"),
    Case("on-prem steady retrain", NIGHTLY, {**HYBRID, "onprem": [A100S]}, want="onprem"),
    Case("on-prem exploratory backfill", EXPLORE, {**HYBRID, "onprem": [A100S]}, want="onprem"),
    Case("on-prem busy: a schedule claims it", EXPLORE, {**HYBRID, "onprem": [A100S]},
         schedule_due_h=0.5, want="cloud"),
    Case("budget too small for any option", EXPLORE + "budget: {max_cost: 0.01}\n", HYBRID, want="refused"),
    Case("monthly budget, currency EUR", EXPLORE, {**HYBRID, "monthly_budget": 50.0, "currency": "EUR",
                                                   "currency_rate": 0.9}, want="cloud"),
    Case("multi-node, cloud only", "num_nodes: 2\n" + EXPLORE + "scaling: {num_workers: 2}\n"
         "placement: {allow: [cloud]}\n", HYBRID, want="cloud"),
    Case("multi-node, a node without a worker", "num_nodes: 2\n" + EXPLORE
         + "placement: {allow: [cloud]}\n", HYBRID, want="refused"),
    Case("multi-node, on-prem allowed", "num_nodes: 2\n" + EXPLORE, {**HYBRID, "onprem": [A100S]},
         want="onprem"),
    Case("steady, cloud only", NIGHTLY + "placement: {allow: [cloud]}\n", HYBRID, want="cloud"),
]


def _outcome(call):
    try:
        return "ok", call()
    except OrchError as e:
        return "refused", e.message


SAME = ("kind", "target", "choice", "estimate", "reasons", "warnings", "refusal")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_recorded_decision_is_the_plan(case, tmp_path, monkeypatch):
    monkeypatch.setattr("orchestrator.service.fingerprint.fingerprint", lambda spec: ("fp-" + case.name, False))
    monkeypatch.setattr("orchestrator.offers.local.detect_gpus", lambda: {})  # no GPU here, as in CI
    clouds = case.settings.get("clouds", [])
    enabled = clouds if case.enabled is None else case.enabled
    monkeypatch.setattr("providers.cloud.enabled_clouds", lambda cs: (
        [c for c in cs if c in enabled], {c: "no credentials (test)" for c in cs if c not in enabled}))
    settings = Settings(home=tmp_path / "home", **{"mode": "local", **case.settings})
    local = Local(settings)
    try:
        if case.schedule_due_h is not None:
            local.orch.store.add_schedule(
                name="nightly", owner=None, cron="0 3 * * *", source_text=NIGHTLY, source_file=None,
                spec=load_spec_text(ALL_FOUR, "nightly.yaml").model_dump(mode="json"),
                next_at=time.time() + case.schedule_due_h * 3600)
        spec = load_spec_text(case.job, "job.yaml")
        planned = _outcome(lambda: local.plan_spec(spec).to_json())
        recorded = _outcome(lambda: local.orch.record(spec).rec)
        if planned[0] == "ok" and planned[1]["target"] is None:  # a plan shows its refusal;
            assert recorded[0] == "refused" and case.want == "refused", recorded  # submit stops on it
            refusal = planned[1]["refusal"]
            assert refusal in recorded[1], (refusal, recorded)
            assert local.orch.store.list() == []  # nothing recorded
            return
        assert planned[0] == recorded[0], (planned, recorded)
        if planned[0] == "refused":  # refused before a decision (credentials): the same words
            assert case.want == "refused" and planned[1] == recorded[1]
            assert local.orch.store.list() == []
            return
        plan, rec = planned[1], recorded[1]
        assert plan["target"] == case.want, "\n".join(plan["reasons"])
        assert (rec.kind, rec.target) == (plan["kind"], plan["target"])
        kept = rec.decision.to_json()
        for key in SAME:
            assert kept.get(key) == plan.get(key), key
        assert kept["alternatives"] == plan["alternatives"][:10]
    finally:
        local.close()

