"""What a job sent to `orch serve` may ask of the server (orchestrator.server.client_policy),
as tables: a spec, the request and the settings in; allowed, or the one message out. No
server, no store: a folder tree under tmp_path stands for the server's disk."""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import pytest

from orchestrator.base.errors import InputError, SpecError
from orchestrator.base.inputs import clip
from orchestrator.server import client_policy
from orchestrator.server.intake import check_server_secrets
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text


@pytest.fixture
def disk(tmp_path):
    """root/ (the admin's serve_workdir_roots entry) with code/ and jobs/; outside/ with a
    secret folder and a folder beside a job file; root/escape, a link from the root to outside."""
    tmp = Path(os.path.realpath(tmp_path))
    for d in ("root/code", "root/jobs", "outside/logs", "outside/code"):
        (tmp / d).mkdir(parents=True)
    (tmp / "outside" / "logs" / "alice.log").write_text("alice's log\n")
    (tmp / "root" / "escape").symlink_to(tmp / "outside" / "logs")
    return tmp


def settings_for(disk: Optional[Path], secrets: Optional[dict] = None) -> Settings:
    return Settings(home=Path("/nonexistent/home"), mode="local", serve_local_trusted=True,
                    serve_workdir_roots=[disk / "root"] if disk else [],
                    serve_env_secrets=secrets or {})


def body(file: Optional[str] = None, upload: Optional[str] = None, **kw) -> SimpleNamespace:
    return SimpleNamespace(file=file, upload=upload, env=kw.get("env", {}),
                           secrets=kw.get("secrets", {}), idempotency_key=kw.get("key"))


def verdict(text: str, disk: Optional[Path], req: SimpleNamespace, user: Optional[str] = "bob",
            secrets: Optional[dict] = None) -> Optional[str]:
    """None when allowed, else the message and hint, with the tmp folder written as TMP."""
    spec = load_spec_text(text, req.file or "<job>")
    try:
        client_policy.check(spec, req, user, settings_for(disk, secrets))
    except InputError as e:
        out = f"{e.message} | {e.hint}"
        return out.replace(str(disk), "TMP") if disk else out
    return None


RUN = "run: echo hi\n"
JOB_IN_ROOT = "{tmp}/root/jobs/job.yaml"
JOB_OUTSIDE = "{tmp}/outside/job.yaml"
REFUSED_WORKDIR = "is a folder on the server, which a job sent to orch serve may not name"

# (id, job file text, request file, upload?, what: None allowed, else words of the message)
WORKDIRS = [
    ("absolute-in-root", "workdir: {tmp}/root/code\n", None, False, None),
    ("absolute-in-root-missing", "workdir: {tmp}/root/nothere\n", None, False, None),
    ("relative-beside-file-in-root", "workdir: ../code\n", JOB_IN_ROOT, False, None),
    ("absolute-outside", "workdir: {tmp}/outside/logs\n", None, False, REFUSED_WORKDIR),
    ("absolute-outside-missing", "workdir: {tmp}/outside/nothere\n", None, False, REFUSED_WORKDIR),
    ("dot-dot-out-of-root", "workdir: {tmp}/root/../outside/logs\n", None, False, REFUSED_WORKDIR),
    ("relative-climbing-out", "workdir: ../../outside/logs\n", JOB_IN_ROOT, False, REFUSED_WORKDIR),
    ("relative-file-outside-root", "workdir: code\n", JOB_OUTSIDE, False, REFUSED_WORKDIR),
    ("relative-no-file", "workdir: code\n", None, False, REFUSED_WORKDIR),
    ("symlink-escaping-root", "workdir: {tmp}/root/escape\n", None, False, REFUSED_WORKDIR),
    ("relative-symlink-escaping", "workdir: ../escape\n", JOB_IN_ROOT, False, REFUSED_WORKDIR),
    ("home", "workdir: ~/code\n", None, False, REFUSED_WORKDIR),
    ("relative-missing-in-root", "workdir: ../nothere\n", JOB_IN_ROOT, False,
     "workdir: '../nothere' is not a directory beside the job file"),
    # With an upload the workdir becomes the upload: what it said on the client is no server path.
    ("upload-replaces-outside", "workdir: {tmp}/outside/logs\n", None, True, None),
    ("upload-replaces-relative", "workdir: ../../code\n", JOB_OUTSIDE, True, None),
    ("git-url-is-not-a-folder", "workdir: {{url: 'https://github.com/org/repo.git'}}\n", None, False, None),
    ("no-workdir-file-outside", "", JOB_OUTSIDE, False, None),
]


