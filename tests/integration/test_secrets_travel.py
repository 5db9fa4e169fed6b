"""Secret values travel outside Ray's runtime env (issue 15): real jobs on the local Ray and
on the two-node loopback cluster, each proving it saw every value (as a sha256), then every
place a value could be left is searched, raw and base64: ORCH_HOME, Ray's session folders,
the Ray Jobs API, `orch status`, `orch logs`, and an `orch serve`'s REST API."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import secrets
import shutil
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_orch
from tests.integration.test_onprem import INVENTORY, orch

pytestmark = pytest.mark.integration

FIXTURE = ROOT / "tests" / "fixtures" / "secretjob"
NAMES = ("HF_TOKEN", "WANDB_API_KEY", "DB_PASSWORD")
RUN = """\
setup: test -n "$HF_TOKEN" && echo "setup sees HF_TOKEN"
run: |
  for n in HF_TOKEN WANDB_API_KEY DB_PASSWORD; do
    printf 'sha256 %s %s\\n' "$n" "$(printf %s "${!n}" | sha256sum | cut -d' ' -f1)"
  done
  echo "secret files left: $(ls -a | grep -c '^[.]orch-env-')"
"""
TRAIN = """\
workdir: work
train:
  entrypoint: envcheck:check
  config: {names: [HF_TOKEN, WANDB_API_KEY, DB_PASSWORD]}
