"""Job groups: SkyPilot's tasks that run at once, side by side, from one file: loaded with
every header key SkyPilot reads, started all or none, auxiliary tasks stopped once the
primary ones ended (the cloud behind a replaying fake; tests/integration runs one on a real
local Ray)."""

from __future__ import annotations

import json

import pytest

from orchestrator.base.errors import BackendError, InputError, SpecError
from orchestrator.decision.reconcile import group_status
from orchestrator.service.job_groups import stop_due
from orchestrator.spec.job_group import JobGroup, seconds
from orchestrator.spec.pipeline import load_pipeline_text
from providers.cloud import CloudProvider
from tests.unit.providers.test_cloud import T0, orch  # noqa: F401 (fixture)
from tests.unit.spec.test_pipeline import PerJob

# The shape of SkyPilot's own example (examples/job-group-sdk/job_group.yaml): a header of
# name and execution, then a server and a client, each on Kubernetes, the client reaching
# the server as server-0.${SKYPILOT_JOBGROUP_NAME}.
SDK_EXAMPLE = """\
# A server and a client that talks to it.
---
name: server-client
execution: parallel
---
name: server
resources:
  cpus: 2
  infra: kubernetes
run: |
  python3 -m http.server 8080 &
  sleep 60
---
name: client
resources:
  cpus: 2
  infra: kubernetes
run: |
  curl -s http://server-0.${SKYPILOT_JOBGROUP_NAME}:8080/
"""

# SkyPilot's RL example opens with comments, and its header holds more than name and
# execution.
RL_SHAPE = """\
# Trainer and a replay buffer beside it.
#
# Usage:
#   sky jobs launch group.yaml
---
name: rl
execution: parallel
primary_tasks: [trainer]
termination_delay: {default: 30s, replay-buffer: 2m}
inter_connection: false

---
# The trainer
name: trainer
resources: {accelerators: H100:1}
run: python train.py
---
name: replay-buffer
run: python buffer.py
---
name: eval
run: python eval.py
"""


def test_skypilots_example_group_loads_as_its_two_tasks():
    g = load_pipeline_text(SDK_EXAMPLE, "job_group.yaml")
    assert isinstance(g, JobGroup)
    assert (g.name, g.task_names(), g.primary, g.delays_s, g.inter_connection) == (
        "server-client", ["server", "client"], [], {}, True)
    assert all(g.is_primary(t) for t in g.task_names())  # no primary_tasks: every task is
    assert [t.resources.infra for t in g.tasks] == ["kubernetes", "kubernetes"]
    assert "${SKYPILOT_JOBGROUP_NAME}" in g.tasks[1].run  # left for the task's shell


def test_every_header_key_is_read():
    g = load_pipeline_text(RL_SHAPE, "rl.yaml")
    assert isinstance(g, JobGroup) and g.task_names() == ["trainer", "replay-buffer", "eval"]
    assert g.primary == ["trainer"] and not g.is_primary("eval")
    assert g.delays_s == {"trainer": 30.0, "replay-buffer": 120.0, "eval": 30.0}
    assert g.inter_connection is False


@pytest.mark.parametrize("value,want", [(45, 45.0), ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0),
                                        ("1.5m", 90.0), ("0", 0.0)])
def test_a_delay_reads_as_skypilot_writes_it(value, want):
    assert seconds(value, "g.yaml", 3, "termination_delay") == want


@pytest.mark.parametrize("header,line,key,problem", [
    ("name: g\nexecution: parallel\nbogus: 1\n", 3, "bogus", "is not a key of a job group's header"),
    ("name: g\nexecution: parallel\nprimary_tasks: [trainer]\n", 3, "primary_tasks",
     "names 'trainer', which is not a task of this group"),
    ("name: g\nexecution: parallel\nprimary_tasks: a\n", 3, "primary_tasks", "is not a list"),
    ("name: g\nexecution: parallel\ntermination_delay: soon\n", 3, "termination_delay",
     "soon is not a duration"),
    ("name: g\nexecution: parallel\ntermination_delay: {x: 1s}\n", 3, "termination_delay.x",
     "is not a task of this group"),
    ("name: g\nexecution: parallel\ninter_connection: maybe\n", 3, "inter_connection",
     "is maybe, not true or false"),
    ("name: g\nexecution: sideways\n", 2, "execution", "neither serial"),
])
def test_a_bad_header_names_its_line_and_key(header, line, key, problem):
    text = header + "---\nname: a\nrun: echo a\n---\nname: b\nrun: echo b\n"
    with pytest.raises(SpecError) as e:
        load_pipeline_text(text, "g.yaml")
    assert (e.value.line, e.value.key) == (line, key), e.value.message
    assert problem in e.value.problem


