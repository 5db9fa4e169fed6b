"""The environment orch's local Ray and its runner host start with, so every job there: an
allowlist, never the environment of the orch that starts them (issue 46)."""

from __future__ import annotations

import os

import pytest

from orchestrator.settings import Settings
from providers.local import local_ray

SERVER = {  # what an `orch serve` on PostgreSQL, with clouds and a metrics token, runs with
    "ORCH_DATABASE_URL": "postgresql://orch:pw-8d1@db:5432/orch", "ORCH_HOME": "/srv/orch",
    "ORCH_METRICS_TOKEN": "m" * 40, "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "HF_TOKEN": "listed-for-alice-only", "RAY_ADDRESS": "http://other:8265",
    "PYTHONPATH": "/srv/orch/plugins",
}
ALLOWED = {"PATH": "/usr/bin", "HOME": "/home/orch", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "NCCL_SOCKET_IFNAME": "eth0", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}


def test_the_local_ray_gets_only_the_allowlist_and_what_the_admin_passes_on(tmp_path, monkeypatch):
    for k in [k for k in os.environ if k.startswith("ORCH_")]:
        monkeypatch.delenv(k)
    plain = Settings(home=tmp_path)
    passing = Settings(home=tmp_path, local={"pass_env": ["AWS_SECRET_ACCESS_KEY"]})
    monkeypatch.setattr("os.environ", {**SERVER, **ALLOWED})
    env = local_ray(plain).job_env()
    assert not set(SERVER) & set(env) - {"PYTHONPATH"}, sorted(set(SERVER) & set(env))
    assert env["PYTHONPATH"] == str(tmp_path / "local" / "runner")  # the runner alone
    assert {k: env[k] for k in ALLOWED} == ALLOWED
    assert env["RAY_AUTH_MODE"] == "token"  # what orch sets for its Ray
    # The admin passes a variable on by name (local.pass_env).
    assert local_ray(passing).job_env()["AWS_SECRET_ACCESS_KEY"] == "aws-secret"


def test_orchs_own_settings_cannot_be_passed_on():
    with pytest.raises(ValueError, match="ORCH_DATABASE_URL: orch's own settings never reach a job"):
        Settings(local={"pass_env": "HF_TOKEN,ORCH_DATABASE_URL"})
