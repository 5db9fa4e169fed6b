"""Resuming an earlier job's run, S3 storage in the run description, and `orch artifacts`."""

from __future__ import annotations

import json
import time
from typing import Optional

import pytest

from jobs.request import RunRequest
from jobs.storage import display_path, storage_args
from orchestrator.base.errors import BackendError, NotFound, SpecError
from orchestrator.records import JobRow
from orchestrator.service.launch_spec import resume_point
from orchestrator.service.orch import Orch
from orchestrator.service.resume import ResumePoint
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from providers import artifacts as arts
from tests.conftest import orch_home, run_orch, store_at  # noqa: F401  (orch_home is a fixture)
from tests.moto_server import CREDENTIALS, moto_s3  # noqa: F401  (moto_s3 is a fixture)

TRAIN = "name: {name}\ntrain:\n  job: image-classification\n"


def _orch(tmp_path, **settings) -> Orch:
    return Orch(Settings(home=tmp_path / "home", mode="local", **settings))


def _spec(name="digits", resume=None, storage=None, file="job.yaml"):
    text = TRAIN.format(name=name)
    ckpt = {k: v for k, v in (("storage", storage), ("resume_from", resume)) if v}
    if ckpt:
        text += "checkpoint:\n" + "".join(f"  {k}: {v}\n" for k, v in ckpt.items())
    return load_spec_text(text, file)


def _ran(orch, name, storage="/ckpt", status="CANCELLED", run_name=None, ago=0.0) -> JobRow:
    """A job that ran: recorded, launched with a storage path, ended."""
    rec = orch.core.store.create_job(name=name, spec={}, kind="exploratory", target="local",
                                fingerprint="f")
    info = {"storage_path": storage} if storage else {}
    if run_name:
        info["run_name"] = run_name
    orch.core.store.update(rec.id, info=info, backend_id=rec.id,
                      created_at=time.time() - 100 + ago)
    if status != "PENDING":
        orch.core.store.set_status(rec.id, "RUNNING")
    if status not in ("PENDING", "RUNNING"):
        orch.core.store.set_status(rec.id, status)
    return orch.get(rec.id)


# -- resume_from resolution ---------------------------------------------------------------

def test_resume_from_a_job_id_and_a_unique_prefix(tmp_path):
    orch = _orch(tmp_path)
    a = _ran(orch, "digits", storage="s3://b/ckpt")
    _ran(orch, "other", storage="/elsewhere")
    for ref in (a.id, a.id[:9]):
        point = resume_point(orch.core, _spec(resume=ref))
        assert point == ResumePoint(job_id=a.id, run_name=a.id, storage_path="s3://b/ckpt")


def _id(point: Optional[ResumePoint]) -> Optional[str]:
    return point.job_id if point else None


def test_resume_latest_is_the_newest_earlier_job_of_the_name_with_storage(tmp_path):
    orch = _orch(tmp_path)
    _ran(orch, "digits", storage="/old", ago=1)
    newest = _ran(orch, "digits", storage="/new", ago=2)
    _ran(orch, "digits", storage=None, ago=3)  # a run: job or a failed launch: no checkpoints
    _ran(orch, "other", storage="/other", ago=4)  # another name
    assert _id(resume_point(orch.core, _spec(resume="latest"))) == newest.id


def test_a_resumed_run_keeps_its_first_jobs_run_name(tmp_path):
    orch = _orch(tmp_path)
    first = _ran(orch, "digits", ago=1)
    _ran(orch, "digits", run_name=first.id, ago=2)  # itself a resume of `first`
    point = resume_point(orch.core, _spec(resume="latest"))
    assert point is not None and point.run_name == first.id


def test_the_job_being_launched_and_later_jobs_are_never_resumed(tmp_path):
    orch = _orch(tmp_path)
    earlier = _ran(orch, "digits", ago=1)
    me = _ran(orch, "digits", status="PENDING", ago=2)
    _ran(orch, "digits", ago=3)  # submitted while `me` was launching
    assert _id(resume_point(orch.core, _spec(resume="latest"), before=me.id)) == earlier.id


