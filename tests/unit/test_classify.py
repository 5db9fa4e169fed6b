"""The classifier: a table of jobs and histories, each with the kind and reasons expected."""

from __future__ import annotations

import pytest

from orchestrator.decision import PastRun, classify
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text

NOW = 1_700_000_000.0
DAY = 86400.0
FP = "fp-train"


@pytest.fixture(autouse=True)
def _no_orch_env(monkeypatch):
    for k in list(__import__("os").environ):
        if k.startswith("ORCH_"):
            monkeypatch.delenv(k)


def spec(schedule: str = "") -> object:
    return load_spec_text(f"name: t\nrun: python train.py\n{schedule}")


def runs(n: int, days_ago: float = 1.0, status: str = "SUCCEEDED", fp: str = FP) -> list[PastRun]:
    return [PastRun(fp, status, NOW - days_ago * DAY - i, duration_s=600) for i in range(n)]


CASES = [
    # id, schedule yaml, history, dirty, expected hours, kind, reason fragments
    ("brand-new short job", "", [], True, 0.5, "exploratory",
     ["new job: 0 successful runs", "uncommitted changes", "short: expected 0.5 h"]),
    ("same job after K runs", "", runs(3), False, 0.5, "steady", ["3 successful runs", ">= 3"]),
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


def test_future_runs_are_ignored():
    c = classify(spec(), FP, runs(3, days_ago=-1), NOW, Settings(), False, 1.0)
    assert c.kind == "exploratory"
