"""`orch schedule` without a server: list, show, pause, resume and rm work on this machine's
store (the one an `orch serve` here runs the schedules from), ids by unique prefix, and
bad input is one message with a hint, exit 2. The real CLI in a subprocess, no Ray."""

from __future__ import annotations

import json
import os

from orchestrator.settings import Settings
from tests.conftest import run_orch, store_at, store_created


def _register(home, name: str, owner: str, cron: str = "0 3 * * *") -> str:
    from orchestrator.server.intake import register
    from orchestrator.server.scheduler import Scheduler
    from orchestrator.spec import load_spec_text

    text = f"name: {name}\nrun: echo {name}\nschedule: {{cron: '{cron}'}}\n"
    with Scheduler(Settings(home=home, mode="local")).session() as orch:
        return register(orch, load_spec_text(text), text, f"/srv/jobs/{name}.yaml", owner)["id"]


def test_list_show_pause_resume_and_rm_on_this_machines_store(orch_home):
    nightly = _register(orch_home, "nightly", "alice")
    weekly = _register(orch_home, "weekly", "bob", "0 4 * * 1")
    proc = run_orch(orch_home, "schedule", "list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["ID", "┃", "NAME", "┃", "OWNER", "┃", "CRON", "(UTC)", "┃", "NEXT",
                                "RUN", "┃", "LAST", "SLOT", "┃", "PAUSED"]
    assert [line.split("│")[0].strip() for line in lines[2:]] == [nightly, weekly]
    where = os.environ.get("ORCH_DATABASE_URL") and store_at(orch_home).where or f"{orch_home}/orch.db"
    assert proc.stderr.strip() == (f"no ORCH_SERVER: the schedules in this machine's store "
                                   f"({where}); they run only while `orch serve` runs with it")
    listed = json.loads(run_orch(orch_home, "schedule", "list", "--json").stdout)
    assert [(s["id"], s["name"], s["owner"], s["cron"], s["paused"]) for s in listed] == [
        (nightly, "nightly", "alice", "0 3 * * *", False), (weekly, "weekly", "bob", "0 4 * * 1", False)]

    # A unique prefix is enough; the store's own user may change anyone's schedule.
    proc = run_orch(orch_home, "schedule", "pause", nightly[:10])
    assert proc.returncode == 0 and proc.stdout.strip() == (
        f"{nightly} nightly paused: no runs until `orch schedule resume {nightly}`")
    again = run_orch(orch_home, "schedule", "pause", nightly)
    assert again.stdout.strip() == f"{nightly} nightly was already paused; nothing changed"
    shown = run_orch(orch_home, "schedule", "show", nightly)
    assert shown.returncode == 0
    out = shown.stdout.splitlines()
    assert out[0] == f"{nightly} nightly  paused" and "  cron         0 3 * * * (UTC)" in out
    assert not any(line.startswith("  next run") for line in out)  # none while paused
    log = out[out.index("  log") + 1:]
    assert len(log) == 2 and log[0].endswith("registered: cron '0 3 * * *'")
    assert log[1].endswith(", on the store directly") and " paused by " in log[1]

    proc = run_orch(orch_home, "schedule", "resume", nightly)
    assert proc.returncode == 0 and proc.stdout.startswith(f"{nightly} nightly resumed: next run ")
    one = json.loads(run_orch(orch_home, "schedule", "show", nightly, "--json").stdout)
    assert one["paused"] is False and one["next_at"].endswith("T03:00:00Z") and len(one["log"]) == 3

    # rm: the schedule and its log go, the jobs it ran stay.
    store = store_at(orch_home)
    job = store.create_job(name="nightly", spec={"run": "echo nightly"}, kind="steady",
                           target="local", fingerprint=None, owner="alice",
                           idempotency_key=f"cron:{nightly}:2027-01-01T03:00:00Z")
    proc = run_orch(orch_home, "schedule", "rm", nightly)
    assert proc.returncode == 0 and proc.stdout.strip() == (
        f"{nightly} nightly removed, with its log; the jobs it ran are kept (`orch status`)")
    assert [s.id for s in store.schedules()] == [weekly]
    assert store.schedule_events(nightly) == [] and store.get(job.id).name == "nightly"
    store.close()


def test_unknown_ambiguous_and_empty_ids_are_one_message_and_exit_2(orch_home):
    proc = run_orch(orch_home, "schedule", "show", "sched-0")
    assert proc.returncode == 2 and proc.stderr.startswith("error: no schedule 'sched-0'")
    listed = run_orch(orch_home, "schedule", "list")
    assert listed.returncode == 0 and listed.stdout.startswith("no schedules: `orch submit FILE` with")
    if not os.environ.get("ORCH_DATABASE_URL"):  # SQLite: asking never creates the store file
        assert not store_created(orch_home)
    _register(orch_home, "a", "alice")
    _register(orch_home, "b", "alice")
    for args, message in ((("pause", "sched-"), "error: 'sched-' matches several schedules"),
                          (("rm", "sched-nothere"), "error: no schedule 'sched-nothere'"),
                          (("resume", " "), "error: no schedule id given")):
        proc = run_orch(orch_home, "schedule", *args)
        assert proc.returncode == 2 and proc.stderr.splitlines() == [
            message, "  -> `orch schedule list` shows the schedules with their ids"], (args, proc.stderr)
    assert run_orch(orch_home, "schedule", "show").returncode == 2  # missing argument: click's usage
