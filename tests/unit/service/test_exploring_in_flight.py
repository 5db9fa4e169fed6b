"""orch plan and orch serve's side of exploration's bound (service.planning.gather): the
store's unfinished rented runs on another model than their estimate's are in flight."""

from __future__ import annotations

import pytest

from orchestrator.decision.facts import decide_on
from orchestrator.records.placement import PlacedOffer, Placement
from orchestrator.service.planning import gather
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from orchestrator.store import Store
from tests.unit.decision.test_explore import A100, H100, JOB, NOW, OWN, rented

pytestmark = pytest.mark.usefixtures("no_orch_env")  # placement reads the defaults


def test_a_plan_reads_the_stores_unfinished_rented_runs_as_measuring(tmp_path):
    """`orch plan`/`orch serve` (service.planning.gather): a job still pending or running on
    a rented H100 whose estimate is for an A100 will measure the pair, so no second run
    explores it meanwhile; the same plan without that row explores."""
    spec = load_spec_text("name: t\nrun: python train.py\n" + JOB)
    s = Settings(clouds=["c"])
    store = Store(tmp_path / "orch.db")
    try:
        facts = gather(spec, s, NOW, fingerprint="fp", history=rented(20) + OWN, offers=[A100, H100],
                       spent_this_month=0.0, store=store)
        assert facts.exploring == frozenset()
        assert decide_on(spec, s, facts, fingerprint="fp", now=NOW).explores == ("A100", "H100")
        store.create_job(name="probe", spec={"estimate": {"hours": 1, "gpu": "A100"}},
                         kind="exploratory", target="cloud", fingerprint="other",
                         decision=Placement(target="cloud", choice=PlacedOffer(target="cloud", gpu="H100",
                                                                               count=1)))
        facts = gather(spec, s, NOW, fingerprint="fp", history=rented(20) + OWN, offers=[A100, H100],
                       spent_this_month=0.0, store=store)
    finally:
        store.close()
    assert facts.exploring == frozenset({("A100", "H100")})
    d = decide_on(spec, s, facts, fingerprint="fp", now=NOW)
    assert d.explores is None and d.choice.offer.gpu == "A100"