@pytest.mark.parametrize("case", WORKDIRS, ids=[c[0] for c in WORKDIRS])
def test_a_workdir_is_a_server_folder_only_inside_a_root(disk, case):
    _, text, file, upload, words = case
    req = body(file.format(tmp=disk) if file else None, "a" * 64 if upload else None)
    got = verdict(text.format(tmp=disk) + RUN, disk, req)
    if words is None:
        assert got is None
    else:
        assert got is not None and words in got, got
        assert "outside/logs" not in got.replace("'TMP/outside/logs'", "").replace(
            "'TMP/root/../outside/logs'", "").replace("'../../outside/logs'", ""), got
        if words == REFUSED_WORKDIR:
            assert "send the workdir as an upload" in got and "git repository" in got \
                and "serve_workdir_roots" in got


def test_the_refusal_is_the_same_whether_the_server_path_exists(disk):
    """Only the path the client wrote differs: nothing tells an existing folder, a missing
    one, a file or a link's target apart."""
    def message(path: str) -> str:
        got = verdict(f"workdir: {path}\n" + RUN, disk, body())
        assert got is not None
        return got.replace(clip(path).replace(str(disk), "TMP"), "PATH")

    paths = [f"{disk}/outside/logs", f"{disk}/outside/nothere", f"{disk}/outside/logs/alice.log",
             f"{disk}/root/escape", "/etc", "/no/such/place"]
    assert len({message(p) for p in paths}) == 1
    # Roots none at all (the default): the same refusal for a folder that is there.
    spec = load_spec_text(f"workdir: {disk}/root/code\n" + RUN)
    with pytest.raises(InputError, match=REFUSED_WORKDIR):
        client_policy.check(spec, body(), "bob", settings_for(None))


MOUNTS = [
    ("s3", "{/data: 's3://bucket/data'}", None),
    ("gs-file", "{/x: 'gs://b/train-00001'}", None),
    ("r2", "{/x: 'r2://b/x'}", None),
    ("https", "{/x: 'https://example.com/data.tar'}", None),
    ("storage-bucket-only", "{/out: {name: my-out, mode: MOUNT}}", None),
    ("storage-s3-source", "{/in: {source: 's3://b/in', mode: COPY}}", None),
    ("local-in-root", "{/code: '{tmp}/root/code'}", None),
    ("local-absolute", "{/logs: '{tmp}/outside/logs'}", "file_mounts./logs: "),
    ("local-home", "{~/.ssh/id_rsa: ~/.ssh/id_rsa}", "file_mounts.~/.ssh/id_rsa: '~/.ssh/id_rsa' is a path"),
    ("local-relative", "{/in: ./outside}", "file_mounts./in: './outside' is a path on the server"),
    ("file-url", "{/in: 'file:///etc'}", "file_mounts./in: 'file:///etc' is a path on the server"),
    ("link-escaping-root", "{/in: '{tmp}/root/escape'}", "file_mounts./in: "),
    ("storage-local-source", "{/d: {name: b, source: '{tmp}/outside/logs', mode: COPY}}",
     "file_mounts./d.source: "),
    ("storage-source-list", "{/d: {name: b, source: ['s3://b/x', /etc]}}",
     "file_mounts./d.source: '/etc' is a path on the server"),
]


@pytest.mark.parametrize("case", MOUNTS, ids=[c[0] for c in MOUNTS])
def test_a_file_mount_source_is_a_bucket_or_inside_a_root(disk, case):
    _, mounts, words = case
    got = verdict(f"file_mounts: {mounts.replace('{tmp}', str(disk))}\n" + RUN, disk, body())
    if words is None:
        assert got is None
    else:
        assert got is not None and words in got, got
        assert "which a job sent to orch serve may not read" in got and "s3://" in got, got


CHECKPOINTS = [
    ("s3", "s3://bucket/ckpt", None),
    ("in-root", "{tmp}/root/ckpt", None),
    # (the path is clipped in the message past a length, as a long tmp folder may be)
    ("server-path", "{tmp}/outside/ckpt", "is a path on the server"),
    ("server-home", "~/ckpt", "checkpoint.storage: '~/ckpt' is a path on the server"),
    ("link-escaping-root", "{tmp}/root/escape/ckpt", "checkpoint.storage: "),
]


