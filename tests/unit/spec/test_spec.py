"""The job file loader: SkyPilot compatibility, orch's keys, and located errors."""

from __future__ import annotations

import pytest

from orchestrator.base.errors import SpecError
from orchestrator.spec import load_spec, load_spec_text

SKYPILOT_TASK = """\
name: sky-task
workdir: .
num_nodes: 1
resources:
  accelerators: {H100: 1, A100-80GB: 1}
  cpus: 8+
  memory: 32+
  use_spot: true
  disk_size: 256
envs:
  LR: 0.01
  DEBUG: true
file_mounts:
  /data: s3://bucket/data
setup: |
  pip install -r requirements.txt
run: |
  python train.py --lr $LR
"""


def test_skypilot_task_loads_unchanged():
    spec = load_spec_text(SKYPILOT_TASK, "sky.yaml")
    assert spec.name == "sky-task"
    assert [str(c) for c in spec.resources.accelerator_choices()] == ["H100:1", "A100-80GB:1"]
    assert not spec.resources.accelerators_ordered
    assert spec.resources.use_spot and spec.resources.disk_size == 256
    assert spec.env_strings() == {"LR": "0.01", "DEBUG": "true"}
    assert spec.run.startswith("python train.py") and spec.train is None


@pytest.mark.parametrize("value,expected,ordered", [
    ("H100:8", ["H100:8"], False),
    ("A10G", ["A10G:1"], False),
    ("{H100: 1, A100-80GB: 2}", ["H100:1", "A100-80GB:2"], False),
    ("[H100:1, A100:1]", ["H100:1", "A100:1"], True),
])
def test_accelerator_forms(value, expected, ordered):
    spec = load_spec_text(f"resources:\n  accelerators: {value}\nrun: echo hi\n")
    assert [str(c) for c in spec.resources.accelerator_choices()] == expected
    assert spec.resources.accelerators_ordered is ordered


def test_orch_keys_and_defaults():
    spec = load_spec_text("""\
train:
  job: image-classification
  config: {epochs: 2}
  sweep: [lr]
scaling: {num_workers: 2, use_gpu: false}
precision: bf16
data: {loader_workers: 4, pin_memory: auto}
schedule: {kind: steady, cron: "0 3 * * *"}
budget: {max_cost: 12.5, max_hourly: 3}
placement: {allow: [local, cloud]}
checkpoint: {storage: "s3://bucket/ckpt", max_failures: 2}
utilization_policy: {min_utilization: 10, window_minutes: 30, action: stop}
""", "j.yaml")
    assert spec.name == "j"
    assert spec.train.job == "image-classification" and spec.train.config == {"epochs": 2}
    assert spec.scaling.num_workers == 2 and spec.scaling.use_gpu is False
    assert spec.data.loader_workers == 4 and spec.data.pin_memory == "auto"
    assert spec.schedule.cron == "0 3 * * *" and spec.budget.max_cost == 12.5
    assert spec.placement.allow == ["local", "cloud"]
    assert spec.checkpoint.max_failures == 2
    assert (spec.utilization_policy.min_utilization, spec.utilization_policy.window_minutes,
            spec.utilization_policy.action) == (10, 30, "stop")

    plain = load_spec_text("train:\n  job: image-classification\n")
    assert plain.scaling.num_workers == 1 and plain.precision == "auto"
    assert plain.placement.allow == ["local", "onprem", "cloud"]
    assert plain.utilization_policy is None


