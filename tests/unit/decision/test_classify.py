"""The classifier: a table of jobs and histories, each with the kind and reasons expected."""

from __future__ import annotations

import pytest

from orchestrator.decision import PastRun, classify
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text

NOW = 1_700_000_000.0
DAY = 86400.0
FP = "fp-train"


pytestmark = pytest.mark.usefixtures("no_orch_env")  # placement reads the defaults


def spec(schedule: str = "") -> object:
    return load_spec_text(f"name: t\nrun: python train.py\n{schedule}")


def runs(n: int, days_ago: float = 1.0, status: str = "SUCCEEDED", fp: str = FP,
         every_s: float = DAY) -> list[PastRun]:
    """`n` runs, the newest `days_ago` days ago, one every `every_s` seconds before it."""
    return [PastRun(fp, status, NOW - days_ago * DAY - i * every_s, duration_s=600)
            for i in range(n)]


def sweep(n: int, minutes: float = 60, days_ago: float = 0.5) -> list[PastRun]:
    """A sweep: `n` runs of one fingerprint started within `minutes`."""
    return runs(n, days_ago=days_ago, every_s=minutes * 60 / max(n - 1, 1))


CASES = [
    # id, schedule yaml, history, dirty, expected hours, kind, reason fragments
    ("brand-new short job", "", [], True, 0.5, "exploratory",
     ["new job: 0 successful runs", "uncommitted changes", "short: expected 0.5 h"]),
    ("same job after K runs", "", runs(3), False, 0.5, "steady", ["3 successful runs", ">= 3"]),
    ("a sweep of 10 runs in an hour", "", sweep(10), False, 0.5, "exploratory",
     ["10 successful runs", "on 1 occasion at least 12 h apart", "within one burst"]),
    ("the same job on 3 distinct days", "", runs(3, every_s=DAY), False, 0.5, "steady",
     ["on 3 occasions", ">= 3 makes it steady"]),
    ("two sweeps on two days", "", sweep(6) + sweep(6, days_ago=1.5), False, 0.5, "exploratory",
     ["12 successful runs", "on 2 occasions"]),
    ("three sweeps on three days", "", sweep(4) + sweep(4, days_ago=1.5) + sweep(4, days_ago=2.5),
     False, 0.5, "steady", ["on 3 occasions", ">= 3 makes it steady"]),
    ("3 runs 6 h apart: one occasion and a half", "", runs(3, every_s=6 * 3600), False, 0.5,
     "exploratory", ["on 2 occasions"]),
    ("K runs but dirty: history wins", "", runs(3), True, 0.5, "steady",
     [">= 3 makes it steady", "uncommitted changes"]),
    ("K-1 runs", "", runs(2), False, 0.5, "exploratory", ["2 successful runs", "not yet steady"]),
    ("K runs outside the window", "", runs(3, days_ago=20), False, 0.5, "exploratory", ["new job"]),
    ("failed runs do not count", "", runs(5, status="FAILED"), False, 0.5, "exploratory", ["new job"]),
    ("other fingerprints do not count", "", runs(5, fp="other"), False, 0.5, "exploratory",
     ["new job"]),
    ("cron job", "schedule: {cron: '0 3 * * *'}", [], False, 0.5, "steady",
     ["cron schedule '0 3 * * *'"]),
    ("explicit kind beats cron", "schedule: {kind: exploratory, cron: '0 3 * * *'}", runs(3),
     False, 5.0, "exploratory", ["schedule.kind is exploratory", "overridden by schedule.kind"]),
    ("explicit steady", "schedule: {kind: steady}", [], True, 0.2, "steady",
     ["schedule.kind is steady"]),
    ("long one-off job", "", [], False, 30.0, "exploratory",
     ["long: expected 30 h", "one-off so far"]),
    ("unknown duration", "", [], False, None, "exploratory", ["expected duration unknown"]),
]


@pytest.mark.parametrize("name,schedule,history,dirty,hours,kind,fragments", CASES,
                         ids=[c[0] for c in CASES])
def test_classify(name, schedule, history, dirty, hours, kind, fragments):
    c = classify(spec(schedule), FP, history, NOW, Settings(), dirty, hours)
    assert c.kind == kind
    text = " | ".join(c.reasons)
    for f in fragments:
        assert f in text, f"{f!r} not in {text!r}"


def test_thresholds_come_from_settings():
    s = Settings(steady_min_runs=1, steady_window_days=30, short_job_hours=10)
    c = classify(spec(), FP, runs(1, days_ago=25), NOW, s, False, 5.0)
    assert c.kind == "steady" and c.recent_successes == 1
    assert any("short: expected 5 h < 10 h" in r for r in c.reasons)


def test_gap_comes_from_settings():
    # Runs an hour apart: three occasions when a gap of 1 h is enough, one with 12 h.
    hourly = runs(3, every_s=3600)
    assert classify(spec(), FP, hourly, NOW, Settings(), False, 1.0).kind == "exploratory"
    c = classify(spec(), FP, hourly, NOW, Settings(steady_min_gap_hours=1), False, 1.0)
    assert c.kind == "steady" and c.occasions == 3 and c.recent_successes == 3


def test_future_runs_are_ignored():
    c = classify(spec(), FP, runs(3, days_ago=-1), NOW, Settings(), False, 1.0)
    assert c.kind == "exploratory"
