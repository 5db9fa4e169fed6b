"""Pipelines: SkyPilot's chain of tasks in one file, a stage launched once the one before it
succeeded, the rest never started after a failure (the cloud behind a replaying fake)."""

from __future__ import annotations

import json

import pytest

from orchestrator.base.errors import SpecError
from orchestrator.spec.pipeline import load_pipeline_text
from providers.cloud import CloudProvider
from tests.fake_sky import FakeSky
from tests.unit.providers.test_cloud import T0, orch  # noqa: F401 (fixture)

PIPELINE = """\
name: bert-qa

---

name: train
resources: {accelerators: H100:1}
run: python train.py
estimate: {hours: 1.5, gpu: A100}

---

resources: {accelerators: H100:1}
run: python eval.py
estimate: {hours: 0.5, gpu: A100}
"""
WHERE = {"cloud": "runpod", "region": "US", "resources": "1x runpod({'H100': 1})"}


class PerJob(FakeSky):
    """The fake SDK, with a script of records for each managed job by its name."""

    def __init__(self, scripts: dict[str, list[dict]]):
        super().__init__([])
        self.scripts = scripts
        self.steps: dict[str, int] = {}

    def queue(self, name: str) -> list[dict]:
        self._call()
        if name not in {n for _, n in self.launched}:
            return []
        script = self.scripts[name]
        self.steps[name] = min(self.steps.get(name, -1) + 1, len(script) - 1)
        return [{"job_name": name, "job_id": 7, **script[self.steps[name]]}]


def test_a_pipeline_file_loads_as_its_stages_in_order():
    p = load_pipeline_text(PIPELINE, "bert.yaml")
    assert p is not None and p.name == "bert-qa"
    assert [s.name for s in p.stages] == ["train", "bert-qa-2"]  # unnamed: after the pipeline
    assert [s.run for s in p.stages] == ["python train.py", "python eval.py"]
    assert load_pipeline_text("name: one\nrun: echo\n", "one.yaml") is None  # a task alone
    # No header: every document is a stage, the pipeline named after the file.
    p = load_pipeline_text("run: echo a\n---\nrun: echo b\n", "two.yaml")
    assert p is not None and p.name == "two" and len(p.stages) == 2


def test_a_stages_error_names_its_line_in_the_file():
    with pytest.raises(SpecError) as e:
        load_pipeline_text(PIPELINE.replace("run: python eval.py", "run: python eval.py\nbogus: 1"),
                           "bert.yaml")
    assert (e.value.line, e.value.key) == (14, "bogus")


def test_a_deeply_nested_file_stops_the_document_split_at_the_depth_limit(monkeypatch):
    # PyYAML's scanner takes time quadratic in the nesting to go on (15 CPU-s for 10,000
    # levels, about 20 KB): the split reads no further than the depth the loader refuses.
    import yaml

    from orchestrator.spec import pipeline

    events, parse = [], yaml.parse
    monkeypatch.setattr(pipeline.yaml, "parse", lambda *a, **k: (
        events.append(ev) or ev for ev in parse(*a, **k)))
    text = "run: echo\nx: " + "[" * 10_000 + "]" * 10_000 + "\n---\nrun: echo\n"
    assert pipeline.documents(text) == []
    assert len(events) < 2 * pipeline.MAX_DEPTH
    with pytest.raises(SpecError, match="nested more than 64 levels deep") as e:
        load_pipeline_text(text, "deep.yaml") or pipeline.load_spec_text(text, "deep.yaml")
    assert e.value.line == 2


def _submit(orch, scripts):  # noqa: F811
    from orchestrator.spec.pipeline import load_pipeline_text

    fake = PerJob(scripts)
    orch.core.providers["cloud"] = CloudProvider(sdk=fake, startup_minutes=6,
                                             clock=lambda: T0 + 10_000)
    done = orch.submit_pipeline(load_pipeline_text(PIPELINE, "bert.yaml"))
    return fake, [s.rec for s in done]


