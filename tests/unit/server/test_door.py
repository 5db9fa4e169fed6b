"""Every bad job file is refused at every door alike: `orch submit`, `orch plan`, and the
REST API's submit and plan. One message naming the key (exit 2 / HTTP 400 {error, hint}),
no traceback, nothing recorded in the store."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from orchestrator.cli import main
from tests.conftest import ROOT, orch_env, serve_settings, store_at, store_created
from tests.unit.cli.test_cli_input import CASES as CLI_CASES
from tests.unit.spec.test_properties import CLI_SPECS
from tests.unit.spec.test_spec import BAD


@dataclass(frozen=True)
class Case:
    id: str
    doc: Optional[str]  # None: the path is special (see `path`), no text to send the API
    key: Optional[str]  # the key the message names; None: the file as a whole
    words: str
    path: Optional[str] = None  # "fifo", "dir", or an absolute path such as /dev/zero
    file: Optional[str] = None  # the job file's name when the words name it


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:40] or "x"


# The keys test_cli_input's cases are about (that table names only words).
_CLI_KEYS = {"unknown.yaml": "scalng", "type.yaml": "scaling.num_workers",
             "accel.yaml": "resources.accelerators", "zero.yaml": "scaling.num_workers",
             "entry.yaml": "train.entrypoint", "attr.yaml": "train.entrypoint",
             "notfn.yaml": "train.entrypoint", "wd.yaml": "workdir"}

NEW = [  # values whose meaning orch or a backend would otherwise find out only at run time
    Case("cron-minute", "run: echo\nschedule:\n  cron: '61 * * * *'\n", "schedule.cron",
         "the minute field '61' is not valid (0-59)"),
    Case("cron-hour", "run: echo\nschedule:\n  cron: '0 24 * * *'\n", "schedule.cron",
         "the hour field '24' is not valid (0-23)"),
    Case("cron-weekday", "run: echo\nschedule:\n  cron: '0 3 * * 8'\n", "schedule.cron",
         "weekday field '8'"),
    Case("cron-step", "run: echo\nschedule:\n  cron: '*/0 * * * *'\n", "schedule.cron",
         "five fields, minute hour day month weekday"),
    Case("cron-feb-31", "run: echo\nschedule:\n  cron: '0 0 31 2 *'\n", "schedule.cron",
         "never fires"),
    Case("cron-30-april", "run: echo\nschedule:\n  cron: '0 0 31 4,6 *'\n", "schedule.cron",
         "never fires"),
    Case("storage-gs", "train:\n  job: image-classification\ncheckpoint:\n  storage: gs://b/c\n",
         "checkpoint.storage", "not to gs://"),
    Case("storage-relative", "train:\n  job: image-classification\ncheckpoint:\n  storage: ckpt\n",
         "checkpoint.storage", "relative path"),
    Case("storage-bucket", "train:\n  job: image-classification\ncheckpoint:\n"
         "  storage: s3://My_Bucket/c\n", "checkpoint.storage", "not an S3 bucket name"),
    Case("storage-no-bucket", "train:\n  job: image-classification\ncheckpoint:\n"
         "  storage: 's3:///c'\n", "checkpoint.storage", "not an S3 bucket name"),
    Case("resume-run", "run: echo\ncheckpoint:\n  resume_from: latest\n",
         "checkpoint.resume_from", "no earlier job named"),
    Case("resume-typo", "train:\n  job: image-classification\ncheckpoint:\n  resume_from: lastest\n",
         "checkpoint.resume_from", "did you mean 'latest'"),
    Case("resume-none", "train:\n  job: image-classification\ncheckpoint:\n  resume_from: latest\n",
         "checkpoint.resume_from", "no earlier job named"),
    Case("mount-slash", "run: echo\nfile_mounts:\n  /data/: s3://b/d\n", "file_mounts./data/",
         "ends with '/'"),
    Case("mount-to-bucket", "run: echo\nfile_mounts:\n  's3://b/d': /tmp\n", "file_mounts.s3://b/d",
         "not a bucket"),
    Case("sweep-at-a-server", "run: echo\nsweep: {grid: {envs.A: [1, 2]}}\n", "sweep",
         "a sweep runs from `orch submit` without ORCH_SERVER"),
    Case("fifo", None, None, "is a FIFO (named pipe), not a job file", path="fifo"),
    Case("device", None, None, "is a character device, not a job file", path="/dev/zero"),
    Case("directory", None, None, "is a directory, not a job file", path="dir"),
]

TABLE = (
    [Case("cli-" + _slug(name), doc, _CLI_KEYS.get(name), words,
          path=None if doc is not None else "missing") for name, doc, words in CLI_CASES]
    + [Case(f"spec-{i}-{_slug(key or words)}", doc, key, words)
       for i, (doc, _line, key, words) in enumerate(BAD)]
    + [Case("prop-" + _slug(name), doc, None, words, file=name) for name, doc, words in CLI_SPECS]
    + NEW
)
IDS = [c.id for c in TABLE]
assert len(set(IDS)) == len(IDS)
# A pipeline (several YAML documents) is refused by the server, which takes one task a
# file; `orch submit` and `orch plan` without ORCH_SERVER run it (tests/unit/spec/test_pipeline.py).
# A sweep likewise: the embedded client expands it and places its runs together.
SERVER_ONLY = {c.id for c in TABLE if "YAML documents" in c.words} | {"sweep-at-a-server"}
assert SERVER_ONLY
CLI_TABLE = [c for c in TABLE if c.id not in SERVER_ONLY]


def _job_file(case: Case, tmp_path: Path) -> Path:
    """The job file on disk, beside the userjob fixture its workdir cases name."""
    (tmp_path / "userjob").symlink_to(ROOT / "tests" / "fixtures" / "userjob")
    if case.path == "fifo":
        path = tmp_path / "job.yaml"
        os.mkfifo(path)  # no writer: reading it would block orch for ever
    elif case.path == "dir":
        path = tmp_path / "job.yaml"
        path.mkdir()
    elif case.path == "missing":
        path = tmp_path / "missing.yaml"
    elif case.path is not None:
        path = Path(case.path)
    else:
        path = tmp_path / (case.file or f"{case.id}.yaml")
        path.write_text(case.doc)
    return path


def _words_in(text: str, case: Case) -> None:
    flat = " ".join(text.split())  # rich may wrap a long message
    assert " ".join(case.words.split()) in flat, text
    if case.key is not None:
        assert f"{case.key}: " in flat, text


# -- the CLI, in this process: `main()` is what `orch` runs -------------------------------------

@pytest.fixture
def run_cli(orch_home, monkeypatch, capsys):
    for k in [k for k in os.environ if k.startswith(("ORCH_", "RAY_"))]:
        monkeypatch.delenv(k)
    for k, v in orch_env(orch_home).items():
        if k.startswith("ORCH_") or k == "COLUMNS":
            monkeypatch.setenv(k, v)

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["orch", *args])
        with pytest.raises(SystemExit) as done:
            main()
        out = capsys.readouterr()
        return done.value.code, out.out, out.err

    return run


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["submit", "plan"])
@pytest.mark.parametrize("case", CLI_TABLE, ids=[c.id for c in CLI_TABLE])
def test_the_cli_refuses_it_with_one_message(run_cli, orch_home, tmp_path, case, command):
    path = _job_file(case, tmp_path)
    code, out, err = run_cli(command, *(["--detach"] if command == "submit" else []), str(path))
    assert code == 2, err
    assert "Traceback" not in out + err and out == ""
    lines = err.splitlines()
    assert lines[0].startswith(f"error: {path}") and sum(ln.startswith("error") for ln in lines) == 1, err
    _words_in(err, case)
    assert not store_created(orch_home), "bad input must not touch the store"


# -- the REST API, in this process ---------------------------------------------------------------

@pytest.fixture
def api(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from orchestrator.server.app import create_app
    from orchestrator.server.scheduler import Scheduler

    # The job files' folder and the userjob fixture they link to are on a filesystem the
    # server shares with its clients: the only place a client's job may name a workdir.
    settings, token = serve_settings(tmp_path, monkeypatch, serve_workdir_roots=[
        tmp_path, ROOT / "tests" / "fixtures"])
    with TestClient(create_app(settings, Scheduler(settings), run_scheduler=False)) as client:
        def post(path: str, body: dict):
            return client.post(path, json=body, headers={"Authorization": f"Bearer {token}"})
        post.home = settings.home
        yield post


@pytest.mark.parametrize("endpoint", ["/v1/jobs", "/v1/plan"])
@pytest.mark.parametrize("case", [c for c in TABLE if c.doc is not None],
                         ids=[c.id for c in TABLE if c.doc is not None])
def test_the_api_refuses_it_with_one_error_and_hint(api, tmp_path, case, endpoint):
    path = _job_file(case, tmp_path)
    r = api(endpoint, {"spec": case.doc, "file": str(path)})
    assert r.status_code == 400, r.text
    body = r.json()
    assert set(body) == {"error", "hint"} and "Traceback" not in r.text
    assert body["error"].startswith(str(path)), body
    _words_in(f"{body['error']} {body['hint'] or ''}", case)
    store = store_at(api.home)
    try:
        assert store.list(limit=10) == [] and store.schedules() == [], "nothing may be recorded"
    finally:
        store.close()


# -- settings files and values, at the same doors -----------------------------------------------

SETTINGS = [  # (what ORCH_CONFIG is, or a setting's TOML, words)
    ("fifo", "is a FIFO (named pipe), not a settings file"),
    ("dir", "is a directory, not a settings file"),
    ("cloud_storage = '/mnt/ckpt'\n", "cloud_storage: '/mnt/ckpt' is a path on this machine"),
    ("cloud_storage = 'gs://b/c'\n", "cloud_storage: 'gs://b/c': orch writes checkpoints to s3://"),
    ("onprem_checkpoint_storage = 'ckpt'\n", "onprem_checkpoint_storage: 'ckpt' is a relative path"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["submit", "plan"])
@pytest.mark.parametrize("config,words", SETTINGS, ids=["fifo", "dir", "cloud-local", "cloud-gs",
                                                        "onprem-relative"])
def test_bad_settings_are_refused_at_once(run_cli, orch_home, monkeypatch, config, words, command):
    cfg = orch_home / "config.toml"
    if config == "fifo":
        os.mkfifo(cfg)
    elif config == "dir":
        cfg.mkdir()
    else:
        cfg.write_text(config)
    code, out, err = run_cli(command, str(ROOT / "examples" / "quickstart.yaml"))
    assert code == 2 and "Traceback" not in out + err, err
    assert err.startswith(f"error: {cfg}") and words in " ".join(err.split()), err
    assert not store_created(orch_home)


def test_dev_null_is_no_settings_file(run_cli, monkeypatch):
    monkeypatch.setenv("ORCH_CONFIG", os.devnull)
    code, out, err = run_cli("config", "show")
    assert code == 0, err


@pytest.mark.parametrize("value", ["/mnt/ckpt", "~/ckpt", "s3://bucket/prefix", "s3://b"])
def test_good_storage_is_accepted(value):
    from orchestrator.spec import load_spec_text

    spec = load_spec_text(f"train:\n  job: image-classification\ncheckpoint:\n  storage: '{value}'\n")
    assert spec.checkpoint.storage == value
