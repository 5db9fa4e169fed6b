"""What the status page's browser test puts in the store and runs: a month of finished jobs
for the money view, a finished train job with everything its page shows, and a job that
reports an epoch every 2 s."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.conftest import store_at


def seed_month(home: Path, now: float) -> None:
    """Finished jobs of this month for the money view: owned ones (power is their cash) and
    cloud ones (their bill), by two owners over the month's days so far."""
    store = store_at(home)
    start = now - (time.gmtime(now).tm_mday - 1) * 86400
    try:
        for i in range(12):
            cloud = i % 3 == 0
            target, owner = ("cloud" if cloud else "local"), ("bob" if i % 2 else "alice")
            choice = {"target": target, "gpu": "A100" if cloud else "RTX4090", "count": 1,
                      "price_per_hour_usd": 3.0 if cloud else 0.9}
            if not cloud:
                choice.update(power_per_hour_usd=0.12, amortized_per_hour_usd=0.78)
            info = {"ledger": {"cost_usd": 9.0 + i, "billed_hours": 3.0}} if cloud else None
            rec = store.create_job(name=f"{'digits' if i % 2 else 'resnet'}-{i}", spec={}, kind="exploratory",
                                   target=target, fingerprint=None, owner=owner, info=info,
                                   decision={"target": target, "choice": choice})
            store.set_status(rec.id, "RUNNING", "started")
            store.set_status(rec.id, "SUCCEEDED" if i % 5 else "FAILED", "done")
            end = min(now - 60, start + (i + 0.5) / 12 * (now - start))
            store._db.execute("UPDATE jobs SET created_at = ?, started_at = ?, finished_at = ? WHERE id = ?",
                              (end - 3 * 3600 - 60, end - 3 * 3600, end, rec.id))
    finally:
        store.close()


def finished_train_job(home: Path) -> str:
    """A finished two-GPU job as a train job leaves it: eight reports in its log, its step-time
    split and verdict, phases and device telemetry in its metrics, a placement with two
    alternatives. Its id."""
    log = home / "resnet.log"
    log.write_text("".join("::orch::" + json.dumps({"event": "report", "index": i, "t": 1000 + 10 * i, "metrics": {
        "epoch": i, "epochs": 8, "loss": round(1.5 / i, 4), "accuracy": round(0.8 + 0.02 * i, 3),
        "samples_per_sec": 4000 + 300 * i, "epoch_s": round(2.0 - 0.05 * i, 2)}}) + f"\nEpoch {i} done\n"
        for i in range(1, 9)))
    metrics = {"epoch": 8, "loss": 0.1875, "accuracy": 0.96, "data_fraction": 0.31, "copy_fraction": 0.07,
               "verdict": {"kind": "input-bound", "reasons": ["31% of each step waits for data, 7% copies it to cuda, "
                                                              "the rest computes"],
                           "advice": ["loader_workers: auto", "pin_memory: true"]},
               "phases": {"submit_to_recorded": 1.2, "recorded_to_launched": 3.5, "launched_to_driver": 6.1,
                          "driver_to_workers": 14.2, "workers_to_first_step": 4.4, "training": 80.3,
                          "last_step_to_ended": 2.1},
               "telemetry": {"summary": {"source": "nvml", "device": "RTX 4090", "workers": 2, "mean_util": 58.2,
                                         "p10_util": 22, "peak_mem_gb": 9.4, "mem_total_gb": 24, "energy_wh": 11.2}}}
    choice = {"target": "onprem", "gpu": "RTX4090", "count": 2, "price_per_hour": 0.78, "price_per_hour_usd": 0.78,
              "power_per_hour_usd": 0.12, "amortized_per_hour_usd": 0.66, "est_hours": 0.4, "est_cost": 0.31,
              "marginal_cost": 0.05, "cash_cost": 0.05}
    decision = {"target": "onprem", "kind": "exploratory", "reasons": ["short: expected 0.4 h < 2 h points to "
                                                                       "exploratory work"],
                "estimate": {"hours": 0.4, "cost": 0.31, "cost_usd": 0.31, "marginal": 0.05, "cash": 0.05},
                "choice": choice, "alternatives": [
                    {"target": "cloud", "cloud": "aws", "region": "us-east-1", "gpu": "A10G", "count": 2,
                     "price_per_hour": 2.4, "est_hours": 0.5, "est_cost": 1.4, "marginal_cost": 1.4, "cash_cost": 1.4},
                    {"target": "local", "count": 0, "price_per_hour": 0.02, "est_hours": 3.0, "est_cost": 0.9,
                     "marginal_cost": 0.07, "cash_cost": 0.07, "excluded": "needs 2 GPUs; local has none"}]}
    store = store_at(home)
    try:
        rec = store.create_job(name="resnet-cifar", spec={}, kind="exploratory", target="onprem", fingerprint=None,
                               owner="alice", decision=decision)
        store.set_status(rec.id, "RUNNING", "started")
        store.set_status(rec.id, "SUCCEEDED", "done: epoch 8/8, loss 0.1875, accuracy 0.960", metrics=metrics,
                         log_path=str(log))
        store._db.execute("UPDATE jobs SET started_at = finished_at - 1500 WHERE id = ?", (rec.id,))
    finally:
        store.close()
    return rec.id


TICKER = """i=0
while [ $i -lt 400 ]; do
  i=$((i+1))
  loss=$(awk "BEGIN {print 2.0/($i+1)}")
  echo "::orch::{\\"event\\": \\"report\\", \\"index\\": $i, \\"metrics\\": {\\"epoch\\": $i, \\"loss\\": $loss, \\"accuracy\\": 0.$i}}"
  echo "tick $i"
  sleep 2
done
"""
