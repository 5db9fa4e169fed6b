"""The target names are defined once (orchestrator/base/targets.py), and owned versus rented
is that module's answer (`owned`, `rented`, `Offer.owned`), not a comparison with a name."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.base.targets import (
    CLOUD,
    LOCAL,
    ONPREM,
    OWNED,
    TARGETS,
    TIE_ORDER,
    declare,
    forget,
    needs_cloud_credentials,
    owned,
    rented,
)
from orchestrator.decision.models import Offer
from orchestrator.records.placement import PlacedOffer

REPO = Path(__file__).resolve().parents[3]
_NAME = r"[\"'](local|onprem|cloud)[\"']"
# A target compared with a name written out, or a name looked up in an `allow` list.
SPELLED = re.compile(rf"target\s*[!=]=\s*{_NAME}|{_NAME}\s*[!=]=\s*\w*target|{_NAME}\s+(not\s+)?in\s+[\w.]*allow")


def test_owned_and_rented():
    assert [t for t in TARGETS if owned(t)] == [LOCAL, ONPREM]
    assert [t for t in TARGETS if rented(t)] == [CLOUD]
    assert not owned(None) and not rented(None)  # not placed: neither
    assert Offer(CLOUD, "H100", 1, 2.0).owned is False and Offer(ONPREM, "A100", 8, 1.0).owned
    assert PlacedOffer(target=LOCAL).owned and not PlacedOffer(target=CLOUD).owned


def test_the_declarations_are_the_tables_every_importer_holds():
    assert TARGETS == [LOCAL, ONPREM, CLOUD] and TIE_ORDER == {ONPREM: 0, LOCAL: 1, CLOUD: 2}
    assert [t for t in TARGETS if needs_cloud_credentials(t)] == [CLOUD]
    declare("other", owned=True, tie=5)
    try:
        assert (TARGETS[-1], TIE_ORDER["other"], owned("other")) == ("other", 5, True)
        assert not needs_cloud_credentials("other") and Offer("other", None, 0, 1.0).owned
    finally:
        forget("other")
    assert TARGETS == [LOCAL, ONPREM, CLOUD] and "other" not in OWNED | set(TIE_ORDER)


def test_no_module_spells_a_target_name_to_compare_it():
    found = []
    for top in ("orchestrator", "providers"):
        for path in sorted((REPO / top).rglob("*.py")):
            for no, line in enumerate(path.read_text().splitlines(), 1):
                if SPELLED.search(line.split("#", 1)[0]):
                    found.append(f"{path.relative_to(REPO)}:{no}: {line.strip()}")
    assert not found, "compare with base.targets' names, or ask owned()/rented():\n" + "\n".join(found)


def test_the_grep_finds_what_it_is_for():
    for line in ('if o.target == "cloud":', "if rec.target != 'onprem':", '"cloud" in spec.placement.allow',
                 'if "onprem" not in allow'):
        assert SPELLED.search(line), line
    assert not SPELLED.search('if settings.effective_mode == "local":')
