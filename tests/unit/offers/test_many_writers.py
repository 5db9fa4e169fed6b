"""Eight processes planning and submitting 12 jobs each into one store at once. Each plan
reads every earlier run of its job (the writers' jobs share a fingerprint), so the work grows
with the square of the jobs: 25 jobs each took 45-52 CPU-s a store here, 12 take 25, and the
eight still write side by side for most of the test."""

from __future__ import annotations

import subprocess
import sys
import time

from orchestrator.offers.catalog import cloud_offers
from tests.conftest import ROOT, orch_env, store_at

WRITERS, JOBS = 8, 12
ORDER = {"PENDING": 0, "RUNNING": 1, "SUCCEEDED": 2, "FAILED": 2, "CANCELLED": 2}


def test_eight_writers_leave_exactly_their_records_each_consistent(tmp_path):
    home = tmp_path / "home"
    env = orch_env(home, ORCH_MODE="hybrid")
    # The catalogs' offers kept in the cache folder, as on a machine where orch ran before
    # (orchestrator/offers/catalog.py): the writers spend their time on the store, not SkyPilot's import.
    cloud_offers(["lambda", "runpod", "aws"], ROOT / "examples" / "catalog")
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "writer_process.py"), str(home),
                               str(w), str(JOBS)], env=env, cwd=str(ROOT), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for w in range(WRITERS)]
    results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    print(f"{WRITERS} writers x {JOBS} jobs: {time.monotonic() - started:.1f} s")
    for code, out, err in results:
        assert code == 0 and out.startswith("ok"), err[-3000:]
        assert "locked" not in err.lower()
    store = store_at(home)
    recs = store.list(limit=10_000)
    assert len(recs) == WRITERS * JOBS
    assert len({r.idempotency_key for r in recs}) == WRITERS * JOBS
    assert sorted(r.name for r in recs) == sorted(f"w{w}-{j}" for w in range(WRITERS)
                                                     for j in range(JOBS))
    for r in recs:
        h = store.history(r.id)
        statuses = [e["status"] for e in h]
        assert statuses[0] == "PENDING" and statuses[-1] == r.status == "SUCCEEDED", statuses
        assert [ORDER[s] for s in statuses] == sorted(ORDER[s] for s in statuses), statuses
        assert statuses.count("SUCCEEDED") == 1
        assert [e["ts"] for e in h] == sorted(e["ts"] for e in h)
        assert r.backend_id == r.id and r.info.cost.cost_usd > 0
