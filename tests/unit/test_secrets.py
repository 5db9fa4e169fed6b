"""Secrets: passed to the job, stored and shown only redacted; logs 0600 and scrubbed."""

from __future__ import annotations

import json
import stat


from orchestrator import redact
from orchestrator.store import public
from orchestrator.spec import load_spec_text
from providers.cloud import task_yaml
from tests.conftest import run_orch, store_created, store_text
from tests.unit.test_cloud import JOB, T0, orch, statuses, use_fake  # noqa: F401 (fixture)

TOKEN = "hf_Zq8pLr2mXv9sKt4wYb7n"
PASSWORD = "correct-horse-battery-staple"


def test_which_names_are_secret():
    for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "WANDB_API_KEY", "GITHUB_PAT_AUTH"):
        assert redact.looks_secret(name), name
    for name in ("EPOCHS", "MODEL_NAME", "DATA_DIR", "LR"):
        assert not redact.looks_secret(name), name


def test_a_later_reader_redacts_by_digest_alone():
    salt = redact.new_salt()
    known = redact.digests([TOKEN, "ab"], salt)  # too short to redact: left out
    assert len(known) == 1 and TOKEN not in "".join(known)
    text = f'loaded token={TOKEN}; again "{TOKEN}"\nepoch 1 ab done'
    out = redact.redact_text(text, salt=salt, known=known)
    assert TOKEN not in out and out.count(redact.REDACTED) == 2 and "epoch 1 ab done" in out
    assert redact.redact_text(text, values=[TOKEN]) == out


def test_cloud_job_secrets_never_reach_the_store_or_the_output(orch, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DB_PASSWORD", PASSWORD)
    spec = load_spec_text(JOB.format(accel="H100:1") +
                          f"envs: {{HF_TOKEN: {TOKEN}, EPOCHS: 3}}\nsecrets: {{DB_PASSWORD: null}}\n",
                          "explore.yaml")
    logs = f"::orch::{json.dumps({'event': 'result', 'ok': True})}\nusing {TOKEN} and {PASSWORD}\n"
    fake = use_fake(orch, [{"status": "SUCCEEDED", "start_at": T0, "end_at": T0 + 60}], logs=logs)
    rec = orch.submit(spec)
    task = fake.launched[0][0]
    # The job gets every value; SkyPilot is told which are secrets.
    plain = {k: getattr(v, "get_secret_value", lambda: v)() for k, v in task.secrets.items()}
    assert plain == {"HF_TOKEN": TOKEN, "DB_PASSWORD": PASSWORD}
    assert task.envs["EPOCHS"] == "3" and "HF_TOKEN" not in task.envs
    rec, _ = statuses(orch, rec, 1)
    assert rec["status"] == "SUCCEEDED"
    stored = rec["spec"]
    assert stored["envs"] == {"HF_TOKEN": redact.REDACTED, "EPOCHS": 3}
    assert stored["secrets"] == {"DB_PASSWORD": redact.REDACTED}
    orch.store.close()
    home = orch.settings.home
    stored = store_text(home)
    assert redact.REDACTED in stored and TOKEN not in stored and PASSWORD not in stored
    for path in home.glob("logs/*"):
        data = path.read_bytes()
        assert TOKEN.encode() not in data and PASSWORD.encode() not in data, path
    log = home / "logs" / f"{rec['id']}.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert f"using {redact.REDACTED} and {redact.REDACTED}" in log.read_text()
    # A new process, without the values in memory, still shows the log redacted.
    monkeypatch.delenv("DB_PASSWORD")
    shown = run_orch(home, "logs", rec["id"], ORCH_MODE="hybrid")
    assert shown.returncode == 0 and TOKEN not in shown.stdout and redact.REDACTED in shown.stdout
    status = run_orch(home, "status", rec["id"], "--json", ORCH_MODE="hybrid").stdout
    assert TOKEN not in status and PASSWORD not in status
    assert TOKEN not in json.dumps(public(rec))


def test_emitted_sky_task_names_secrets_without_values(orch):  # noqa: F811
    spec = load_spec_text(JOB.format(accel="H100:1") + f"envs: {{HF_TOKEN: {TOKEN}}}\n", "e.yaml")
    choice = {"target": "cloud", "cloud": "runpod", "region": "US", "gpu": "H100", "count": 1,
              "spot": False, "instance_type": None, "price_per_hour": 2.0, "excluded": None}
    decision = {"choice": choice, "alternatives": [choice]}
    launch = orch.for_cloud(orch.launch_for("orch-x", spec, "cloud", decision), spec, decision)
    config = task_yaml(launch)
    assert config["secrets"] == {"HF_TOKEN": None} and TOKEN not in json.dumps(config, default=str)


def test_a_secret_without_a_value_is_a_job_file_error(tmp_path):
    home = tmp_path / "home"
    job = tmp_path / "job.yaml"
    job.write_text("name: s\nrun: echo hi\nsecrets:\n  NOT_SET_ANYWHERE: null\n")
    proc = run_orch(home, "submit", str(job))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{job}:4: secrets.NOT_SET_ANYWHERE: no value" in proc.stderr
    assert "export NOT_SET_ANYWHERE" in proc.stderr
    assert not store_created(home)