@pytest.mark.parametrize("ref,problem", [
    ("orch-nope", "no job 'orch-nope'"),
    ("orch-", "'orch-' matches several jobs"),
    ("latest", "no earlier job named 'digits' kept checkpoints"),
])
def test_a_reference_to_no_single_job_is_a_located_spec_error(tmp_path, ref, problem):
    orch = _orch(tmp_path)
    _ran(orch, "other", ago=1)
    _ran(orch, "other", ago=2)
    with pytest.raises(SpecError) as e:
        resume_point(orch.core, _spec(resume=ref))
    assert e.value.key == "checkpoint.resume_from" and e.value.line == 5
    assert problem in e.value.problem and e.value.hint
    assert str(e.value).startswith("job.yaml:5: checkpoint.resume_from: ")


def test_a_running_job_or_another_storage_is_refused(tmp_path):
    orch = _orch(tmp_path)
    running = _ran(orch, "digits", status="RUNNING")
    with pytest.raises(SpecError, match="still RUNNING"):
        resume_point(orch.core, _spec(resume=running.id))
    done = _ran(orch, "digits", storage="s3://b/ckpt")
    with pytest.raises(SpecError, match="kept its checkpoints in s3://b/ckpt") as e:
        resume_point(orch.core, _spec(resume=done.id, storage="s3://b/other"))
    assert e.value.key == "checkpoint.resume_from"
    assert resume_point(orch.core, _spec(resume=done.id, storage="s3://b/ckpt/"))  # same place


def test_submit_refuses_an_unknown_resume_before_writing_anything(tmp_path):
    orch = _orch(tmp_path)
    with pytest.raises(SpecError, match="no earlier job named"):
        orch.submit(_spec(resume="latest"))
    assert not (tmp_path / "home" / "orch.db").exists()


# -- the run description -------------------------------------------------------------------

def test_run_description_carries_the_endpoint_and_run_name(tmp_path):
    orch = _orch(tmp_path, s3_endpoint_url="http://127.0.0.1:9000")
    launch = orch.launch_for("orch-new", _spec(storage="s3://b/ckpt"), "local")
    run = json.loads(launch.env["ORCH_RUN"])
    assert run["s3_endpoint_url"] == "http://127.0.0.1:9000"
    assert run["run_name"] == "orch-new" and run["storage_path"] == "s3://b/ckpt"
    assert launch.env["AWS_ENDPOINT_URL_S3"] == "http://127.0.0.1:9000"
    assert launch.tags.run_name == "orch-new"
    local = RunRequest.from_json(orch.launch_for("orch-loc", _spec(), "local").env["ORCH_RUN"])
    assert local.s3_endpoint_url is None  # a local path needs no endpoint


def test_a_resumed_job_runs_under_the_earlier_run_and_storage(tmp_path):
    orch = _orch(tmp_path)
    first = _ran(orch, "digits", storage="s3://b/ckpt")
    launch = orch.launch_for("orch-next", _spec(resume="latest"), "local")
    run = json.loads(launch.env["ORCH_RUN"])
    assert run["run_name"] == first.id and run["storage_path"] == "s3://b/ckpt"
    assert run["job_id"] == "orch-next" and "AWS_ENDPOINT_URL_S3" not in launch.env


def test_runner_storage_arguments(monkeypatch):
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_REGION", raising=False)
    assert storage_args("/ckpt", "http://x:1") == {"storage_path": "/ckpt"}
    assert storage_args("s3://b/p", None) == {"storage_path": "s3://b/p"}  # AWS: Ray's own URI
    args = storage_args("s3://b/p/", "http://127.0.0.1:9000")
    assert args["storage_path"] == "b/p"
    opts = args["storage_filesystem"].__reduce__()[1][0]
    assert (opts["endpoint_override"], opts["scheme"], opts["region"]) == \
        ("127.0.0.1:9000", "http", "eu-west-1")
    assert opts["access_key"] is None and opts["secret_key"] is None  # the chain, on each node
    assert display_path("b/p/run/checkpoint_1", args) == "s3://b/p/run/checkpoint_1"
    assert display_path("/ckpt/run", {"storage_path": "/ckpt"}) == "/ckpt/run"


