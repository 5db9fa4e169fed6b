"""`orch plan` and `orch config show` through typer, offline, with no Ray and no API server."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.base.errors import BackendError, InputError, SpecError
from orchestrator.cli.config_cmd import config_show
from orchestrator.cli.plan import plan
from providers.cloud import enabled_clouds as real_enabled_clouds
from tests.unit.offers.test_catalog import CATALOGS

ROOT = Path(__file__).resolve().parents[3]

app = typer.Typer()
app.command("plan")(plan)
app.command("config-show")(config_show)

JOB = """\
name: tiny
run: python train.py
resources: {accelerators: {RTX4090: 1, A100-80GB: 1}}
estimate: {hours: 1, gpu: RTX4090}
checkpoint: {storage: 's3://bucket/ckpt'}
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    for k in list(os.environ):
        if k.startswith("ORCH_"):
            monkeypatch.delenv(k)
    cat = tmp_path / "catalogs"
    for cloud, lines in CATALOGS.items():
        (cat / cloud).mkdir(parents=True)
        (cat / cloud / "vms.csv").write_text("\n".join(lines) + "\n")
    values = {"ORCH_HOME": str(tmp_path / "home"), "ORCH_CONFIG": str(tmp_path / "config.toml"),
              "ORCH_CLOUDS": "lambda,runpod", "ORCH_CATALOG_DIR": str(cat)}
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr("orchestrator.service.fingerprint.fingerprint", lambda spec: ("fp-tiny", True))
    monkeypatch.setattr("orchestrator.offers.local.detect_gpus", lambda: {})
    # Credentials for every configured cloud (SkyPilot's own check, the cloud's boundary);
    # test_a_plan_without_cloud_credentials_says_so_and_chooses_again has none.
    monkeypatch.setattr("providers.cloud.enabled_clouds", lambda clouds: (list(clouds), {}))

    def refuse(*a, **k):
        raise AssertionError("orch plan must not start processes or open connections")

    class NoPopen(subprocess.Popen):  # a class: some libraries subclass Popen on import
        def __init__(self, *a, **k):
            refuse()

    # Ray and SkyPilot's API server would both need one of these.
    monkeypatch.setattr(subprocess, "Popen", NoPopen)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    job = tmp_path / "tiny.yaml"
    job.write_text(JOB)
    return job


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=True)


