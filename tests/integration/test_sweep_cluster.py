"""A sweep placed together on a real two-node Ray cluster on loopback (3 CPU slots: the
owned capacity) and the cloud (behind the fake SDK, the cloud's only stand-in): the longest
runs by estimate take the cluster, the rest rent, and `orch status` shows one row."""

from __future__ import annotations

import time

import pytest

from orchestrator.spec import load_spec_text
from tests.conftest import ROOT
from tests.fake_sky import FakeSky

pytestmark = pytest.mark.integration

SWEEP = """\
name: cpu-sweep
run: sleep 3
resources: {cpus: 1}
placement: {allow: [onprem, cloud]}
schedule: {kind: exploratory}
sweep:
  runs: [%s]
"""
# 12 runs, all short (exploratory); the 3 longest are the 4th, 8th and 11th.
HOURS = [0.10, 0.20, 0.15, 0.90, 0.05, 0.10, 0.30, 0.80, 0.20, 0.10, 0.70, 0.25]


def test_a_twelve_run_sweep_gives_the_cluster_to_its_longest_runs(cluster, orch_home, monkeypatch):
    from orchestrator.client import Local
    from orchestrator.service.orch import Orch
    from orchestrator.settings import Settings
    from providers.cloud import CloudProvider

    monkeypatch.setattr("providers.cloud.enabled_clouds", lambda clouds: (list(clouds), {}))
    settings = Settings(home=orch_home, mode="hybrid", ray_address=cluster.address,
                        ray_token_file=cluster.token_file, clouds=["lambda", "runpod", "aws"],
                        catalog_dir=ROOT / "examples" / "catalog")
    orch = Orch(settings)
    fake = FakeSky([])
    orch.core.providers["cloud"] = CloudProvider(sdk=fake, startup_minutes=6, clock=time.time)
    spec = load_spec_text(SWEEP % ", ".join(f"{{estimate.hours: {h}}}" for h in HOURS), "sweep.yaml")
    recs = [s.rec for s in orch.submit_sweep(spec)]
    on_cluster = sorted(r.info.sweep_run for r in recs if r.target == "onprem")
    assert on_cluster == [4, 8, 11], [(r.info.sweep_run, r.target, r.decision.reasons[:2]) for r in recs]
    assert {r.target for r in recs if r.info.sweep_run not in on_cluster} == {"cloud"}
    assert len(fake.launched) == 9
    # The three ran on the cluster, side by side, and ended.
    deadline = time.monotonic() + 120
    ran = [r for r in recs if r.target == "onprem"]
    while True:
        ran = [orch.refresh(orch.get(r.id)) for r in ran]
        if all(r.status == "SUCCEEDED" for r in ran) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert [r.status for r in ran] == ["SUCCEEDED"] * 3, [(r.id, r.status, r.message) for r in ran]
    rows = [r for r in Local(settings, orch=orch).jobs(100) if r.run.sweep == recs[0].info.sweep]
    assert len(rows) == 12 and {r.run.sweep_runs for r in rows} == {12}