def test_the_second_stage_starts_only_once_the_first_succeeded(orch):  # noqa: F811
    ran = {"status": "RUNNING", "start_at": T0, **WHERE}
    ok = {"status": "SUCCEEDED", "start_at": T0, "end_at": T0 + 60, **WHERE}
    fake, (first, second) = _submit(orch, {})
    fake.scripts = {first.id: [ran, ok], second.id: [ran, ok]}
    assert [n for _, n in fake.launched] == [first.id]
    assert second.status == "PENDING" and second.backend_id is None
    assert second.message == f"waits for stage 1 ({first.id}) to succeed"
    assert (second.info.pipeline, second.info.stage, second.info.stages, second.info.after) == (
        "bert-qa", 2, 2, first.id)
    assert orch.refresh(orch.get(second.id)).status == "PENDING"  # the first one runs
    assert [n for _, n in fake.launched] == [first.id]
    second = orch.refresh(orch.get(second.id))  # the first one has succeeded now
    assert orch.get(first.id).status == "SUCCEEDED"
    assert [n for _, n in fake.launched] == [first.id, second.id] and second.backend_id
    assert orch.refresh(orch.get(second.id)).status == "RUNNING"
    assert orch.refresh(orch.get(second.id)).status == "SUCCEEDED"
    history = [h["message"] for h in orch.core.store.history(second.id)]
    assert f"stage 1 ({first.id}) succeeded: launching" in history
    # Each stage was placed on its own, as its own job file would be.
    hours = [orch.get(r.id).decision.estimate.hours for r in (first, second)]
    assert hours[1] == pytest.approx(hours[0] / 3)  # 0.5 h of A100 work against 1.5 h


def test_a_failed_first_stage_leaves_the_second_never_started(orch):  # noqa: F811
    failed = {"status": "FAILED", "start_at": T0, "end_at": T0 + 60, "failure_reason": "exit 3",
              **WHERE}
    fake, (first, second) = _submit(orch, {})
    fake.scripts = {first.id: [failed]}
    second = orch.refresh(orch.get(second.id))
    assert orch.get(first.id).status == "FAILED"
    assert second.status == "CANCELLED" and second.backend_id is None
    assert second.message == f"not started: stage 1 ({first.id}) ended FAILED"
    assert [n for _, n in fake.launched] == [first.id]


def test_a_pipeline_with_a_stage_that_cannot_run_records_nothing(orch):  # noqa: F811
    from orchestrator.base.errors import InputError

    text = PIPELINE.replace("resources: {accelerators: H100:1}\nrun: python eval.py",
                            "resources: {accelerators: TPU-v9:1}\nrun: python eval.py")
    with pytest.raises(InputError, match="no place to run this job"):
        orch.submit_pipeline(load_pipeline_text(text, "bert.yaml"))
    assert not orch.core.store.list()


def test_plan_and_status_show_the_pipeline(orch, tmp_path, monkeypatch):  # noqa: F811
    from typer.testing import CliRunner

    from orchestrator.cli.commands import app
    from orchestrator.client import Local

    monkeypatch.setattr("orchestrator.client.connect", lambda **kw: Local(orch.settings, orch=orch))
    job = tmp_path / "bert.yaml"
    job.write_text(PIPELINE)
    r = CliRunner().invoke(app, ["plan", str(job), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["pipeline"] == "bert-qa" and [s["target"] for s in d["stages"]] == ["cloud", "cloud"]
    fake, (first, second) = _submit(orch, {})
    fake.scripts = {first.id: [{"status": "RUNNING", "start_at": T0, **WHERE}]}
    r = CliRunner().invoke(app, ["status"])
    assert r.exit_code == 0, r.output
    assert "bert-qa-2 [2/2]" in r.stdout and "train [1/2]" in r.stdout
    r = CliRunner().invoke(app, ["status", second.id])
    assert f"bert-qa: stage 2 of 2, after {first.id} succeeded" in r.stdout