def test_plan_json(env):
    r = invoke("plan", str(env), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["kind"] == "exploratory" and d["target"] == "cloud"
    assert d["choice"]["cloud"] == "runpod" and d["choice"]["gpu"] == "RTX4090" and d["choice"]["spot"]
    # On spot the hours include its expected preemptions: 0.05 an hour, each 15 min redone
    # and a 6-minute start-up again (issue 33: spot is priced by its expected cost).
    spot_h = 1 + 0.05 * (15 + 6) / 60
    assert d["estimate"]["currency"] == "USD" and d["estimate"]["hours"] == pytest.approx(spot_h)
    assert d["estimate"]["cost"] == pytest.approx(0.34 * (spot_h + 6 / 60))
    assert any("uncommitted changes" in x for x in d["reasons"])
    keys = {"target", "cloud", "region", "gpu", "count", "spot", "price_per_hour", "est_hours",
            "est_cost", "excluded"}
    assert d["alternatives"] and all(keys <= set(a) for a in d["alternatives"])
    costs = [a["est_cost"] for a in d["alternatives"]]
    assert costs == sorted(costs)
    assert {a["target"] for a in d["alternatives"]} == {"cloud"}  # no local GPU, no on-prem


def test_plan_table(env):
    r = invoke("plan", str(env))
    assert r.exit_code == 0, r.output
    shown = " ".join(r.stdout.split())  # reasons wrap at 100 columns
    for text in ("tiny", "exploratory", "new job", "runpod", "RTX4090 x1", "choice:", "full cost",
                 "0.38 USD to rent decided (marginal cost)",
                 "exploratory work rents the cheapest rentable GPU per job: runpod/US RTX4090x1 "
                 "spot at 0.38 USD to rent vs runpod/US RTX4090x1 0.76 USD"):
        assert text in shown, text


def test_plan_prices_owned_gpus_in_full_and_picks_them_when_cheaper(env):
    # Two owned RTX4090s: 4,000 USD over 3 years x 8766 h x 60 % busy, plus 2 x 450 W at
    # 0.15 USD/kWh: 0.127 + 0.0675 = 0.194 USD per GPU-hour, below runpod's spot 0.38 per job.
    (env.parent / "config.toml").write_text(
        '[[onprem]]\ngpu = "RTX4090"\ncount = 2\npurchase_price = 4000\nwatts = 450\n')
    d = json.loads(invoke("plan", str(env), "--json").stdout)
    assert (d["kind"], d["target"], d["decided_by"]) == ("exploratory", "onprem", "marginal")
    amortized = 4000 / (3 * 8766 * 0.6) / 2
    assert d["estimate"]["cost"] == pytest.approx(amortized + 0.0675)
    assert d["choice"]["marginal_cost"] == pytest.approx(0.0675)
    assert d["estimate"]["cash"] == pytest.approx(0.0675)
    assert ("exploratory backfill: on-prem RTX4090x1 is idle now and stays free for the job's 1 h "
            "(no work queued or due on it would be made late), so it runs there for 0.0675 USD of "
            "power, the marginal cost that decided, against runpod/US RTX4090x1 spot at 0.38 USD "
            "to rent") in d["reasons"]
    assert ("full cost for the record: 0.19 USD per job = 0.13 USD amortized purchase + 0.0675 USD "
            "power; the power decided, as it is what running the job changes in cash") in d["reasons"]
    table = invoke("plan", str(env)).stdout
    assert "0.0675 USD of power decided (marginal cost); 0.19 USD per job in full" in table


def test_plan_in_the_users_currency(env, monkeypatch):
    monkeypatch.setenv("ORCH_CURRENCY", "KRW")
    monkeypatch.setenv("ORCH_CURRENCY_RATE", "1400")
    d = json.loads(invoke("plan", str(env), "--json").stdout)
    assert d["estimate"]["currency"] == "KRW"
    assert d["estimate"]["cost"] == pytest.approx(d["estimate"]["cost_usd"] * 1400)
    assert "KRW" in invoke("plan", str(env)).stdout


def test_plan_refusal_says_what_to_change(env):
    env.write_text(JOB + "budget: {max_cost: 0.01}\n")
    r = invoke("plan", str(env), "--json")
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    assert d["target"] is None and d["choice"] is None
    assert "raise budget.max_cost to at least" in d["refusal"]
    assert "no placement" in invoke("plan", str(env)).stdout


def test_bad_job_file_propagates_as_spec_error(env):
    env.write_text("name: tiny\nrun: x\nresorces: {}\n")
    r = invoke("plan", str(env))
    assert isinstance(r.exception, SpecError) and "resorces" in str(r.exception)


def test_missing_catalog_propagates_as_backend_error(env, monkeypatch, tmp_path):
    monkeypatch.setenv("ORCH_CATALOG_DIR", str(tmp_path / "empty"))
    r = invoke("plan", str(env))
    assert isinstance(r.exception, BackendError) and "no catalog at" in str(r.exception)


def test_config_show(env):
    r = invoke("config-show", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)["settings"]
    assert s["clouds"] == {"value": ["lambda", "runpod"], "source": "env ORCH_CLOUDS"}
    assert s["max_wait_minutes"]["source"] == "default"
    table = invoke("config-show").stdout
    assert "env ORCH_CLOUDS" in table and "steady_min_runs" in table


def test_plan_imports_neither_ray_nor_torch(tmp_path):
    # A fresh interpreter: other tests may have imported ray into this one.
    code = textwrap.dedent(f"""
        import json, sys
        import typer
        from typer.testing import CliRunner
        import orchestrator.service.fingerprint, orchestrator.offers.local
        orchestrator.service.fingerprint.fingerprint = lambda spec: ("fp", False)
        orchestrator.offers.local.detect_gpus = lambda: {{}}
        from orchestrator.cli.plan import plan
        app = typer.Typer(); app.command()(plan)
        r = CliRunner().invoke(app, [{str(tmp_path / 'job.yaml')!r}, "--json"])
        assert r.exit_code == 0, r.output
        print(json.dumps([m for m in ("ray", "torch", "boto3") if m in sys.modules]))
    """)
    (tmp_path / "job.yaml").write_text("name: j\nrun: x\nestimate: {hours: 1}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update(ORCH_HOME=str(tmp_path), ORCH_CONFIG=str(tmp_path / "c.toml"), ORCH_MODE="local",
               PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_plan_of_a_steady_retrain_uses_idle_owned_gpus_at_their_power(env, monkeypatch):
    # The README's example: four A100s bought for 40,000 USD, idle; a nightly retrain of
    # 4 h. A rented H100 on spot (2.42 USD, with its expected preemptions) beats their full cost (2.78 USD), but what
    # running it there changes is 0.24 USD of power, and that decides. The H100 counts as
    # 3.17 A100s because the user says so (gpu_speeds); orch's own table, unmeasured, is shrunk.
    (env.parent / "config.toml").write_text(
        'gpu_speeds = { H100 = 1.0, A100 = 0.31547 }\n'
        '[[onprem]]\ngpu = "A100"\ncount = 4\npurchase_price = 40000\nwatts = 400\n')
    monkeypatch.setenv("ORCH_CATALOG_DIR", str(ROOT / "examples" / "catalog"))
    monkeypatch.setenv("ORCH_CLOUDS", "lambda,runpod,aws")
    job = str(ROOT / "examples" / "nightly.yaml")
    d = json.loads(invoke("plan", job, "--json").stdout)
    assert (d["kind"], d["target"]) == ("steady", "onprem")
    assert d["estimate"]["cash"] == pytest.approx(0.24) and d["estimate"]["cost"] == pytest.approx(2.78, abs=0.01)
    spot = next(a for a in d["alternatives"] if a["target"] == "cloud")
    assert spot["spot"] and spot["est_cost"] == pytest.approx(2.42, abs=0.01)
    assert spot["est_cost"] < d["estimate"]["cost"]
    text = invoke("plan", job).stdout
    for line in ("0.24 USD of power decided (marginal cost); 2.78 USD per job in full",
                 "steady work runs on owned GPUs: on-prem A100x1 can start now, 0.24 USD of "
                 "power, the marginal cost that decided, against runpod/US H100x1 spot at "
                 "2.42 USD to rent",
                 "full cost for the record: 2.78 USD per job = 2.54 USD amortized purchase + "
                 "0.24 USD power"):
        assert line in " ".join(text.split()), line



def test_a_plan_without_cloud_credentials_says_so_and_chooses_again(env, monkeypatch):
    """`orch plan` shows what `orch submit` would do: with no credentials for the cheapest
    cloud, the choice is made again without it, and the plan says why."""

    job = env.parent / "a100.yaml"
    job.write_text("name: a100\nrun: python train.py\nresources: {accelerators: {A100: 1, A100-80GB: 1}}\n"
                   "estimate: {hours: 1, gpu: A100}\ncheckpoint: {storage: 's3://bucket/ckpt'}\n")
    first = json.loads(invoke("plan", str(job), "--json").stdout)["choice"]["cloud"]
    others = [c for c in ("lambda", "runpod") if c != first]
    monkeypatch.setattr("providers.cloud.enabled_clouds",
                        lambda clouds: ([c for c in clouds if c != first], {first: "no API key"}))
    d = json.loads(invoke("plan", str(job), "--json").stdout)
    assert d["target"] == "cloud" and d["choice"]["cloud"] == others[0]
    assert d["warnings"] == [f"{first} has no credentials here ({first}: no API key); `sky check` "
                             "enables a cloud. Instead: " + others[0]]
    assert d["reasons"][0] == d["warnings"][0]
    # The cloud without credentials stays in the plan, priced, marked and excluded.
    rows = {c: [a for a in d["alternatives"] if a["cloud"] == c] for c in (first, *others)}
    assert rows[first] and all(a["credentials"] is False and a["price_per_hour"] > 0 and
                               f"no credentials here: `sky check {first}`" in a["excluded"]
                               for a in rows[first])
    assert rows[others[0]] and all(a["credentials"] is True for a in rows[others[0]])
    text = " ".join(invoke("plan", str(job)).stdout.split())
    assert f"- {d['warnings'][0]}" in text  # the reason the choice changed, under it


def test_a_plan_without_any_cloud_credentials_prices_every_cloud(env, monkeypatch, tmp_path):
    """SkyPilot's own credential check, in a home with none: `orch plan` still shows what
    each cloud would cost, each row marked, and then the refusal a submit would give."""
    home = tmp_path / "no-credentials"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ORCH_CLOUDS", "runpod,lambda")
    monkeypatch.setenv("ORCH_CATALOG_DIR", str(ROOT / "examples" / "catalog"))
    monkeypatch.setattr("providers.cloud.enabled_clouds", real_enabled_clouds)
    job = env.parent / "h100.yaml"
    job.write_text("name: h100\nrun: python train.py\nresources: {accelerators: H100:1}\n"
                   "estimate: {hours: 2, gpu: H100}\n")
    r = invoke("plan", str(job), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["target"] is None and d["choice"] is None
    assert "no configured cloud has credentials here" in d["refusal"]
    assert "`sky check lambda`" in d["refusal"]  # the cheapest one's credentials would place it
    # examples/catalog: H100 on lambda 2.49/h, on runpod 2.99/h and 1.75/h spot.
    rows = sorted((a["cloud"], a["spot"], a["price_per_hour"], a["credentials"])
                  for a in d["alternatives"])
    assert rows == [("lambda", False, 2.49, False), ("runpod", False, 2.99, False),
                    ("runpod", True, 1.75, False)]
    for a in d["alternatives"]:
        assert f"no credentials here: `sky check {a['cloud']}`" in a["excluded"]
        assert a["est_cost"] > a["price_per_hour"] * 2  # two hours and the start-up
    text = " ".join(invoke("plan", str(job)).stdout.split())
    for words in ("lambda us-east-1 │ H100 x1", "2.49 USD", "2.99 USD", "1.75 USD",
                  "no credentials here: `sky check lambda`",
                  "no placement: the cheapest place for this job is lambda"):
        assert words in text, words


def test_plan_takes_env_values_from_the_command_line_as_sky_launch_does(env, tmp_path, monkeypatch):
    # SkyPilot's habit: envs the file leaves empty are given with --env (or --env-file).
    env.write_text(JOB + "envs:\n  MODEL: null\n  LR: '0.1'\n")
    r = invoke("plan", str(env), "--json")
    e = r.exception
    assert isinstance(e, SpecError) and e.exit_code == 2 and e.key == "envs.MODEL", r.output
    assert "has no value" in e.message and "--env MODEL=VALUE" in e.hint
    dotenv = tmp_path / "run.env"
    dotenv.write_text("# the model\nexport MODEL='llama-3'\nLR=0.2\n")
    monkeypatch.setenv("WANDB_PROJECT", "exp")
    r = invoke("plan", str(env), "--env-file", str(dotenv), "--env", "LR=0.3",
               "--env", "WANDB_PROJECT", "--emit", "sky")
    assert r.exit_code == 0, r.output
    assert "MODEL: llama-3" in r.stdout and "LR: '0.3'" in r.stdout  # the file, then --env
    assert "WANDB_PROJECT: exp" in r.stdout  # --env KEY: this shell's value
    for args, words in ((["--env", "1X=2"], "not an environment variable name"),
                        (["--env", "NOT_SET_ANYWHERE"], "is not set in this shell"),
                        (["--env-file", str(tmp_path / "none.env")], "cannot read it")):
        r = invoke("plan", str(env), *args)
        assert isinstance(r.exception, InputError) and r.exception.exit_code == 2, r.output
        assert words in str(r.exception), r.exception
    dotenv.write_text("MODEL llama\n")
    r = invoke("plan", str(env), "--env-file", str(dotenv))
    assert isinstance(r.exception, InputError) and f"{dotenv}:1:" in str(r.exception)


def test_cloud_vm_keys_pin_the_job_to_the_cloud_and_reach_its_sky_task(env, monkeypatch):
    import copy

    import sky
    import yaml

    env.write_text(JOB.replace(
        "resources: {accelerators: {RTX4090: 1, A100-80GB: 1}}",
        "resources:\n  accelerators: {RTX4090: 1, A100-80GB: 1}\n"
        "  image_id: docker:pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime\n"
        "  disk_tier: best\n  ports: [8080, '9000-9010']\n  labels: {team: ml}\n"
        "  disk_size: 1TB"))
    r = invoke("plan", str(env), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["target"] == "cloud"
    local = [a for a in d["alternatives"] if a["target"] == "local"]
    assert all("resources.image_id asks for a VM image, which only a cloud VM has" == a["excluded"]
               for a in local), local
    r = invoke("plan", str(env), "--emit", "sky")
    assert r.exit_code == 0, r.output
    task = yaml.safe_load(r.stdout)
    again = sky.Task.from_yaml_config(copy.deepcopy(task)).to_yaml_config()  # SkyPilot takes it
    for cfg in (task, again):
        res = cfg["resources"]
        first = res["ordered"][0] if "ordered" in res else res
        image = first["image_id"]  # SkyPilot keys an image by the offer's region
        assert set(image.values() if isinstance(image, dict) else [image]) == {
            "docker:pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime"}
        assert first["disk_tier"] == "best" and first["labels"] == {"team": "ml"}
        assert first["disk_size"] == 1024
        assert [str(p) for p in first["ports"]] == ["8080", "9000-9010"]


def test_keys_for_a_vm_only_are_noted_when_the_job_runs_on_owned_hardware(env, monkeypatch):
    monkeypatch.setenv("ORCH_MODE", "local")
    env.write_text("name: tiny\nrun: python train.py\nresources:\n  ports: 8080\n"
                   "  autostop: 10\n")
    r = invoke("plan", str(env), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["target"] == "local"
    assert "resources.ports, resources.autostop: for a cloud VM; on local the job runs " \
           "without them" in d["warnings"]
    env.write_text("name: tiny\nrun: python train.py\nresources:\n  instance_type: p4d.24xlarge\n")
    r = invoke("plan", str(env), "--json")
    d = json.loads(r.stdout)
    assert d["choice"] is None and "resources.instance_type asks for an instance type" in str(d), d


def test_file_mounts_reach_the_sky_task_with_their_envs_filled_in(env):
    import copy

    import sky
    import yaml

    env.write_text(JOB + "envs: {BUCKET: null, SIZE: '7'}\n"
                   "file_mounts:\n  /model/llama-${SIZE}b: s3://$BUCKET/llama-${SIZE}b\n")
    r = invoke("plan", str(env), "--env", "BUCKET=weights", "--emit", "sky")
    assert r.exit_code == 0, r.output
    task = yaml.safe_load(r.stdout)
    assert task["file_mounts"]["/model/llama-7b"] == "s3://weights/llama-7b"
    assert not any("$" in k or "$" in str(v) for k, v in task["file_mounts"].items())
    again = sky.Task.from_yaml_config(copy.deepcopy(task)).to_yaml_config()  # SkyPilot takes it
    assert again["file_mounts"]["/model/llama-7b"] == "s3://weights/llama-7b"


def test_skypilots_task_keys_reach_the_sky_task_unchanged(env, monkeypatch):
    """config, inputs and outputs ride along (noted off the cloud); volumes pin the job to
    the cloud; each reaches the SkyPilot task as the file wrote it."""
    import copy

    import sky
    import yaml

    keys = ("config:\n  kubernetes: {pod_config: {metadata: {labels: {team: ml}}}}\n"
            "inputs: {'s3://bucket/data': 10}\noutputs: {'s3://bucket/out': 1}\n")
    env.write_text("name: tiny\nrun: python train.py\n" + keys)
    monkeypatch.setenv("ORCH_MODE", "local")
    r = invoke("plan", str(env), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["target"] == "local"
    assert any(w.startswith("config, inputs, outputs: for a cloud VM; on local the job runs "
                            "without them") for w in d["warnings"] + d["reasons"]), d
    monkeypatch.delenv("ORCH_MODE")
    env.write_text(JOB + keys + "volumes: {/mnt/data: my-volume}\n")
    r = invoke("plan", str(env), "--json")
    d = json.loads(r.stdout)
    assert d["target"] == "cloud", r.output
    assert all(a["excluded"] == "volumes asks for SkyPilot volumes, which only a cloud VM has"
               for a in d["alternatives"] if a["target"] != "cloud")
    r = invoke("plan", str(env), "--emit", "sky")
    assert r.exit_code == 0, r.output
    task = yaml.safe_load(r.stdout)
    pod = {"kubernetes": {"pod_config": {"metadata": {"labels": {"team": "ml"}}}}}
    assert task["config"] == pod and task["volumes"] == {"/mnt/data": "my-volume"}
    assert task["inputs"] == {"s3://bucket/data": 10} and task["outputs"] == {"s3://bucket/out": 1}
    again = sky.Task.from_yaml_config(copy.deepcopy(task))  # SkyPilot takes it, keys and all
    assert again.volumes == {"/mnt/data": "my-volume"}
    assert all(r.cluster_config_overrides == pod for r in again.resources)
    assert again.get_inputs() == "s3://bucket/data" and again.get_outputs() == "s3://bucket/out"


@pytest.mark.parametrize("resources, chosen, wanted", [
    # ordered: the first candidate that is offered, at a tie in cost only; here the cheaper
    # one is also the preferred one, then the dearer one first in the file.
    ("  ordered:\n    - {infra: runpod, accelerators: RTX4090}\n    - {infra: lambda, accelerators: A100}\n",
     ("runpod", "RTX4090"), [("runpod", "RTX4090"), ("lambda", "A100")]),
    ("  ordered:\n    - {infra: lambda, accelerators: A100}\n    - {infra: runpod, accelerators: RTX4090}\n",
     ("runpod", "RTX4090"), [("runpod", "RTX4090"), ("lambda", "A100")]),
    # any_of: the cheapest of the candidates (spot, the job being short and checkpointed);
    # (SkyPilot's gpus: alias holds at the top only: its candidates take accelerators.)
    ("  any_of:\n    - {accelerators: A100}\n    - {accelerators: A100-80GB}\n",
     ("runpod", "A100-80GB"),
     [("lambda", "A100"), ("runpod", "A100-80GB")]),
])
def test_any_of_and_ordered_place_each_candidate_and_reach_the_sky_task(env, resources, chosen,
                                                                        wanted):
    import copy

    import sky
    import yaml

    env.write_text(JOB.replace("resources: {accelerators: {RTX4090: 1, A100-80GB: 1}}\n",
                               "resources:\n" + resources).replace(", gpu: RTX4090", ""))
    r = invoke("plan", str(env), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["choice"]["cloud"], d["choice"]["gpu"]) == chosen, d["choice"]
    eligible = {(a["cloud"], a["gpu"]) for a in d["alternatives"] if a["excluded"] is None}
    assert eligible == set(wanted)  # every candidate, and nothing the file did not allow
    r = invoke("plan", str(env), "--emit", "sky")
    assert r.exit_code == 0, r.output
    task = yaml.safe_load(r.stdout)
    res = sky.Task.from_yaml_config(copy.deepcopy(task)).to_yaml_config()["resources"]
    offered = [(c.get("infra", "").split("/")[0], next(iter(c["accelerators"])))
               for c in res.get("ordered") or res.get("any_of") or [res]]
    assert offered[0] == chosen and set(offered) == set(wanted)


def test_a_plan_fits_100_columns_with_every_reason_whole(env, monkeypatch, tmp_path):
    """Issue 48: the plan took about 200 columns; at 100 the reasons column went and
    SkyPilot's credential hints were cut mid-sentence."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ORCH_CLOUDS", "runpod,lambda")
    monkeypatch.setenv("ORCH_CATALOG_DIR", str(ROOT / "examples" / "catalog"))
    monkeypatch.setattr("providers.cloud.enabled_clouds", real_enabled_clouds)
    job = env.parent / "many.yaml"
    job.write_text("name: many\nrun: python train.py\nresources: {accelerators: "
                   "{H100: 1, A100-80GB: 1, RTX4090: 1, A100: 1}}\nestimate: {hours: 2, gpu: H100}\n"
                   "budget: {max_hourly: 2.5}\n")
    d = json.loads(invoke("plan", str(job), "--all", "--json").stdout)
    reasons = {a["excluded"] for a in d["alternatives"] if a["excluded"]}
    assert len(reasons) >= 2 and any("sky check" in r for r in reasons)
    for columns in ("100", "300"):  # a terminal of 100 columns, and a wide one: 100 at most
        monkeypatch.setenv("COLUMNS", columns)
        r = invoke("plan", str(job), "--all")
        assert r.exit_code == 0, r.output
        lines = r.stdout.splitlines()
        assert max(len(line) for line in lines) <= 100, max(lines, key=len)
        shown = " ".join(r.stdout.split())
        at = lines.index("excluded:")
        end = next(i for i in range(at + 1, len(lines)) if not lines[i].startswith(" "))
        notes = re.split(r"\[(\d+)\] ", " ".join(" ".join(lines[at + 1:end]).split()))[1:]
        said = dict(zip((n.strip() for n in notes[1::2]), map(int, notes[0::2])))
        # Each said whole, once, under the table, numbered as the rows it excludes are marked.
        assert set(said) == {" ".join(r.split()) for r in reasons}, said
        assert f"[{len(said)}]" in lines[at - 1] or f"[{len(said)}]" in r.stdout
        # The whole credential hint, not its first line ("... go to:").
        assert "go to: https://cloud.lambdalabs.com/api-keys" in shown


def test_a_gpu_asked_for_by_memory_is_priced_on_every_model_that_has_it(env):
    """Issue 48: `accelerators: 24GB+` (dstack's `gpu: 24GB..`): any GPU with at least that
    much memory each, matched against the catalogs' models."""
    env.write_text("name: mem\nrun: python train.py\nresources: {accelerators: 40GB+}\n"
                   "estimate: {hours: 1}\ncheckpoint: {storage: 's3://bucket/ckpt'}\n")
    d = json.loads(invoke("plan", str(env), "--all", "--json").stdout)
    # lambda's A100 (40 GB) and runpod's A100-80GB qualify; runpod's RTX4090 (24 GB) does not.
    assert {a["gpu"] for a in d["alternatives"]} == {"A100", "A100-80GB"}, d["alternatives"]
    assert d["choice"]["gpu"] == "A100-80GB" and d["choice"]["spot"]  # runpod spot, 1.05/h
    assert d["choice"]["est_cost"] > 1.05
    env.write_text(env.read_text().replace("40GB+", "24GB+:1"))
    d = json.loads(invoke("plan", str(env), "--json").stdout)
    assert (d["choice"]["gpu"], d["choice"]["price_per_hour"]) == ("RTX4090", 0.34)
    env.write_text(env.read_text().replace("24GB+:1", "200GB+"))
    d = json.loads(invoke("plan", str(env), "--all", "--json").stdout)
    assert d["choice"] is None and "200GB+" in d["refusal"], d  # no GPU has 200 GB
