"""Secrets: passed to the job, stored and shown only redacted; logs 0600 and scrubbed."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
from concurrent.futures import ThreadPoolExecutor

import pytest

from orchestrator.base import redact
from orchestrator.base.errors import StoreError
from orchestrator.records import JobRecord
from orchestrator.records.placement import Placement
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from providers.cloud import task_yaml
from tests.conftest import job_row, run_orch, store_created, store_text
from tests.unit.providers.test_cloud import JOB, T0, orch, statuses, use_fake  # noqa: F401 (fixture)

TOKEN = "hf_Zq8pLr2mXv9sKt4wYb7n"
PASSWORD = "correct-horse-battery-staple"


def test_which_names_are_secret():
    for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "WANDB_API_KEY", "GITHUB_PAT_AUTH"):
        assert redact.looks_secret(name), name
    for name in ("EPOCHS", "MODEL_NAME", "DATA_DIR", "LR"):
        assert not redact.looks_secret(name), name


def test_a_later_reader_redacts_by_digest_alone(tmp_path):
    salt, key = redact.new_salt(), redact.store_key(tmp_path)
    known = redact.digests([TOKEN, "ab"], salt, key)  # too short to redact: left out
    assert len(known) == 1 and TOKEN not in "".join(known)
    text = f'loaded token={TOKEN}; again "{TOKEN}"\nepoch 1 ab done'
    out = redact.Redactor(salt=salt, known=known, key=key)(text)
    assert TOKEN not in out and out.count(redact.REDACTED) == 2 and "epoch 1 ab done" in out
    assert redact.Redactor([TOKEN])(text) == out
    # Without the store's key the digests recognize nothing: they are useless on their own.
    assert redact.Redactor(salt=salt, known=known, key=os.urandom(32))(text) == text
    assert redact.Redactor(salt=salt, known=known)(text) == text


FORMS = ("{v}", "token is {v}.", "https://h/cb?t={v}&a=1", "/p/{v}/x", "pw:{v}", '"{v}"',
         "KEY={v}\n", "({v})")


@pytest.mark.parametrize("value", [TOKEN, "c2VjcmV0LXZhbHVlLTEyMw==", "p@ss:w0rd-is-long",
                                   "a.b.c.d.e", "x&y=z/w"])
@pytest.mark.parametrize("with_heads", [False, True], ids=["lengths", "heads"])
def test_a_value_known_only_by_its_digest_is_found_in_any_context(tmp_path, value, with_heads):
    """Issue 32, finding 3: a value before '.', '&' or '/', or holding ':' or '=', was
    served whole by a reader that had only the record's digests (word-level matching).
    The same with the heads' tags a record keeps since issue 47 (a bounded search)."""
    salt, key = redact.new_salt(), redact.store_key(tmp_path)
    heads = redact.heads([value, PASSWORD], salt, key) if with_heads else ()
    later = redact.Redactor(salt=salt, known=redact.digests([value, PASSWORD], salt, key),
                            key=key, sizes=redact.lengths([value, PASSWORD]), heads=heads)
    for form in FORMS:
        text = "before " + form.format(v=value) + " after " + PASSWORD
        out = later(text)
        assert value not in out and PASSWORD not in out, (form, out)
        assert out == "before " + form.format(v=redact.REDACTED) + " after " + redact.REDACTED
    # Ordinary text around it is left as it was; a value glued to letters is only found
    # while it is held (said in Redactor's docstring).
    assert later("epoch 3 loss=0.25 https://example.org/a?b=c") == \
        "epoch 3 loss=0.25 https://example.org/a?b=c"
    assert redact.Redactor([value])("x" + value + "y") == f"x{redact.REDACTED}y"


def test_a_long_log_is_searched_by_digest_in_linear_time(tmp_path):
    salt, key = redact.new_salt(), redact.store_key(tmp_path)
    later = redact.Redactor(salt=salt, known=redact.digests([TOKEN], salt, key), key=key,
                            sizes=redact.lengths([TOKEN]))
    line = "epoch 12 step 400/500 loss=0.1234 lr=3e-4 samples/s=512.5 https://h/x?q=1\n"
    text = line * 20_000 + f"token={TOKEN}\n"  # 1.5 MB
    out = later(text)
    assert out.endswith(f"token={redact.REDACTED}\n") and out.count(redact.REDACTED) == 1


def test_digests_are_hmacs_under_the_stores_key_not_plain_sha256(tmp_path):
    salt, key = redact.new_salt(), redact.store_key(tmp_path)
    d = redact.digest(TOKEN, salt, key)
    assert d == hmac.new(key, f"{salt}:{TOKEN}".encode(), hashlib.sha256).hexdigest()
    assert d not in (hashlib.sha256(TOKEN.encode()).hexdigest(), redact.legacy_digest(TOKEN, salt))
    assert d != redact.digest(TOKEN, salt, redact.store_key(tmp_path / "other"))