# -- artifacts -----------------------------------------------------------------------------

def _local_run(tmp_path) -> str:
    run = tmp_path / "ckpt" / "orch-aaa"
    for d in ("checkpoint_2026-01-01_00-00-01.000000", "checkpoint_2026-01-01_00-00-02.000000"):
        (run / d).mkdir(parents=True)
        (run / d / "state.pt").write_bytes(b"x" * 100)
    (run / "checkpoint_manager_snapshot.json").write_text("{}")
    return str(tmp_path / "ckpt")


def test_artifacts_of_a_local_storage_path(tmp_path):
    location = arts.run_location("orch-aaa", _local_run(tmp_path), None)
    source = arts.open_location(location)
    items = source.list()
    assert [i.key for i in items][0] == "checkpoint_2026-01-01_00-00-01.000000/state.pt"
    assert len(items) == 3 and arts.checkpoint_dirs(items) == [
        "checkpoint_2026-01-01_00-00-01.000000", "checkpoint_2026-01-01_00-00-02.000000"]
    seen = []
    paths = arts.download(source, source.list("checkpoint_2026-01-01_00-00-02"),
                          tmp_path / "dl", lambda done, total, key: seen.append((done, total)))
    assert [p.relative_to(tmp_path / "dl").as_posix() for p in paths] == [
        "checkpoint_2026-01-01_00-00-02.000000/state.pt"]
    assert seen[-1] == (100, 100)


def test_artifacts_of_a_job_without_storage_says_why():
    with pytest.raises(Exception, match="recorded no checkpoint storage"):
        arts.run_location("orch-x", None, None)


def test_a_key_that_would_escape_the_download_folder_is_refused(tmp_path):
    with pytest.raises(BackendError, match="outside"):
        arts.download(None, [arts.Artifact("../evil", 1)], tmp_path)


def test_s3_errors_name_the_endpoint_and_never_the_credentials():
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    src = arts.S3Artifacts("s3://bkt/ckpt/orch-a", "http://127.0.0.1:9")
    denied = ClientError({"Error": {"Code": "InvalidAccessKeyId",
                                    "Message": "key AKIASECRET123 is not known"}}, "ListObjectsV2")
    e = src.error(denied)
    assert isinstance(e, BackendError) and "access denied" in e.message
    assert "AKIASECRET123" not in str(e) and "http://127.0.0.1:9" in e.message
    e = src.error(ClientError({"Error": {"Code": "NoSuchBucket"}}, "ListObjectsV2"))
    assert isinstance(e, NotFound) and "no bucket 'bkt'" in e.message
    e = src.error(EndpointConnectionError(endpoint_url="http://127.0.0.1:9"))
    assert "cannot reach S3 endpoint http://127.0.0.1:9" in e.message and e.hint
    assert "AWS_PROFILE" in src.error(NoCredentialsError()).hint


def test_orch_artifacts_cli_lists_a_local_run(orch_home, tmp_path):  # noqa: F811

    store = store_at(orch_home)
    rec = store.create_job(name="j", spec={}, kind="exploratory", target="local", fingerprint="f")
    store.update(rec.id, info={"storage_path": _local_run(tmp_path), "run_name": "orch-aaa"})
    store.close()
    proc = run_orch(orch_home, "artifacts", rec.id, "--json", "--download", str(tmp_path / "dl"))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert len(got["checkpoints"]) == 2 and got["total_bytes"] == 202
    assert (tmp_path / "dl" / "checkpoint_manager_snapshot.json").exists()
    proc = run_orch(orch_home, "artifacts", "orch-nothing")
    assert proc.returncode == 2 and "no job 'orch-nothing'" in proc.stderr


# -- artifacts on a real S3 protocol server (moto's; it starts in 3-6 s here) ----------------