@pytest.mark.parametrize("tasks,line,problem", [
    ("run: echo a\n---\nname: b\nrun: echo b\n", 4, "needs a name"),
    ("name: a\nrun: echo a\n---\nname: a\nrun: echo b\n", 7, "a second task named 'a' (the first is at line 4)"),
    ("name: Big_Name\nrun: echo a\n---\nname: b\nrun: echo b\n", 4, "cannot name a task"),
    ("name: a\nrun: echo a\nschedule: {cron: '0 * * * *'}\n---\nname: b\nrun: echo b\n", 6,
     "cannot have a schedule"),
])
def test_a_bad_task_names_its_line(tasks, line, problem):
    with pytest.raises(SpecError) as e:
        load_pipeline_text("name: g\nexecution: parallel\n---\n" + tasks, "g.yaml")
    assert e.value.line == line and problem in e.value.problem, e.value.message


def test_a_header_after_a_task_is_refused_at_its_line():
    with pytest.raises(SpecError) as e:
        load_pipeline_text("name: a\nrun: echo\n---\nname: g\nexecution: parallel\n", "g.yaml")
    assert (e.value.line, e.value.key) == (5, "execution") and "must come before" in e.value.problem


def test_a_bad_group_file_is_exit_2_with_its_line_from_the_cli(orch_home, tmp_path):
    from tests.conftest import run_orch

    path = tmp_path / "group.yaml"
    path.write_text(RL_SHAPE.replace("primary_tasks: [trainer]", "primary_tasks: [nobody]"))
    proc = run_orch(orch_home, "plan", str(path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith(f"error: {path}:8: primary_tasks: names 'nobody'"), proc.stderr


# -- what the group's tasks do: pure rules -------------------------------------------------


def _row(task, status, primary, finished_at=None, delay=None):
    from orchestrator.records import JobInfo, JobRow

    return JobRow(id=f"orch-{task}", name=task, status=status, finished_at=finished_at,
                  info=JobInfo(group="g", task=task, primary=primary, termination_delay_s=delay))


@pytest.mark.parametrize("primaries,delay,now,stops", [
    ([("RUNNING", None)], 0, 1000, False),  # a primary task still runs
    ([("SUCCEEDED", 900.0), ("RUNNING", None)], 0, 1000, False),  # one of two still runs
    ([("SUCCEEDED", 900.0)], 60, 950, False),  # within its delay
    ([("SUCCEEDED", 900.0)], 60, 960, True),  # its delay has passed
    ([("SUCCEEDED", 900.0), ("SUCCEEDED", 940.0)], 60, 990, False),  # counted from the last
    ([("FAILED", 990.0)], 3600, 991, True),  # a primary failed: at once, whatever the delay
    ([("CANCELLED", 990.0)], 3600, 991, True),
])
def test_an_auxiliary_task_stops_once_the_primary_ones_ended_and_its_delay_passed(
        primaries, delay, now, stops):
    aux = _row("buffer", "RUNNING", False, delay=delay)
    tasks = {f"p{i}": _row(f"p{i}", s, True, t) for i, (s, t) in enumerate(primaries)}
    tasks["buffer"] = aux
    why = stop_due(aux, tasks, now)
    assert (why is not None) == stops
    if stops and primaries[0][0] != "SUCCEEDED":
        assert "stop at once" in why
    # A primary task is never stopped for the others, nor a finished or cancelled one.
    assert stop_due(tasks["p0"], tasks, now + 10_000) is None
    assert stop_due(aux.model_copy(update={"cancel_requested": True}), tasks, now) is None


@pytest.mark.parametrize("tasks,want", [
    ([("PENDING", True), ("PENDING", False)], "PENDING"),
    ([("RUNNING", True), ("PENDING", False)], "RUNNING"),
    ([("SUCCEEDED", True), ("RUNNING", False)], "RUNNING"),
    ([("SUCCEEDED", True), ("CANCELLED", False)], "SUCCEEDED"),  # how a group ends well
    ([("SUCCEEDED", True), ("FAILED", True)], "FAILED"),
    ([("CANCELLED", True), ("SUCCEEDED", False)], "CANCELLED"),
])
def test_a_group_has_one_status(tasks, want):
    assert group_status(tasks) == want


# -- submitting one (the cloud behind the fake) ----------------------------------------------

WHERE = {"cloud": "runpod", "region": "US", "resources": "1x runpod({'H100': 1})"}
RUNNING = {"status": "RUNNING", "start_at": T0, **WHERE}
OK = {"status": "SUCCEEDED", "start_at": T0, "end_at": T0 + 60, **WHERE}
FAILED = {"status": "FAILED", "start_at": T0, "end_at": T0 + 60, "failure_reason": "exit 3", **WHERE}

CLOUD_GROUP = """\
name: rl
execution: parallel
primary_tasks: [trainer]
termination_delay: {delay}
inter_connection: {inter}
---
name: trainer
resources: {{accelerators: H100:1}}
run: python train.py
---
name: buffer
resources: {{accelerators: H100:1}}
run: python buffer.py
"""


class Cancels(PerJob):
    """PerJob whose cancel ends that job alone; its launch fails from the `fail_from`th on."""

    def __init__(self, scripts, fail_from: int = 0):
        super().__init__(scripts)
        self.fail_from = fail_from

    def launch(self, task, name: str) -> str:
        if self.fail_from and len(self.launched) + 1 >= self.fail_from:
            raise RuntimeError("ResourcesUnavailableError: no H100 left in any region")
        return super().launch(task, name)

    def cancel(self, name: str) -> None:
        self.cancelled.append(name)
        self.scripts[name] = [{"status": "CANCELLED", "start_at": T0, "end_at": T0 + 90, **WHERE}]
        self.steps.pop(name, None)


def _group(orch, delay="0s", inter="false", fail_from=0):  # noqa: F811
    fake = Cancels({}, fail_from)
    orch.core.providers["cloud"] = CloudProvider(sdk=fake, startup_minutes=6,
                                             clock=lambda: T0 + 10_000)
    group = load_pipeline_text(CLOUD_GROUP.format(delay=delay, inter=inter), "rl.yaml")
    return fake, group


def test_tasks_start_together_and_the_auxiliary_one_stops_when_the_trainer_ends(orch):  # noqa: F811
    fake, group = _group(orch, delay="0s")
    trainer, buffer = (s.rec for s in orch.submit_group(group))
    assert [n for _, n in fake.launched] == [trainer.id, buffer.id]  # both at once
    assert buffer.info.group_jobs == {"trainer": trainer.id, "buffer": buffer.id}
    assert (buffer.info.primary, buffer.info.termination_delay_s) == (False, 0.0)
    task = fake.launched[1][0]
    assert task.envs["SKYPILOT_JOBGROUP_NAME"] == "rl" and task.envs["ORCH_JOBGROUP_TASK"] == "buffer"
    assert "ORCH_JOBGROUP_HOSTS" not in task.envs  # inter_connection: false, no addresses
    fake.scripts = {trainer.id: [RUNNING, OK], buffer.id: [RUNNING]}
    assert orch.refresh(orch.get(buffer.id)).status == "RUNNING"  # the trainer runs
    assert fake.cancelled == []
    buffer = orch.refresh(orch.get(buffer.id))  # the trainer has succeeded now
    assert orch.get(trainer.id).status == "SUCCEEDED"
    assert fake.cancelled == [buffer.id] and buffer.status == "CANCELLED"
    assert buffer.message.startswith("stopped: the group's primary tasks succeeded")


def test_the_auxiliary_task_outlives_the_trainer_by_its_delay(orch):  # noqa: F811
    fake, group = _group(orch, delay="1h")
    trainer, buffer = (s.rec for s in orch.submit_group(group))
    fake.scripts = {trainer.id: [OK], buffer.id: [RUNNING]}
    assert orch.refresh(orch.get(buffer.id)).status == "RUNNING"  # an hour is not over
    assert orch.get(trainer.id).status == "SUCCEEDED" and fake.cancelled == []


def test_a_failed_trainer_stops_the_auxiliary_task_at_once(orch):  # noqa: F811
    fake, group = _group(orch, delay="1h")
    trainer, buffer = (s.rec for s in orch.submit_group(group))
    fake.scripts = {trainer.id: [FAILED], buffer.id: [RUNNING]}
    buffer = orch.refresh(orch.get(buffer.id))
    assert buffer.status == "CANCELLED" and "primary task trainer ended FAILED" in buffer.message


def test_all_or_none_a_task_that_cannot_launch_takes_the_others_down(orch):  # noqa: F811
    fake, group = _group(orch, fail_from=2)
    with pytest.raises(BackendError, match="no H100 left"):
        orch.submit_group(group)
    trainer, buffer = sorted(orch.core.store.list(), key=lambda r: r.info.task != "trainer")
    assert fake.cancelled == [trainer.backend_id or trainer.id]
    assert trainer.status == "CANCELLED" and "task buffer of its group could not launch" in trainer.message
    assert buffer.status == "FAILED" and buffer.message.startswith("launch failed")


def test_tasks_that_reach_each_other_must_share_this_machine(orch):  # noqa: F811
    fake, group = _group(orch, inter="true")
    with pytest.raises(InputError) as e:
        orch.submit_group(group)
    assert "trainer (cloud), buffer (cloud) would run elsewhere" in e.value.message
    assert "inter_connection: false" in e.value.hint
    assert not orch.core.store.list() and not fake.launched  # nothing written, nothing launched


def test_plan_and_status_show_the_group_as_one(orch, tmp_path, monkeypatch):  # noqa: F811
    from typer.testing import CliRunner

    from orchestrator.cli.commands import app
    from orchestrator.client import Local

    monkeypatch.setattr("orchestrator.client.connect", lambda **kw: Local(orch.settings, orch=orch))
    job = tmp_path / "rl.yaml"
    job.write_text(CLOUD_GROUP.format(delay="1h", inter="false"))
    r = CliRunner().invoke(app, ["plan", str(job), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["group"] == "rl" and d["task_names"] == ["trainer", "buffer"]
    assert [t["target"] for t in d["tasks"]] == ["cloud", "cloud"]
    fake, group = _group(orch, delay="1h")
    trainer, buffer = (s.rec for s in orch.submit_group(group))
    fake.scripts = {trainer.id: [OK], buffer.id: [RUNNING]}
    r = CliRunner().invoke(app, ["status"])
    assert r.exit_code == 0, r.output
    assert "rl (group: trainer succeeded, buffer running)" in " ".join(r.stdout.split())
    assert r.stdout.count("\n orch-") == 1  # one row for the group
    r = CliRunner().invoke(app, ["status", buffer.id])
    assert f"rl: task buffer (auxiliary); trainer {trainer.id}, buffer {buffer.id}" in r.stdout


def test_tasks_whose_gpus_this_machine_cannot_hold_at_once_are_refused(tmp_path, monkeypatch):
    from orchestrator.service import metrics_snapshot
    from orchestrator.service.orch import Orch
    from orchestrator.settings import Settings

    monkeypatch.setattr("orchestrator.offers.local.detect_gpus", lambda *a, **k: {"RTX4090": 1})
    metrics_snapshot.local_gpus.cache_clear()
    try:
        orch = Orch(Settings(home=tmp_path / "home", mode="local"))  # noqa: F811

        class NoLaunch:  # were the check gone, this test must still start no Ray
            def __getattr__(self, name):
                raise AssertionError(f"the group reached its backend ({name})")

        orch.core.providers["local"] = NoLaunch()
        text = CLOUD_GROUP.format(delay="0s", inter="true").replace("H100:1", "RTX4090:1")
        with pytest.raises(InputError) as e:
            orch.submit_group(load_pipeline_text(text, "rl.yaml"))
        assert "need 2 GPUs at once here (trainer 1, buffer 1) and this machine has 1" in e.value.message
        assert not orch.core.store.list()
    finally:
        metrics_snapshot.local_gpus.cache_clear()