BAD = [
    # (document, line, key, words in the message)
    ("train:\n  job: image-classification\nscaling:\n  num_workers: 0\n", 4, "scaling.num_workers", "greater than 0"),
    ("train:\n  job: image-classification\nscaling:\n  num_workers: -3\n", 4, "scaling.num_workers", "greater than 0"),
    ("train:\n  job: image-classification\nscaling:\n  num_workers: two\n", 4, "scaling.num_workers", "integer"),
    ("train:\n  job: image-classification\nscalng:\n  num_workers: 2\n", 3, "scalng", "did you mean 'scaling'"),
    ("train:\n  job: image-classification\n  epochs: 3\n", 3, "train.epochs", "unknown key"),
    ("resources:\n  accelerators: H100:x\nrun: echo\n", 2, "resources.accelerators", "NAME:COUNT"),
    ("resources:\n  accelerators: 'H100:0'\nrun: echo\n", 2, "resources.accelerators", "positive"),
    ("resources:\n  accelerators: [H100:1, 7]\nrun: echo\n", 2, "resources.accelerators", "not an accelerator"),
    ("resources:\n  cpus: lots\nrun: echo\n", 2, "resources.cpus", "CPU count"),
    ("run: echo\nprecision: fp8\n", 2, "precision", "fp32"),
    ("run: echo\nscaling:\n  use_gpu: maybe\n", 3, "scaling.use_gpu", "auto, true or false"),
    ("run: echo\ndata:\n  loader_workers: -1\n", 3, "data.loader_workers", "auto or a whole number"),
    ("run: echo\nschedule:\n  cron: every day\n", 3, "schedule.cron", "five fields"),
    ("run: echo\nplacement:\n  allow: [local, moon]\n", 3, "placement.allow.1", "local"),
    ("run: echo\nplacement:\n  allow: []\n", 3, "placement.allow", "at least one"),
    ("run: echo\nbudget:\n  max_cost: -5\n", 3, "budget.max_cost", "greater than 0"),
    ("train:\n  job: image-classification\nutilization_policy:\n  min_utilization: 120\n  window_minutes: 5\n",
     4, "utilization_policy.min_utilization", "less than or equal to 100"),
    ("train:\n  job: image-classification\nutilization_policy:\n  min_utilization: 10\n  window_minutes: 5\n"
     "  action: kill\n", 6, "utilization_policy.action", "'warn' or 'stop'"),
    ("train:\n  job: image-classification\nutilization_policy: {min_utilization: 10}\n", 3,
     "utilization_policy.window_minutes", "this key is required"),
    ("run: sleep 600\nutilization_policy: {min_utilization: 10, window_minutes: 5}\n", None, None,
     "utilization_policy needs 'train:'"),
    ("train:\n  job: nope\n", 2, "train.job", "built-in jobs: image-classification"),
    ("train:\n  entrypoint: not a path\n", 2, "train.entrypoint", "package.module:function"),
    ("train:\n  config: {}\n", 1, "train", "exactly one of 'job'"),
    ("name: x\n", None, None, "nothing to run: give 'train:'"),
    ("run: echo\ntrain:\n  job: image-classification\n", None, None, "not both"),
    ("run: echo\nrun: echo again\n", 2, "run", "appears twice"),
    ("run: [echo\n", 2, None, "YAML syntax error"),
    ("- just\n- a list\n", 1, None, "must be a mapping"),
    ("", None, None, "empty"),
    ("name: 'bad name!'\nrun: echo\n", 1, "name", "letters, digits"),
    ("run: echo\nenvs:\n  1BAD: x\n", 2, "envs", "environment variable name"),
    # SkyPilot files that are not one task to run: what to use instead.
    ("service:\n  readiness_probe: /\n  replicas: 2\nrun: python -m http.server 8080\n", 1,
     "service", "a SkyPilot service: orch runs training"),
    ("name: p\npool:\n  workers: 2\nsetup: pip install vllm\n", 2, "pool",
     "`sky jobs pool apply -p NAME"),
    ("name: a\nrun: echo a\n---\nname: b\nrun: echo b\n---\nname: c\nrun: echo c\n", 3, None,
     "holds 3 YAML documents (a SkyPilot pipeline"),
]


@pytest.mark.parametrize("doc,line,key,words", BAD)
def test_bad_input_is_located(doc, line, key, words):
    with pytest.raises(SpecError) as info:
        load_spec_text(doc, "job.yaml")
    e = info.value
    assert e.file == "job.yaml"
    assert words in str(e), str(e)
    if line is not None:
        assert e.line == line, str(e)
    if key is not None:
        assert e.key == key, str(e)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "missing.yaml")
    with pytest.raises(SpecError, match="directory"):
        load_spec(tmp_path)


def test_workdir_is_relative_to_the_job_file(tmp_path):
    (tmp_path / "code").mkdir()
    f = tmp_path / "job.yaml"
    f.write_text("workdir: code\nrun: echo\n")
    assert load_spec(f).workdir_path() == (tmp_path / "code").resolve()


def test_skypilots_set_form_of_accelerators_keeps_every_choice():
    # SkyPilot's examples/multi_accelerators.yaml: an unordered set, T4:1 and T4:4 both in it.
    spec = load_spec_text("resources:\n  accelerators: {'A100-40GB:1', 'T4:1', 'T4:4'}\n"
                          "run: echo\n", "job.yaml")
    assert spec.resources.accelerators == {"A100-40GB:1": None, "T4:1": None, "T4:4": None}
    assert [(c.name, c.count) for c in spec.resources.accelerator_choices()] == [
        ("A100-40GB", 1), ("T4", 1), ("T4", 4)]
    assert not spec.resources.accelerators_ordered
    named = load_spec_text("resources:\n  accelerators: {H100: null, A100: 2}\nrun: echo\n", "j.yaml")
    assert [(c.name, c.count) for c in named.resources.accelerator_choices()] == [
        ("H100", 1), ("A100", 2)]


