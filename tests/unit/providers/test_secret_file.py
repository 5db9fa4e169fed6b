"""Secrets on a Ray target travel in a 0600 file, never in the runtime env: the split, the
file, the step that reads and removes it, and what the Ray Jobs provider submits."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from jobs import secret_env
from orchestrator.service.orch import Orch
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from providers.base import JobTags, Launch, split_env
from providers.onprem import OnPremProvider
from providers.ray_jobs import RayJobsProvider, _Refused
from tests.conftest import ROOT

TOKEN, KEY, PASS = "hf_" + "q7" * 10, "wandb-" + "k3" * 12, "pw-" + "x9" * 8


def test_split_puts_secrets_and_credential_like_envs_apart():
    env = {"EPOCHS": "3", "HF_TOKEN": TOKEN, "WANDB_API_KEY": KEY, "ORCH_RUN": "{}",
           "ORCH_JOB_ID": "orch-1", "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}
    public, hidden = split_env(env, {"DB_PASSWORD": PASS, "PLAIN_NAME": "given-as-secret"})
    assert public == {"EPOCHS": "3", "ORCH_RUN": "{}", "ORCH_JOB_ID": "orch-1",
                      "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}
    assert hidden == {"HF_TOKEN": TOKEN, "WANDB_API_KEY": KEY, "DB_PASSWORD": PASS,
                      "PLAIN_NAME": "given-as-secret"}
    # A name under `secrets:` is secret even when `envs:` gives it too, whatever its name.
    public, hidden = split_env({"MODEL": "public"}, {"MODEL": "secret-model"})
    assert public == {} and hidden == {"MODEL": "secret-model"}
    # The file's own variable is not credential-like: it can stay in the runtime env.
    assert split_env({secret_env.FILE_VAR: ".x", secret_env.NAMES_VAR: "A"}, {})[1] == {}


def test_launch_for_a_local_job_keeps_the_values_out_of_its_command(tmp_path):
    orch = Orch(Settings(home=tmp_path / "home", mode="local"))
    spec = load_spec_text(f"run: echo hi\nenvs: {{HF_TOKEN: {TOKEN}, EPOCHS: 3}}\n"
                          f"secrets: {{DB_PASSWORD: {PASS}}}\n")
    launch = orch.launch_for("orch-abc", spec, "local")
    public, hidden = launch.split_env()
    assert hidden == {"HF_TOKEN": TOKEN, "DB_PASSWORD": PASS} and public["EPOCHS"] == "3"
    shown = launch.entrypoint + json.dumps(public) + json.dumps(launch.tags.as_strings())
    assert TOKEN not in shown and PASS not in shown


def test_file_round_trip_and_mode(tmp_path):
    values = {"HF_TOKEN": TOKEN, "ODD": "a\nb \"c\" = ü"}
    assert secret_env.loads(secret_env.dumps(values)) == values
    path = secret_env.write(tmp_path / ".orch-env-1", values)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert secret_env.loads(path.read_text()) == values
    with pytest.raises(FileExistsError):  # never writes through a file that is already there
        secret_env.write(path, values)
    for bad in ('{"env": {}}', '{"version": 2, "env": {}}', "[]", '{"version": 1, "env": []}'):
        with pytest.raises(ValueError):
            secret_env.loads(bad)


def test_take_reads_and_removes_the_file_once(tmp_path):
    secret_env.write(tmp_path / ".orch-env-2", {"HF_TOKEN": TOKEN})
    environ = {secret_env.FILE_VAR: ".orch-env-2"}
    assert secret_env.take({}, tmp_path) == {}  # no file named: nothing to take
    assert secret_env.take(environ, tmp_path) == {"HF_TOKEN": TOKEN}
    assert not (tmp_path / ".orch-env-2").exists()
    with pytest.raises(secret_env.MissingFile, match="not in the job's working_dir"):
        secret_env.take(environ, tmp_path)
    secret_env.write(tmp_path / ".orch-env-2", {"HF_TOKEN": TOKEN})
    assert secret_env.discard(environ, tmp_path) and not secret_env.discard(environ, tmp_path)


def test_child_env_names_the_values_and_drops_the_file_name():
    env = secret_env.child_env({"HF_TOKEN": TOKEN, "DB_PASSWORD": PASS},
                               {"PATH": "/bin", secret_env.FILE_VAR: ".orch-env-3"})
    assert secret_env.FILE_VAR not in env and env["PATH"] == "/bin"
    assert env[secret_env.NAMES_VAR] == "DB_PASSWORD,HF_TOKEN"
    assert secret_env.from_environ(env) == {"HF_TOKEN": TOKEN, "DB_PASSWORD": PASS}
    assert secret_env.from_environ({"PATH": "/bin"}) == {}


def test_hidden_prints_names_only_even_through_ray_trains_run_state():
    hidden = secret_env.Hidden({"HF_TOKEN": TOKEN, "WANDB_API_KEY": KEY})
    assert pickle.loads(pickle.dumps(hidden)).values == hidden.values  # crosses to the workers
    shown = repr(hidden) + str(hidden) + repr({"__orch__": {"env": hidden}})
    assert TOKEN not in shown and KEY not in shown and "HF_TOKEN" in shown
    schema = pytest.importorskip("ray.train.v2._internal.state.schema")
    stored = schema._to_json_serializable_value({"epochs": 1, "__orch__": {"env": hidden}})
    assert TOKEN not in json.dumps(stored) and "WANDB_API_KEY" in json.dumps(stored)


def _sha(v: str) -> str:
    return hashlib.sha256(v.encode()).hexdigest()


def test_the_step_execs_the_command_with_the_values_and_removes_the_file(tmp_path):
    secret_env.write(tmp_path / ".orch-env-4", {"HF_TOKEN": TOKEN, "DB_PASSWORD": PASS})
    show = ("import hashlib, os; print(sorted((k, hashlib.sha256(os.environ[k].encode()).hexdigest())"
            " for k in os.environ['ORCH_ENV_NAMES'].split(',')), 'ORCH_ENV_FILE' in os.environ)")
    env = {**os.environ, secret_env.FILE_VAR: ".orch-env-4", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "jobs.secret_env", "--", "bash", "-c",
                           f"{sys.executable} -c \"{show}\""], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(sorted([("DB_PASSWORD", _sha(PASS)), ("HF_TOKEN", _sha(TOKEN))])) + " False"
    assert TOKEN not in proc.stdout + proc.stderr
    assert not (tmp_path / ".orch-env-4").exists()
    # Started again (a retried entrypoint), the file is gone: the job fails saying why.
    proc = subprocess.run([sys.executable, "-m", "jobs.secret_env", "--", "true"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == secret_env.EXIT_NO_FILE
    result = json.loads(proc.stdout.split("::orch::", 1)[1])
    assert result["event"] == "result" and result["ok"] is False
    assert ".orch-env-4 is not in the job's working_dir" in result["error"]


class FakeJobs:
    """Ray's Jobs API as the provider reaches it: through Ray's client (`submit_job`, for a
    folder it packs) or as plain HTTP (`send`, the provider's `_send`: a package asked
    for, PUT, then the job POSTed). Keeps what it was given, and what the working_dir held."""

    def __init__(self):
        self.calls = []
        self.packages = {}

    def submit_job(self, entrypoint, submission_id, runtime_env, metadata):
        wd = runtime_env.get("working_dir")
        files = {}
        if wd:
            for p in Path(wd).iterdir():
                files[p.name] = (stat.S_IMODE(p.stat().st_mode), p.read_text())
        self.calls.append({"entrypoint": entrypoint, "runtime_env": runtime_env,
                           "metadata": metadata, "files": files})
        return submission_id

    def send(self, method, path, data, content_type, what):
        if method == "GET":  # does Ray hold this package? (the question pins it there)
            if "gcs://" + path.rsplit("/", 1)[-1] not in self.packages:
                raise _Refused(404, "Package does not exist")
            return None
        if method == "PUT":
            self.packages["gcs://" + path.rsplit("/", 1)[-1]] = data
            return None
        assert (method, path) == ("POST", "/api/jobs/")
        body = json.loads(data)
        files = {}
        wd = body["runtime_env"].get("working_dir")
        if wd:
            with zipfile.ZipFile(io.BytesIO(self.packages[wd])) as z:
                files = {i.filename: (stat.S_IMODE(i.external_attr >> 16), z.read(i).decode())
                         for i in z.infolist()}
        self.calls.append({**body, "files": files})
        return {"submission_id": body["submission_id"]}


def _provider():
    p = RayJobsProvider("local", "http://127.0.0.1:1")
    p._client = FakeJobs()
    p._send = p._client.send
    return p


def _launch(**kw):
    base = dict(job_id="orch-s", entrypoint="bash -c 'echo hi'",
                env={"EPOCHS": "3", "HF_TOKEN": TOKEN}, secrets={"DB_PASSWORD": PASS},
                tags=JobTags(orch_job="orch-s"))
    return Launch(**{**base, **kw})


def test_submit_without_a_workdir_ships_the_file_in_a_temporary_working_dir():
    p = _provider()
    assert p.submit(_launch()) == "orch-s"
    call = p._client.calls[0]
    renv = call["runtime_env"]
    shown = json.dumps(call, default=str).replace(json.dumps(call["files"]), "")
    assert TOKEN not in shown and PASS not in shown
    name = renv["env_vars"][secret_env.FILE_VAR]
    assert renv["env_vars"]["EPOCHS"] == "3" and "HF_TOKEN" not in renv["env_vars"]
    assert set(call["files"]) == {name} and call["files"][name][0] == 0o600
    assert secret_env.loads(call["files"][name][1]) == {"HF_TOKEN": TOKEN, "DB_PASSWORD": PASS}
    assert call["entrypoint"] == f"{sys.executable} -m _orch_runner.secret_env -- bash -c 'echo hi'"
    assert renv["working_dir"].startswith("gcs://_ray_pkg_")  # packed by orch, no Ray client


def test_submit_with_a_workdir_puts_the_file_there_for_the_upload_only(tmp_path):
    (tmp_path / "train.py").write_text("print(1)\n")
    p = _provider()
    p.submit(_launch(workdir=str(tmp_path)))
    call = p._client.calls[0]
    assert call["runtime_env"]["working_dir"].startswith("gcs://_ray_pkg_")
    name = call["runtime_env"]["env_vars"][secret_env.FILE_VAR]
    assert set(call["files"]) == {"train.py", name}
    assert sorted(x.name for x in tmp_path.iterdir()) == ["train.py"]


def test_submit_that_fails_still_removes_the_file(tmp_path):
    p = _provider()

    def refuse(*args):
        raise _Refused(500, "boom")

    p._send = refuse
    from orchestrator.base.errors import BackendError

    with pytest.raises(BackendError, match="rejected job orch-s"):
        p.submit(_launch(workdir=str(tmp_path)))
    assert list(tmp_path.iterdir()) == []


def test_submit_with_no_secret_is_as_before(tmp_path):
    p = _provider()
    p.submit(_launch(env={"EPOCHS": "3"}, secrets={}))
    call = p._client.calls[0]
    assert call["runtime_env"] == {"env_vars": {"EPOCHS": "3"}}
    assert call["entrypoint"] == "bash -c 'echo hi'"


def test_on_prem_runs_the_step_under_the_cluster_rays_python(tmp_path):
    token = tmp_path / "token"
    token.write_text("t0k")
    p = OnPremProvider("http://127.0.0.1:1", token)
    p._client = FakeJobs()
    p.submit(_launch())
    call = p._client.calls[0]
    assert call["runtime_env"]["py_modules"] and secret_env.FILE_VAR in call["runtime_env"]["env_vars"]
    assert call["entrypoint"].startswith("bash -c ") and "_raylet" in call["entrypoint"]
    assert "exec \"$orch_py\" -m _orch_runner.secret_env -- bash -c" in call["entrypoint"].replace("'\"'\"'", "'")
    assert TOKEN not in json.dumps({k: v for k, v in call.items() if k != "files"}, default=str)


def test_a_train_worker_sets_the_values_and_drops_its_nodes_copy(tmp_path, monkeypatch):
    import types

    import ray

    from jobs import context, runner
    from jobs.request import WorkerOptions

    seen = {}
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(secret_env.FILE_VAR, ".orch-env-5")
    monkeypatch.setenv("HF_TOKEN", "")  # restored (unset) after the test, whatever it sets
    monkeypatch.delenv("HF_TOKEN")
    secret_env.write(tmp_path / ".orch-env-5", {"HF_TOKEN": "stale"})  # this node's unpacked copy
    monkeypatch.setattr(context, "install", lambda options: seen.update(options=options) or
                        types.SimpleNamespace(rank=0, device=None))  # a CPU worker
    monkeypatch.setattr(ray, "get_runtime_context",
                        lambda: types.SimpleNamespace(get_node_id=lambda: "n1"))
    monkeypatch.setattr(runner, "imported", lambda target: lambda config: seen.update(
        env=os.environ.get("HF_TOKEN"), left=sorted(os.listdir("."))) or "done")
    options = WorkerOptions(job_id="orch-1", target="x:y", env=secret_env.Hidden({"HF_TOKEN": TOKEN}))
    config = {"epochs": 1, runner._OPTIONS_KEY: options}
    assert runner.worker_entry(config) == "done"
    assert seen["env"] == TOKEN and seen["left"] == []
    assert seen["options"].env is None  # orch's context never holds the values