@pytest.mark.parametrize("case", CHECKPOINTS, ids=[c[0] for c in CHECKPOINTS])
def test_checkpoint_storage_is_a_bucket_or_inside_a_root(disk, case):
    _, storage, words = case
    text = (f"train: {{job: image-classification}}\ncheckpoint: {{storage: "
            f"'{storage.format(tmp=disk)}'}}\n")
    got = verdict(text, disk, body())
    if words is None:
        assert got is None
    else:
        assert got is not None and words in got and "s3://bucket/prefix" in got, got


@pytest.mark.parametrize("key,value", [("file_mounts_mapping", "{/x: /etc}"),
                                       ("managed_secrets", "[GITHUB_TOKEN]")])
def test_skypilot_keys_that_reach_the_servers_own_stores_are_refused(disk, key, value):
    got = verdict(f"{key}: {value}\n" + RUN, disk, body())
    assert got is not None and got.startswith(f"<job>:1: {key}: "), got


# -- the server's environment ------------------------------------------------------------------

LISTS = {"*": ["HF_TOKEN"], "alice": ["WANDB_API_KEY"]}
SECRETS = [  # (id, secrets, user, allowed)
    ("listed-for-everyone", "{HF_TOKEN: null}", "bob", True),
    ("listed-for-the-user", "{WANDB_API_KEY: null}", "alice", True),
    ("listed-for-another-user", "{WANDB_API_KEY: null}", "bob", False),
    ("not-listed", "{SERVER_ONLY_VAR: null}", "alice", False),
    ("unknown-caller-gets-only-star", "{WANDB_API_KEY: null}", None, False),
    ("list-form", "[HF_TOKEN, WANDB_API_KEY]", "bob", False),
    ("a-value-sent-is-no-server-read", "{SERVER_ONLY_VAR: from-the-client}", "bob", True),
]


@pytest.mark.parametrize("case", SECRETS, ids=[c[0] for c in SECRETS])
def test_a_null_secret_is_filled_only_for_names_listed_for_the_user(case, monkeypatch):
    _, secrets, user, allowed = case
    for name in ("HF_TOKEN", "WANDB_API_KEY", "SERVER_ONLY_VAR"):
        monkeypatch.setenv(name, "set-on-the-server")
    got = verdict(f"secrets: {secrets}\n" + RUN, None, body(), user, LISTS)
    if allowed:
        assert got is None
    else:
        name = "WANDB_API_KEY" if "WANDB" in secrets else "SERVER_ONLY_VAR"
        assert got == (f"<job>:1: secrets.{name}: this server fills only the names its admin "
                       f"lists in serve_env_secrets for you | send the value with --secret "
                       f"{name}=... (orch submit reads --secret {name} from your shell), or ask "
                       f"the server's admin to list {name} for you in serve_env_secrets")


def test_the_secret_refusal_is_the_same_whether_the_variable_is_set(monkeypatch):
    def message(name: str) -> str:
        spec = load_spec_text(f"secrets: {{{name}: null}}\n" + RUN)
        with pytest.raises(InputError) as e:
            check_server_secrets(spec, settings_for(None, LISTS), "bob")
        return f"{e.value.message} | {e.value.hint}".replace(name, "NAME")

    monkeypatch.setenv("SERVER_ONLY_VAR", "s3cr3t-on-the-server")
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    assert message("SERVER_ONLY_VAR") == message("NOT_SET_ANYWHERE")
    assert "s3cr3t" not in message("SERVER_ONLY_VAR")
    # A name listed for the user may say that it is unset: the user knows it is listed.
    monkeypatch.delenv("HF_TOKEN", raising=False)
    spec = load_spec_text("secrets: {HF_TOKEN: null}\n" + RUN)
    with pytest.raises(InputError, match="listed in serve_env_secrets, but the server's "
                                         "environment does not set it"):
        check_server_secrets(spec, settings_for(None, LISTS), "bob")
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    check_server_secrets(spec, settings_for(None, LISTS), "bob")


def test_at_launch_the_names_are_checked_again_for_the_jobs_owner():
    spec = load_spec_text("secrets: {WANDB_API_KEY: null}\n" + RUN)
    client_policy.check_launch(spec, "alice", settings_for(None, LISTS))
    client_policy.check_launch(spec, None, settings_for(None, {}))  # recorded on the server itself
    with pytest.raises(InputError, match=r"secrets\.WANDB_API_KEY: this server fills only"):
        client_policy.check_launch(spec, "alice", settings_for(None, {"*": ["HF_TOKEN"]}))


# -- text that is no text ------------------------------------------------------------------------

