"""SkyPilot's part of a job file is judged by SkyPilot's own schemas: every key of its task
and resources schemas loads in orch in a form SkyPilot accepts, and reaches the SkyPilot task
orch would launch as SkyPilot itself reads it from the user's file."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest
import yaml

from orchestrator.base.errors import SpecError
from orchestrator.spec import load_spec_text, sky_schema
from tests.unit.cli.test_plan_cli import ROOT, env, invoke  # noqa: F401  (env: a fixture)

# One form SkyPilot accepts for each key of its resources schema. Keys orch decides for a
# cloud job from the offer it chose (what to rent, where, spot or not) are marked "placed":
# they must load and place, and the offer's values reach the task. The others must reach the
# task as SkyPilot reads them from the user's file.
RESOURCE_FORMS: dict[str, tuple[str, bool]] = {
    "accelerators": ("{A100-80GB: 1}", True),
    "cpus": ("'8+'", False),
    "memory": ("32GB+", False),
    "disk_size": ("1TB", False),
    "disk_tier": ("best", False),
    "network_tier": ("best", False),
    "use_spot": ("true", True),
    "cloud": ("runpod", True),
    "region": ("CA", True),
    "zone": ("CA-MTL-1", True),
    "infra": ("runpod", True),
    "instance_type": ("1x_A100-80GB_SECURE", True),
    "image_id": ("docker:pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", False),
    "accelerator_args": ("{runtime_version: tpu-vm-base}", False),
    "ports": ("[8080, '9000-9010']", False),
    "labels": ("{team: ml}", False),
    "autostop": ("{idle_minutes: 10, down: true}", False),
    "job_recovery": ("{strategy: FAILOVER, max_restarts_on_errors: 2}", False),
    "priority": ("10", False),
    "priority_class": ("high", False),
    "local_disk": ("nvme", False),
    "ephemeral_storage": ("100GB", False),
    "max_hourly_cost": ("50", False),
    "volumes": ("[{path: /mnt/data, name: data, disk_size: 100}]", False),
    "any_of": ("[{accelerators: A100-80GB}, {accelerators: RTX4090}]", True),
    "ordered": ("[{accelerators: A100-80GB}, {accelerators: RTX4090}]", True),
}
# SkyPilot's own bookkeeping keys, which it writes when it saves a task, not a user.
INTERNAL = {"_cluster_config_overrides", "_docker_login_config", "_is_image_managed",
            "_no_missing_accel_warnings", "_requires_fuse", "_metadata", "file_mounts_mapping",
            "volume_mounts"}

# One form for each of the task schema's keys beside resources (orch's tests of those keys'
# meaning are elsewhere); service and pool files are not jobs (test_spec).
TASK_FORMS: dict[str, str] = {
    "name": "tiny",
    "workdir": "{url: 'https://github.com/skypilot-org/skypilot.git', ref: master}",
    "num_nodes": "1",
    "envs": "{EPOCHS: 3}",
    "secrets": "[HF_TOKEN]",
    "file_mounts": "{/data: 's3://bucket/data'}",
    "setup": "pip list",
    "run": "python train.py",
    "config": "{kubernetes: {pod_config: {metadata: {labels: {a: b}}}}}",
    "inputs": "{'s3://bucket/data': 10}",
    "outputs": "{'s3://bucket/out': 1}",
    "volumes": "{/mnt/vol: my-volume}",
    "event_callback": "echo done",
    "managed_secrets": "[HF_TOKEN]",
    "api_server_access": "true",
}
NOT_JOBS = {"service", "pool"}


def test_the_forms_cover_every_key_of_skypilots_schemas():
    s = sky_schema.schemas()
    assert set(s["resources"]["properties"]) == set(RESOURCE_FORMS) | (INTERNAL & set(
        s["resources"]["properties"])), "a key SkyPilot added: give it a form here"
    assert set(s["task"]["properties"]) - {"resources"} == set(TASK_FORMS) | NOT_JOBS | (
        INTERNAL & set(s["task"]["properties"]))


def test_the_cached_schemas_are_skypilots_own(tmp_path, monkeypatch):
    from sky.utils import schemas

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    sky_schema.schemas.cache_clear()
    try:
        built = sky_schema.schemas()
        files = list((tmp_path / "orch").glob("skypilot-*-schemas.json"))
        assert len(files) == 1
        assert json.loads(files[0].read_text()) == built == json.loads(json.dumps(
            {"task": schemas.get_task_schema(), "resources": schemas.get_resources_schema()}))
        files[0].write_text("{not json")  # a damaged cache is built again
        sky_schema.schemas.cache_clear()
        assert sky_schema.schemas() == built
        assert json.loads(files[0].read_text()) == built
    finally:
        sky_schema.schemas.cache_clear()


def test_with_the_cache_warm_loading_a_job_file_imports_no_skypilot(tmp_path):
    code = ("import sys, time; t = time.monotonic()\n"
            "from orchestrator.spec import load_spec_text\n"
            "load_spec_text('run: echo\\nresources: {accelerators: H100, zone: a, priority: 3}\\n')\n"
            "print(any(m == 'sky' or m.startswith('sky.') for m in sys.modules), time.monotonic() - t)\n")
    child_env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    cold = subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, text=True, timeout=120)
    warm = subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, text=True, timeout=120)
    assert cold.returncode == 0 and warm.returncode == 0, cold.stderr + warm.stderr
    assert cold.stdout.split()[0] == "True" and warm.stdout.split()[0] == "False", (cold.stdout, warm.stdout)


def _sky_reads(doc: dict) -> dict:
    import sky

    return sky.Task.from_yaml_config(copy.deepcopy(doc)).to_yaml_config()


def _first(res: dict) -> dict:
    return (res.get("ordered") or res.get("any_of") or [res])[0] if "ordered" in res or "any_of" in res else res


@pytest.mark.parametrize("key", sorted(RESOURCE_FORMS))
def test_each_resources_key_loads_places_and_reaches_the_sky_task(env, key):  # noqa: F811
    value, placed = RESOURCE_FORMS[key]
    accel = "" if key in ("accelerators", "any_of", "ordered", "instance_type") else "  accelerators: A100-80GB\n"
    text = f"name: tiny\nrun: python train.py\nresources:\n{accel}  {key}: {value}\n"
    mine = {"name": "tiny", "run": "python train.py", "resources": yaml.safe_load(
        f"{accel}  {key}: {value}\n".replace("\n  ", "\n").strip() or "{}")}
    if key == "zone":
        mine["resources"]["region"] = "CA"
        text = text.replace("  zone:", "  region: CA\n  zone:")
    sky_view = _sky_reads(mine)  # SkyPilot accepts the form
    env.write_text(text)
    r = invoke("plan", str(env), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["target"] == "cloud", r.stdout
    if key == "instance_type":  # SkyPilot checks one against its catalog, which it downloads
        return
    r = invoke("plan", str(env), "--emit", "sky")
    assert r.exit_code == 0, r.output
    emitted = yaml.safe_load(r.stdout)
    again = _sky_reads(emitted)  # and what orch emits
    if not placed:  # as SkyPilot keeps it from the user's file (some it keeps for some clouds only)
        want = _first(sky_view["resources"]).get(key)
        got = _first(again["resources"]).get(key)
        if key == "image_id":  # SkyPilot keys an image by region: the offer's, or none
            want, got = set(want.values()), set(got.values())
        assert got == want, (emitted["resources"], want)
        if want is not None:
            assert key in _first(emitted["resources"])


@pytest.mark.parametrize("key", sorted(set(TASK_FORMS) - {"name", "run", "num_nodes"}))
def test_each_task_key_loads_and_reaches_the_sky_task(env, key, monkeypatch):  # noqa: F811
    commit = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setattr("orchestrator.service.git_workdir.resolve", lambda url, ref: commit)
    body = {"name": "tiny", "run": "python train.py",
            "resources": {"accelerators": "A100-80GB"}}
    body[key] = yaml.safe_load(TASK_FORMS[key])
    env.write_text(yaml.safe_dump(body))
    os.environ["HF_TOKEN"] = "hf-not-a-real-token"
    try:
        r = invoke("plan", str(env), "--emit", "sky")
    finally:
        del os.environ["HF_TOKEN"]
    assert r.exit_code == 0, r.output
    emitted = yaml.safe_load(r.stdout)
    if key in ("envs", "secrets", "file_mounts"):  # orch adds its own entries to these
        names = body[key] if isinstance(body[key], list) else list(body[key])
        assert set(names) <= set(emitted[key]), emitted[key]
        return
    if key == "setup":  # run before the job's command, in its run script
        assert body["setup"] in emitted["run"], emitted["run"]
        return
    again = _sky_reads(emitted)  # SkyPilot takes what orch emits
    if key == "workdir":  # the ref pinned to the commit it named when the job was checked
        assert emitted["workdir"] == again["workdir"] == {**body["workdir"], "ref": commit}
        return
    assert emitted[key] == body[key], emitted
    assert again.get(key) == _sky_reads(body).get(key)


@pytest.mark.parametrize("text, line, key, words", [
    ("run: echo\ntrian: {job: x}\n", 2, "trian", "did you mean 'train'"),
    ("run: echo\nresources:\n  acelerators: H100\n", 3, "resources.acelerators",
     "did you mean 'accelerators'"),
    ("run: echo\nresources:\n  any_of:\n    - {gpus: H100}\n", 4, "resources.any_of.0.gpus",
     "unknown key 'gpus'"),
    ("run: echo\nresources:\n  priority: 5000\n", 3, "resources.priority", "5000"),
    ("run: echo\nnum_nodes: two\n", 2, "num_nodes", None),
    ("run: echo\nresources:\n  gpus: H100\n  accelerators: A100\n", 3, "resources.gpus",
     "not both"),
    ("run: echo\nresources:\n  cpus: 4\n  gpus: [H100:1, 7]\n", 4, "resources.accelerators",
     "not an accelerator"),
    ("run: echo\nevent_callback: [1]\n", 2, "event_callback", "not of type 'string'"),
    ("run: echo\nresources:\n  _docker_login_config: {username: u, password: p, server: s}\n",
     3, "resources._docker_login_config", "SKYPILOT_DOCKER_PASSWORD"),
])
def test_what_skypilots_schemas_refuse_is_one_located_error(text, line, key, words):
    with pytest.raises(SpecError) as info:
        load_spec_text(text, "job.yaml")
    e = info.value
    assert (e.file, e.line, e.key) == ("job.yaml", line, key), str(e)
    if words:
        assert words in str(e) + (e.hint or ""), str(e)


def test_memory_and_disk_sizes_in_skypilots_units():
    spec = load_spec_text("run: echo\nresources: {memory: 512Mi, disk_size: 2TB, cpus: '4+'}\n")
    assert spec.resources.disk_size == 2048
    from orchestrator.spec.resources import quantity_min

    assert quantity_min(spec.resources.memory) == 0.5 and quantity_min(spec.resources.cpus) == 4
    assert spec.resources.for_cloud_vm()["memory"] == "512Mi"
    with pytest.raises(SpecError, match="memory size"):
        load_spec_text("run: echo\nresources: {memory: lots}\n", "job.yaml")


def test_skypilots_gpus_is_accelerators_at_the_top_of_resources():
    spec = load_spec_text("run: echo\nresources: {gpus: {H100: 2}, any_of: [{accelerators: A100}]}\n")
    assert spec.resources.accelerators == {"H100": 2.0}
    assert [v.accelerators for v in spec.resources.variants()] == ["A100"]


def test_skypilots_list_of_secret_names_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf-xyz")
    spec = load_spec_text("run: echo\nsecrets: [HF_TOKEN]\n")
    assert spec.secrets == {"HF_TOKEN": None}
    assert spec.secret_strings() == {"HF_TOKEN": "hf-xyz"}


def test_a_relative_workdir_is_the_job_files_folders_else_the_current_ones_as_in_skypilot(
        tmp_path, monkeypatch):
    from orchestrator.spec import load_spec

    (tmp_path / "examples" / "app").mkdir(parents=True)  # a SkyPilot repository's layout
    job = tmp_path / "examples" / "app.yaml"
    job.write_text("run: echo\nworkdir: ./examples/app\n")
    monkeypatch.chdir(tmp_path)  # where `sky launch examples/app.yaml` runs
    assert load_spec(job).workdir_path() == tmp_path / "examples" / "app"
    (tmp_path / "examples" / "examples" / "app").mkdir(parents=True)  # beside the file wins
    assert load_spec(job).workdir_path() == tmp_path / "examples" / "examples" / "app"
    monkeypatch.chdir(tmp_path / "examples")
    job.write_text("run: echo\nworkdir: ./nowhere\n")
    assert load_spec(job).workdir_path() == tmp_path / "examples" / "nowhere"  # named in errors


def test_max_hourly_cost_leaves_out_the_cloud_offers_skypilot_would_refuse(env):  # noqa: F811
    env.write_text("name: tiny\nrun: python train.py\nestimate: {hours: 1, gpu: RTX4090}\n"
                   "resources:\n  accelerators: {RTX4090: 1, A100-80GB: 1}\n"
                   "  max_hourly_cost: 1.0\n")
    r = invoke("plan", str(env), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["choice"] and d["choice"]["gpu"] == "RTX4090", (d["refusal"], [
        (a["gpu"], a["price_per_hour"], a["excluded"]) for a in d["alternatives"]])
    assert d["choice"]["price_per_hour"] <= 1.0
    over = [a for a in d["alternatives"] if a["target"] == "cloud" and a["price_per_hour"] > 1.0]
    assert len(over) == 2 and all("over the job's max_hourly_cost $1.00/h" in a["excluded"]
                                  for a in over), over
    r = invoke("plan", str(env), "--emit", "sky")
    assert r.exit_code == 0 and yaml.safe_load(r.stdout)["resources"]["max_hourly_cost"] == 1.0, r.output