def test_skypilots_vm_keys_load_and_unknown_ones_still_do_not():
    spec = load_spec_text("resources:\n  instance_type: p4d.24xlarge\n  image_id: {us-east-1: ami-1}\n"
                          "  disk_tier: high\n  network_tier: best\n  ports: 8080\n"
                          "  labels: {a: b}\n  autostop: {idle_minutes: 10}\n"
                          "  job_recovery: none\n  accelerator_args: {runtime_version: v2}\n"
                          "  disk_size: 256GB\nrun: echo\n", "job.yaml")
    r = spec.resources
    assert r.cloud_only() == ("instance_type", "image_id", "disk_tier", "network_tier",
                              "accelerator_args")
    assert r.carried() == ("ports", "labels", "autostop", "job_recovery")
    assert r.disk_size == 256 and r.for_cloud_vm()["image_id"] == {"us-east-1": "ami-1"}
    for doc, words in (("resources:\n  disk_tier: fastest\nrun: echo\n", "'low'"),
                       ("resources:\n  disk_size: lots\nrun: echo\n", "256GB or 1TB"),
                       ("resources:\n  disk_sise: 10\nrun: echo\n", "did you mean 'disk_size'")):
        with pytest.raises(SpecError, match=words):
            load_spec_text(doc, "job.yaml")


def test_envs_are_filled_into_file_mounts_and_workdir_as_skypilot_does(tmp_path):
    from orchestrator.spec import Overrides

    text = ("envs: {BUCKET: weights, SIZE: 13, DIR: code}\n"
            "workdir: ./${DIR}\n"
            "file_mounts:\n"
            "  /model/llama-${SIZE}b: s3://$BUCKET/llama-${SIZE}b\n"
            "  /out:\n    name: ${BUCKET}-out\n    source: ['~/$NOT_AN_ENV']\n    mode: MOUNT\n"
            "run: python train.py --size $SIZE\n")
    (tmp_path / "code").mkdir()
    (tmp_path / "job.yaml").write_text(text)
    spec = load_spec(tmp_path / "job.yaml")
    assert spec.file_mounts == {"/model/llama-13b": "s3://weights/llama-13b",
                                "/out": {"name": "weights-out", "source": ["~/$NOT_AN_ENV"],
                                         "mode": "MOUNT"}}
    assert spec.workdir == "./code" and spec.workdir_path() == (tmp_path / "code").resolve()
    assert spec.run == "python train.py --size $SIZE"  # the shell fills run and setup in
    # --env over the file's value, before the substitution, as with `sky launch --env`.
    given = Overrides(envs={"SIZE": "70"})
    assert list(load_spec(tmp_path / "job.yaml", given).file_mounts)[0] == "/model/llama-70b"


def test_a_secret_with_a_value_in_file_mounts_is_refused_at_its_key():
    from orchestrator.spec import Overrides

    text = "secrets: {HF_TOKEN: %s}\nfile_mounts:\n  /w: s3://$HF_TOKEN/x\nrun: echo\n"
    for value, given in (("hf_Zq8pLr2mXv9sKt4w", None), ("null", Overrides(secrets={"HF_TOKEN": "v"}))):
        with pytest.raises(SpecError) as e:
            load_spec_text(text % value, "job.yaml", given)
        assert (e.value.line, e.value.key) == (3, "file_mounts./w")
        assert "secret HF_TOKEN" in e.value.message and "envs.HF_TOKEN" in e.value.hint
    # A null one, as SkyPilot leaves it (its value is not known when the file is read).
    assert load_spec_text(text % "null", "job.yaml").file_mounts == {"/w": "s3://$HF_TOKEN/x"}


@pytest.mark.parametrize("resources", ["1", "'text'", "[1, 2]", "true"])
def test_resources_that_are_not_a_mapping_are_a_located_error_not_a_crash(resources):
    """Issue 32: `resources: 1` raised a TypeError (HTTP 500 from `orch serve`)."""
    with pytest.raises(SpecError) as e:
        load_spec_text(f"resources: {resources}\nrun: echo\n", "job.yaml")
    assert e.value.key.startswith("resources") and "job.yaml:1" in str(e.value)