scaling: {num_workers: 2, placement: PLACEMENT}
"""


def new_values() -> dict:
    return {"HF_TOKEN": "hf_" + secrets.token_hex(16), "WANDB_API_KEY": secrets.token_hex(20),
            "DB_PASSWORD": "pw-" + secrets.token_urlsafe(18)}


def sha(v: str) -> str:
    return hashlib.sha256(v.encode()).hexdigest()


def write_jobs(tmp_path: Path, values: dict, placement: str, extra: str = "") -> tuple[Path, Path]:
    """A `train:` job and a `run:` job, both with credential-like envs and a `secrets:` value
    read from the submitting shell (DB_PASSWORD: null)."""
    shutil.copytree(FIXTURE, tmp_path / "work")  # the file is written there while submitting
    head = (f"envs: {{HF_TOKEN: '{values['HF_TOKEN']}', WANDB_API_KEY: '{values['WANDB_API_KEY']}', "
            f"EPOCHS: 1}}\nsecrets: {{DB_PASSWORD: null}}\n{extra}")
    train, run = tmp_path / "train.yaml", tmp_path / "run.yaml"
    train.write_text(f"name: secret-train\n{head}{TRAIN.replace('PLACEMENT', placement)}")
    run.write_text(f"name: secret-run\n{head}{RUN}")
    return train, run


def check_saw_values(train_rec: dict, run_log: str, values: dict) -> set:
    """Each job saw each value: every train worker's sha256 of each (in rank 0's metrics)
    and the run job's output; no copy of the file was left where they ran. Returns the Ray
    node ids the train workers ran on."""
    want = {n: sha(v) for n, v in values.items()}
    assert train_rec["status"] == "SUCCEEDED", train_rec
    assert {n: train_rec["metrics"][f"sha256_{n}"] for n in NAMES} == want
    seen = train_rec["metrics"]["seen_by_rank"]
    assert [s["rank"] for s in seen] == [0, 1], seen
    for s in seen:
        assert s["sha256"] == want and s["files_left"] == [], s
    assert dict(re.findall(r"sha256 (\w+) ([0-9a-f]{64})", run_log)) == want, run_log
    assert "secret files left: 0" in run_log and "setup sees HF_TOKEN" in run_log
    return {s["node_id"] for s in seen}


def files_under(*roots) -> dict:
    out = {}
    for root in roots:
        root = Path(root)
        if not root.exists():
            continue
        for p in root.rglob("*"):
            try:
                if p.is_file() and not p.is_symlink():
                    out[str(p)] = p.read_bytes()
            except OSError:  # a socket, or a file Ray removed meanwhile
                continue
    return out


def http_get(url: str, headers: dict) -> bytes:
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


def ray_api(address: str, headers: dict) -> dict:
    """The Ray Jobs API's job list (runtime envs, entrypoints, metadata) and Ray Train's runs."""
    out = {"/api/jobs/": http_get(address + "/api/jobs/", headers)}
    try:
        out["/api/train/v2/runs"] = http_get(address + "/api/train/v2/runs", headers)
    except OSError:  # not in every Ray version
        pass
    return out


def served(home: Path, job_ids: list) -> dict:
    """What an `orch serve` on this home answers: the job list, each job and its log."""
    from tests.integration.test_serve import Server

    proc = run_orch(home, "token", "create", f"reader-{secrets.token_hex(3)}")
    assert proc.returncode == 0, proc.stderr
    headers = {"Authorization": f"Bearer {proc.stdout.strip()}"}
    server = Server(home)
    try:
        out = {"GET /v1/jobs": http_get(server.url + "/v1/jobs", headers)}
        for job_id in job_ids:
            out[f"GET /v1/jobs/{job_id}"] = http_get(f"{server.url}/v1/jobs/{job_id}", headers)
            out[f"GET /v1/jobs/{job_id}/logs"] = http_get(f"{server.url}/v1/jobs/{job_id}/logs", headers)
    finally:
        server.stop()
    out["serve log"] = server.log.read_bytes()
    return out


def leaks(values: dict, places: dict) -> list:
    """(where, name, form) for every place that holds a value, raw or base64."""
    forms = {}
    for name, v in values.items():
        raw = v.encode()
        forms[(name, "raw")] = raw
        forms[(name, "base64")] = base64.b64encode(raw)
        forms[(name, "base64url")] = base64.urlsafe_b64encode(raw).rstrip(b"=")
    return [(where, name, form) for where, blob in places.items()
            for (name, form), needle in forms.items() if needle in blob]


def runtime_env_logs(places: dict) -> list:
    """Ray's runtime-env agent logs among the places searched, that logged orch's jobs."""
    return [p for p, blob in places.items()
            if "runtime_env_agent" in p and b"ORCH_ENV_FILE" in blob]


def submit_and_show(cli, tmp_path: Path, values: dict, placement: str, extra: str = ""):
    """Both jobs submitted (waiting for each to end) through `cli(*args, **env)`; their
    records, their logs, and everything the CLI printed on the way."""
    outputs, recs, logs = {}, {}, {}
    for job in write_jobs(tmp_path, values, placement, extra):
        proc = cli("submit", str(job), "--json", DB_PASSWORD=values["DB_PASSWORD"])
        assert proc.returncode == 0, proc.stderr[-3000:]
        recs[job.stem] = json.loads(proc.stdout)
        outputs[f"orch submit {job.name}"] = (proc.stdout + proc.stderr).encode()
    for name, rec in recs.items():
        shown = cli("logs", rec["id"])
        assert shown.returncode == 0, shown.stderr
        logs[name] = shown.stdout
        outputs[f"orch logs {rec['id']}"] = (shown.stdout + shown.stderr).encode()
        outputs[f"orch status {rec['id']} --json"] = cli("status", rec["id"], "--json").stdout.encode()
    outputs["orch status --json"] = cli("status", "--json").stdout.encode()
    assert not list((tmp_path / "work").glob(".orch-env-*"))  # out of the workdir once submitted
    return recs, logs, outputs


def test_local_jobs_see_their_secrets_and_nothing_keeps_them(ray_home, tmp_path):
    values = new_values()
    recs, logs, outputs = submit_and_show(functools.partial(run_orch, ray_home), tmp_path,
                                          values, "pack")
    assert {r["target"] for r in recs.values()} == {"local"}
    check_saw_values(recs["train"], logs["run"], values)

    state = json.loads((ray_home / "local" / "ray.json").read_text())
    token = (ray_home / "local" / "auth_token").read_text().strip()
    places = {**files_under(ray_home, state["temp_dir"]), **outputs,
              **ray_api(state["dashboard_url"], {"Authorization": f"Bearer {token}"}),
              **served(ray_home, [r["id"] for r in recs.values()])}
    assert any("/session_" in p for p in places) and any(p.endswith("orch.db") for p in places)
    # Both jobs were started by orch itself (providers/process_jobs.py): their folders, with
    # their logs, environment file's place and records, were among the places searched.
    for rec in recs.values():
        assert any(f"/orch-jobs/{rec['id']}/" in p for p in places), rec["id"]
    assert leaks(values, places) == []


def test_on_prem_jobs_see_their_secrets_and_nothing_keeps_them(cluster, orch_home, tmp_path):
    (orch_home / "config.toml").write_text(INVENTORY)
    values = new_values()
    recs, logs, outputs = submit_and_show(functools.partial(orch, cluster, orch_home), tmp_path,
                                          values, "spread",
                                          "schedule: {kind: steady}\nplacement: {allow: [onprem]}\n")
    assert {r["target"] for r in recs.values()} == {"onprem"}
    nodes = check_saw_values(recs["train"], logs["run"], values)
    assert len(nodes) == 2, f"the workers were not on both nodes: {nodes}"

    token = cluster.token_file.read_text().strip()
    # With no checkpoint storage set, Ray Train keeps the run under ~/ray_results/<run name>.
    ray_results = Path.home() / "ray_results" / recs["train"]["id"]
    places = {**files_under(orch_home, cluster.root, ray_results),  # both nodes' Ray folders
              **outputs, **ray_api(cluster.address, {"Authorization": f"Bearer {token}"}),
              **served(orch_home, [r["id"] for r in recs.values()])}
    for node in (cluster.head_dir, cluster.node_dir):
        assert any(p.startswith(f"{node}/session_") for p in places), node
    assert runtime_env_logs(places), "no runtime_env_agent.log among the places searched"
    # The runner packs the job's folder again for its workers, without the file: no node but
    # the driver's unpacks the package that held it (there, the driver removed it).
    assert leaks(values, places) == []
