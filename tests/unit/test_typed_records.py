"""Decisions, cost entries, client results, a run's metrics, schedules and the sections of a
stored job file the decisions read are typed records, never read by key.

A placement decision is `records.placement.Placement` (a job row's `decision`, `orch plan
--json`), a job's cost is `records.cost.CostEntry`, and the client returns `records` models
(`JobRecord`, `SubmittedJob`, `CostReport`, ...); a run's metrics are
`records.metrics.RunMetrics`, a stored schedule `records.schedule.ScheduleRow`, a stored job
file as placement, the ledger and budgets read it `records.stored_spec.StoredSpec`. Reading
one of them as a loose dict (`.get("choice")`, `entry["cash_usd"]`) hides the contract: a
renamed field then fails only when a user runs the command. This test greps orch's source for such reads."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Names that hold one of those records wherever orch's code uses them.
_HOLDERS = (r"decision|choice|chosen|chose|placement|placed|estimate|entry|report|plan|planned|"
            r"metrics|sched|schedule")
# Keys only those records have: a read by one of them is a read of such a record.
_KEYS = ("choice|alternatives|decided_by|refusal|classification|warnings|decision|"
         "price_per_hour_usd|amortized_per_hour_usd|power_per_hour_usd|est_hours|est_cost|"
         "marginal_cost|congestion_cost|full_cost_known|offer_count|hours_basis|"
         "cash_usd|gpu_hours|amortized_usd|power_usd|estimate_usd|alternative_usd|saved_usd|"
         "already_ended|existing|"
         # a run's metrics (records.metrics.RunMetrics): what orch derives from its log
         "verdict|telemetry|device_now|run_settings|utilization|phases|scaling|failure|"
         "stopped|dropped_events|mean_util|energy_wh|gpu_name|speedup|efficiency|"
         # a schedule (records.schedule.ScheduleRow, records.Schedule)
         "cron|next_at|last_slot|paused|source_text|"
         # a stored job file's sections the decisions read (records.stored_spec.StoredSpec)
         "estimate|budget|max_cost|deadline_hours")
BY_NAME = re.compile(rf"\b({_HOLDERS})\b(\s+or\s+\{{\}}\))?\s*"
                     rf"(\.get\(|\[[\"'][a-z_]+[\"']\](?!\s*=[^=]))")  # a read, not a write
BY_KEY = re.compile(rf"(\.get\(|\[)[\"']({_KEYS})[\"'](?!\]\s*=[^=])")  # a read, not a write

# Files that may read these keys from a dict, each with why.
# Ray's and SkyPilot's JSON (providers/) use other keys and pass as they are; the lenient
# reader of rows written by older orch versions is pydantic's (Placement.read, CostEntry).
ALLOWED = {
    # A trace imported from a CSV file is external input: its columns are the file's.
    "orchestrator/simulate/trace.py": "parses an imported CSV trace",
    # The one builder of a run's metrics: from its log's events, as a dict for the store.
    "orchestrator/service/run_metrics.py": "builds a run's metrics from its log's events",
    # The store's row of a schedule, made a ScheduleRow (its columns, before a record).
    "orchestrator/store/schedules.py": "builds a ScheduleRow from its table's row",
    # Salvage reads what rows of a damaged store it could, before any record is made.
    "orchestrator/service/doctor/repair.py": "counts the raw rows salvaged from a damaged store",
}


def _reads() -> list[str]:
    found = []
    for top in ("orchestrator", "providers"):
        for path in sorted((REPO / top).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for no, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                if BY_NAME.search(code) or BY_KEY.search(code):
                    found.append(f"{rel}:{no}: {line.strip()}")
    return found


def test_no_decision_cost_entry_or_client_result_is_read_by_key():
    found = [f for f in _reads() if f.split(":", 1)[0] not in ALLOWED]
    assert not found, ("read a decision, cost entry, client result, run's metrics, schedule or "
                       "stored job file through its typed record (records.placement, "
                       "records.cost, records.metrics, records.schedule, records.stored_spec, "
                       "records), not by key:\n"
                       + "\n".join(found))


def test_the_grep_finds_what_it_is_for():
    for line in ('choice = (decision or {}).get("choice") or {}', 'e["cash_usd"]',
                 'hours = ((decision or {}).get("estimate") or {}).get("hours")',
                 'if rec["already_ended"]:', 'plan["alternatives"]',
                 'verdict = (rec.metrics or {}).get("verdict")', 'metrics.get("samples_per_sec")',
                 'tel = m.get("telemetry")', 's["mean_util"]', 'spec.get("estimate")',
                 '(spec.get("budget") or {}).get("max_cost")', 'if s["paused"]:',
                 'cron.due(s["cron"], s["next_at"], now)'):
        assert BY_NAME.search(line) or BY_KEY.search(line), line
    for line in ('metadata["est_hours"] = round(h, 4)', 'spec.get("envs")',
                 'ledger["cost_usd"]', 'ev.get("chosen")'):
        assert not (BY_NAME.search(line) or BY_KEY.search(line)), line


def test_the_list_of_allowed_files_is_current():
    reading = {f.split(":", 1)[0] for f in _reads()}
    stale = sorted(set(ALLOWED) - reading)
    assert not stale, f"no longer read by key, remove from ALLOWED: {stale}"


# The CLI renders typed records: a string key read there is a dict's (an event line, a
# table of settings), and they stay few (issue 50: 131 by this count before, 33 after).
CLI_KEY_READ = re.compile(r'(\["[a-z_]+"\]|\.get\("[a-z_]+")')
CLI_KEY_READS_MAX = 40


def test_the_cli_reads_few_string_keys():
    found = [f"{path.relative_to(REPO)}:{no}"
             for path in sorted((REPO / "orchestrator" / "cli").rglob("*.py"))
             for no, line in enumerate(path.read_text().splitlines(), 1)
             for _ in CLI_KEY_READ.finditer(line.split("#", 1)[0])]
    assert len(found) < CLI_KEY_READS_MAX, (
        f"{len(found)} string-key reads in orchestrator/cli (fewer than {CLI_KEY_READS_MAX}): "
        "render a typed record (orchestrator/records) instead:\n" + "\n".join(found))