def test_the_stores_key_is_one_0600_file_made_once(tmp_path):
    home = tmp_path / "home"
    assert redact.store_key(home, create=False) is None and not home.exists()
    with ThreadPoolExecutor(8) as pool:  # first uses at once agree on one key
        keys = set(pool.map(lambda _: redact.store_key(home), range(16)))
    path = home / redact.KEY_FILE
    assert len(keys) == 1 and keys == {path.read_bytes()} and len(path.read_bytes()) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in home.iterdir()] == [redact.KEY_FILE]  # no temporary left
    assert redact.store_key(home, create=False) == keys.pop()
    path.write_bytes(b"short")
    with pytest.raises(StoreError, match="not an orch secret key"):
        redact.store_key(home)


def test_a_record_from_before_the_key_is_still_redacted(tmp_path):
    """Older orch kept salted SHA-256 digests (secret_digests): a log read now still hides them."""
    from orchestrator.service.following import redactor
    from orchestrator.service.orch import Orch

    salt = redact.new_salt()
    rec = job_row({"id": "orch-old", "name": "old", "status": "SUCCEEDED",
                   "info": {"secret_salt": salt,
                            "secret_digests": [redact.legacy_digest(TOKEN, salt)]}})
    here = Orch(Settings(home=tmp_path / "home", mode="local"))
    assert redactor(here.core, rec)(f"token {TOKEN} ok\n") == f"token {redact.REDACTED} ok\n"
    assert not (tmp_path / "home" / redact.KEY_FILE).exists()  # reading makes no key


def test_cloud_job_secrets_never_reach_the_store_or_the_output(orch, monkeypatch):  # noqa: F811
    monkeypatch.setenv("DB_PASSWORD", PASSWORD)
    spec = load_spec_text(JOB.format(accel="H100:1") +
                          f"envs: {{HF_TOKEN: {TOKEN}, EPOCHS: 3}}\nsecrets: {{DB_PASSWORD: null}}\n",
                          "explore.yaml")
    logs = f"::orch::{json.dumps({'event': 'result', 'ok': True})}\nusing {TOKEN} and {PASSWORD}\n"
    fake = use_fake(orch, [{"status": "SUCCEEDED", "start_at": T0, "end_at": T0 + 60}], logs=logs)
    rec = orch.submit(spec).rec
    task = fake.launched[0][0]
    # The job gets every value; SkyPilot is told which are secrets.
    plain = {k: v.get_secret_value() if hasattr(v, "get_secret_value") else v
             for k, v in task.secrets.items()}
    # And its runner its event key (jobs/events.py), a secret like them.
    assert plain == {"HF_TOKEN": TOKEN, "DB_PASSWORD": PASSWORD, "ORCH_EVENT_KEY": rec.info.event_key}
    assert task.envs["EPOCHS"] == "3" and "HF_TOKEN" not in task.envs
    rec, _ = statuses(orch, rec, 1)
    assert rec.status == "SUCCEEDED"
    # The digests that redact a later log read are HMACs under this store's key.
    assert set(rec.info.secret_hmacs) == {
        redact.digest(v, rec.info.secret_salt, redact.store_key(orch.settings.home))
        for v in (TOKEN, PASSWORD)} and "secret_digests" not in rec.info.model_fields_set
    stored = rec.spec
    assert stored["envs"] == {"HF_TOKEN": redact.REDACTED, "EPOCHS": 3}
    assert stored["secrets"] == {"DB_PASSWORD": redact.REDACTED}
    orch.core.store.close()
    home = orch.settings.home
    stored = store_text(home)
    assert redact.REDACTED in stored and TOKEN not in stored and PASSWORD not in stored
    for path in home.glob("logs/*"):
        data = path.read_bytes()
        assert TOKEN.encode() not in data and PASSWORD.encode() not in data, path
    log = home / "logs" / f"{rec.id}.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert f"using {redact.REDACTED} and {redact.REDACTED}" in log.read_text()
    # A new process, without the values in memory, still shows the log redacted.
    monkeypatch.delenv("DB_PASSWORD")
    shown = run_orch(home, "logs", rec.id, ORCH_MODE="hybrid")
    assert shown.returncode == 0 and TOKEN not in shown.stdout and redact.REDACTED in shown.stdout
    status = run_orch(home, "status", rec.id, "--json", ORCH_MODE="hybrid").stdout
    assert TOKEN not in status and PASSWORD not in status
    for internal in ("secret_salt", "secret_hmacs", rec.info.secret_salt, "submitter"):
        assert internal not in status, internal
    assert TOKEN not in json.dumps(JobRecord.from_row(rec).to_json())


def test_emitted_sky_task_names_secrets_without_values(orch):  # noqa: F811
    spec = load_spec_text(JOB.format(accel="H100:1") + f"envs: {{HF_TOKEN: {TOKEN}}}\n", "e.yaml")
    choice = {"target": "cloud", "cloud": "runpod", "region": "US", "gpu": "H100", "count": 1,
              "spot": False, "instance_type": None, "price_per_hour": 2.0, "excluded": None}
    decision = Placement(choice=choice, alternatives=[choice])
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