@pytest.mark.integration
def test_artifacts_on_s3_list_and_download(moto_s3, tmp_path, monkeypatch):  # noqa: F811
    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    client = moto_s3.client()
    for key, body in (("ckpt/orch-s3/", b""),  # a folder marker, as pyarrow writes: not a file
                      ("ckpt/orch-s3/checkpoint_1/state.pt", b"a" * 10),
                      ("ckpt/orch-s3/checkpoint_2/state.pt", b"b" * 20),
                      ("ckpt/orch-s3b/checkpoint_1/state.pt", b"c")):  # another run: not listed
        client.put_object(Bucket=moto_s3.bucket, Key=key, Body=body)
    source = arts.open_location(f"s3://{moto_s3.bucket}/ckpt/orch-s3", moto_s3.endpoint)
    items = source.list()
    assert [(i.key, i.size) for i in items] == [("checkpoint_1/state.pt", 10),
                                                ("checkpoint_2/state.pt", 20)]
    arts.download(source, items, tmp_path)
    assert (tmp_path / "checkpoint_2" / "state.pt").read_bytes() == b"b" * 20
    with pytest.raises(NotFound, match="no bucket 'nope'"):
        arts.open_location("s3://nope/x", moto_s3.endpoint).list()


@pytest.mark.integration
def test_runner_filesystem_reaches_the_endpoint_with_the_env_credentials(moto_s3, monkeypatch):  # noqa: F811
    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    args = storage_args(f"s3://{moto_s3.bucket}/fs", moto_s3.endpoint)
    with args["storage_filesystem"].open_output_stream(args["storage_path"] + "/probe") as f:
        f.write(b"hello")
    assert moto_s3.keys("fs/") == {"fs/probe": 5}


def _checkpoint_dirs(fs, run_dir: str, names) -> None:
    for name in names:
        fs.create_dir(f"{run_dir}/{name}")
        with fs.open_output_stream(f"{run_dir}/{name}/state.pt") as f:
            f.write(b"x")


NAMES = ["checkpoint_2026-12-01_16-48-14.925715",  # left by a cancelled job, never registered
         "checkpoint_2026-12-01_16-48-51.199321", "checkpoint_2026-12-01_16-48-53.568439"]


def test_pruning_leaves_the_newest_checkpoints_and_the_results(tmp_path):
    import pyarrow.fs
    from ray.train import Checkpoint

    from jobs.storage import prune_checkpoints

    fs, run_dir = pyarrow.fs.LocalFileSystem(), str(tmp_path / "run")
    _checkpoint_dirs(fs, run_dir, NAMES)
    (tmp_path / "run" / "checkpoint_manager_snapshot.json").write_text("{}")  # not a checkpoint
    newest = Checkpoint(f"{run_dir}/{NAMES[-1]}", filesystem=fs)
    assert prune_checkpoints(newest, 2) == NAMES[:1]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        *NAMES[1:], "checkpoint_manager_snapshot.json"]
    assert prune_checkpoints(newest, 2) == []  # nothing more to do
    # The result's checkpoint stays even when it is not among the newest.
    oldest = Checkpoint(f"{run_dir}/{NAMES[1]}", filesystem=fs)
    assert prune_checkpoints(oldest, 1) == []
    assert prune_checkpoints(Checkpoint(f"{run_dir}/{NAMES[2]}", filesystem=fs), 1) == NAMES[1:2]


@pytest.mark.integration
def test_pruning_on_s3_deletes_the_stale_checkpoint_folders(moto_s3, monkeypatch):  # noqa: F811
    from ray.train import Checkpoint

    from jobs.storage import prune_checkpoints

    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    args = storage_args(f"s3://{moto_s3.bucket}/ckpt", moto_s3.endpoint)
    fs, run_dir = args["storage_filesystem"], args["storage_path"] + "/run"
    _checkpoint_dirs(fs, run_dir, NAMES)
    assert prune_checkpoints(Checkpoint(f"{run_dir}/{NAMES[-1]}", filesystem=fs), 2) == NAMES[:1]
    left = {k for k in moto_s3.keys("ckpt/run/") if not k.endswith("/")}  # pyarrow's markers
    assert left == {f"ckpt/run/{n}/state.pt" for n in NAMES[1:]}
