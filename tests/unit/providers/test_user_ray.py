"""The per-user isolation mode's pure parts (issue 46, part 3): which OS user a client user's
jobs run as, what a user's Ray instance is started with (its user's identity, home and
token, the GPUs it was given and no other), and which GPUs a new instance gets. The real
instances, as real OS users, are tests/integration/test_isolation.py's."""

from __future__ import annotations

import pytest

from orchestrator.base.errors import BackendError
from providers import isolated
from providers.user_ray import PREFIX, OsUser, UserRay, ensure_user, os_user_name


def test_each_client_user_gets_an_os_user_of_their_own_unless_the_settings_name_one():
    assert os_user_name("alice", {}) == "orch-u-alice"
    assert os_user_name("alice", {"alice": "alice2"}) == "alice2"
    odd = {os_user_name(n, {}) for n in ("alice", "Alice", "alice!", "al/ice", "a" * 40)}
    assert len(odd) == 5, odd  # never two users' jobs as one OS user
    for name in odd:
        assert name.startswith(PREFIX) and len(name) <= 32, name
        assert all(c.isalnum() or c in "-_" for c in name) and name == name.lower(), name


def test_a_users_instance_runs_as_that_user_on_its_gpus_only(tmp_path):
    user = OsUser("orch-u-bob", 4242, 4343, tmp_path / "orch-u-bob")
    ray = UserRay(tmp_path / "control", user, gpu_ids=(2, 3), python="/opt/orch/bin/python")
    assert ray._spawn_as() == {"user": 4242, "group": 4343, "extra_groups": [], "umask": 0o077}
    env = ray.job_env()
    assert env["HOME"] == env["TMPDIR"] == str(user.home) and env["USER"] == "orch-u-bob"
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and ray._gpu_args() == ["--num-gpus=2"]
    assert env["RAY_AUTH_TOKEN_PATH"] == str(user.home / ".ray-token")  # its copy, not orch's
    assert ray._ray_command() == ["/opt/orch/bin/python", "-m", "ray.scripts.scripts"]
    # orch's own files of it (state, token, lock) stay under the control home (ORCH_HOME).
    assert ray.state_file.is_relative_to(tmp_path / "control")
    none = UserRay(tmp_path / "control", user)
    assert none.job_env()["CUDA_VISIBLE_DEVICES"] == "" and none._gpu_args() == ["--num-gpus=0"]


def test_root_is_never_a_job_user(tmp_path):
    with pytest.raises(BackendError, match="names root"):
        ensure_user("root", tmp_path)


def test_a_new_instance_gets_the_gpus_no_running_instance_holds(tmp_path, monkeypatch):
    class Running:
        def __init__(self, ids):
            self.ray = type("R", (), {"_state": lambda _self: {"gpu_ids": ids}})()

    provider = object.__new__(isolated.IsolatedLocalProvider)
    monkeypatch.setattr("orchestrator.offers.local.detect_gpus", lambda: {"H100": 4})
    monkeypatch.setattr(provider, "_running", lambda: [Running([0]), Running([2])])
    assert provider._free_gpus(1) == [1]
    assert provider._free_gpus(2) == [1, 3]
    assert provider._free_gpus(3) == [1, 3]  # fewer when taken: the job waits in its Ray



def test_a_users_jobs_run_under_the_interpreter_their_user_can_run(tmp_path, monkeypatch):
    """serve_isolation_python: the runner, the values' unpacker and `python` on the job's
    PATH are that interpreter, not orch's (which a job user may not be able to run)."""
    import sys

    from providers.base import Launch
    from providers.local import LocalProvider
    from providers.ray_jobs import RayJobsProvider

    user = OsUser("orch-u-bob", 4242, 4343, tmp_path / "orch-u-bob")
    provider = object.__new__(isolated.UserProvider)
    provider.ray = UserRay(tmp_path / "control", user, python="/opt/orch/bin/python")
    sent = []
    monkeypatch.setattr(RayJobsProvider, "submit", lambda self, launch: sent.append(launch))
    entrypoint = f"bash -c {LocalProvider.shell_prelude()}{LocalProvider.runner_command()}"
    provider.submit(Launch(job_id="orch-1", entrypoint=entrypoint))
    assert sys.executable not in sent[0].entrypoint, sent[0].entrypoint
    assert "export PATH=/opt/orch/bin:" in sent[0].entrypoint
    assert "/opt/orch/bin/python -m _orch_runner.runner" in sent[0].entrypoint
    assert provider.with_secrets("x").startswith("/opt/orch/bin/python -m ")