TEXT = [  # (id, job file text, request, the message's start)
    ("nul-in-file", RUN, body("/srv/a\x00b.yaml"), "file: contains a NUL character"),
    ("nul-in-key", RUN, body(key="k\x00"), "idempotency_key: contains a NUL character"),
    ("nul-in-env", RUN, body(env={"A": "x\x00"}), "env.A: contains a NUL character"),
    ("surrogate-in-secret", RUN, body(secrets={"A": "\ud800"}), "secrets.A: contains \\ud800"),
    ("surrogate-in-workdir", 'workdir: "/srv/\\ud800"\n' + RUN, body(), "<job>:1: workdir: contains \\ud800"),
    ("surrogate-in-envs", 'envs: {A: "\\udfff"}\n' + RUN, body(), "<job>:1: envs.A: contains \\udfff"),
    ("surrogate-in-run", 'run: "echo \\ud800"\n', body(), "<job>:1: run: contains \\ud800"),
    ("surrogate-in-a-key", 'file_mounts: {"/d\\ud800": s3://b/x}\n' + RUN, body(),
     "<job>:1: file_mounts.'/d\\ud800': contains \\ud800"),
    ("surrogate-in-git-url", 'workdir: {url: "https://github.com/\\ud800"}\n' + RUN, body(),
     "<job>:1: workdir.url: contains \\ud800"),
]


@pytest.mark.parametrize("case", TEXT, ids=[c[0] for c in TEXT])
def test_a_nul_or_a_lone_surrogate_is_refused_naming_where(case):
    _, text, req, start = case
    got = verdict(text, None, req)
    assert got is not None and got.startswith(start), got
    got.encode("utf-8")  # the message itself is text: it can be sent
    assert re.search(r"half of a UTF-16 surrogate pair|NUL character", got)


def test_the_servers_home_never_counts_even_inside_a_root(tmp_path):
    """A root that holds ORCH_HOME would let a job name another user's upload by its path
    (skipping the owners' check), or the saved logs: the home is never inside a root."""
    from orchestrator.server.client_policy import check_paths

    home = tmp_path / "srv" / "orch-home"
    (home / "uploads" / ("a" * 64)).mkdir(parents=True)
    (tmp_path / "srv" / "code").mkdir()
    for workdir in (home / "uploads" / ("a" * 64), home / "logs", home):
        spec = load_spec_text(f"workdir: {workdir}\nrun: echo\n", "<job>")
        with pytest.raises(SpecError, match="is a folder on the server"):
            check_paths(spec, None, False, [tmp_path / "srv"], never=[home])
    check_paths(load_spec_text(f"workdir: {tmp_path / 'srv' / 'code'}\nrun: echo\n", "<job>"),
                None, False, [tmp_path / "srv"], never=[home])


def test_a_root_folder_holding_a_link_that_leaves_the_roots_is_refused(disk):
    """Issue 47: a folder in a root was packed with its links followed: a job got the server's
    secret_key, other users' logs and /etc/shadow through links in its own folder."""
    code = disk / "root" / "code"
    (code / "lib").mkdir()
    (code / "train.py").write_text("print(1)\n")
    (code / "lib" / "here").symlink_to(code / "train.py")  # inside the root: fine
    (code / "jobs").symlink_to(disk / "root" / "jobs")
    assert verdict(f"workdir: {code}\n" + RUN, disk, body()) is None
    for name, target in (("lib/logs", disk / "outside" / "logs"), ("key", "/etc/passwd"),
                         ("up", disk / "root" / "escape")):
        (code / name).symlink_to(target)
        got = verdict(f"workdir: {code}\n" + RUN, disk, body())
        assert got is not None and f"holds a link, '{name}', that leads outside" in got, got
        assert "send the folder as an upload" in got
        (code / name).unlink()


def test_at_launch_a_root_folder_swapped_for_a_link_is_refused(disk):
    """Issue 47: the path was checked once, at registration: a schedule's folder swapped for a
    link to ORCH_HOME/logs afterwards ran from there."""
    settings = settings_for(disk)
    code = disk / "root" / "sched"
    code.mkdir()
    spec = load_spec_text(f"workdir: {code}\n" + RUN, "<job>")
    client_policy.check(spec, body(), "bob", settings)  # registered
    client_policy.check_launch(spec, "bob", settings)  # its slot: launched
    code.rmdir()
    code.symlink_to(disk / "outside" / "logs")
    with pytest.raises(InputError, match="is a folder on the server"):
        client_policy.check_launch(spec, "bob", settings)
    client_policy.check_launch(spec, "bob", settings, upload=True)  # an upload: checked as unpacked
    client_policy.check_launch(spec, None, settings)  # the server's own job: no client's
