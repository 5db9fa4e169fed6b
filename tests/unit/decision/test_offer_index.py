"""The offer index as placement uses it: offers grouped by kind (target, spot or not) and
priced a group at a time, each offer once, the ranking the same whatever order they came in."""

from __future__ import annotations

import random

from orchestrator.decision import Offer, OfferIndex, classify, decide
from orchestrator.decision.matching import Needs, candidates
from orchestrator.decision.pricing import local_offer, onprem_offer
from orchestrator.settings import LocalMachine, OwnedGpus, Settings
from orchestrator.spec import load_spec_text

NOW = 1_700_000_000.0
OWNED = OwnedGpus(gpu="A100", count=4, purchase_price=40000, watts=400)
MIXED = [Offer("cloud", "A100", 1, p, cloud=c, region="r", spot=spot)
         for c in ("a", "b") for p in (1.0, 1.2) for spot in (False, True)] + [
    onprem_offer(OWNED, 0.15),
    local_offer(LocalMachine(purchase_price=3000, watts=450), 0.15, "A100", 1, 16, 64)]
JOB = "name: t\nrun: x\nresources: {accelerators: 'A100:1'}\nestimate: {hours: 1}\n"


def _decide(offers, extra: str = ""):
    spec = load_spec_text(JOB + extra)
    s = Settings(clouds=["a", "b"], onprem=[OWNED])
    return decide(spec, classify(spec, "fp", [], NOW, s, False, 1.0), offers, None, s)


def _ranking(d) -> list[tuple]:
    return [(a.offer, a.used, a.score, a.excluded) for a in d.alternatives]


def test_candidates_come_in_groups_of_one_kind_each():
    needs = Needs.of(load_spec_text(JOB))
    groups = candidates(needs, OfferIndex(MIXED))
    assert sorted(len(g) for _, g in groups) == [1, 1, 4, 4]  # on-prem, local, on-demand, spot
    for used, group in groups:
        assert used == 1 and len({(o.target, o.spot) for o in group}) == 1
    assert sorted((o for _, g in groups for o in g), key=MIXED.index) == MIXED


def test_an_offer_given_twice_is_priced_once():
    once = _decide(MIXED)
    assert len(once.alternatives) == len(MIXED)
    for twice in (MIXED + MIXED[:3], OfferIndex(MIXED + [MIXED[-1]])):
        assert _ranking(_decide(twice)) == _ranking(once)


def test_the_ranking_is_the_same_whatever_order_the_offers_came_in():
    for extra in ("", "checkpoint: {storage: 's3://b/c'}\n", "budget: {max_hourly: 1.1}\n"):
        first = _ranking(_decide(MIXED, extra))
        for seed in range(4):
            shuffled = MIXED[:]
            random.Random(seed).shuffle(shuffled)
            assert _ranking(_decide(shuffled, extra)) == first
