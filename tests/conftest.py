"""Shared test helpers: an isolated ORCH_HOME, and running the real `orch` CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ORCH = str(Path(sys.executable).with_name("orch"))


def short_tmp(prefix: str) -> Path:
    # Ray's unix sockets need a short temp path; pytest's tmp_path is too long.
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def orch_env(home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "RAY_"))}
    env.update(ORCH_HOME=str(home), ORCH_CONFIG=str(home / "config.toml"), ORCH_MODE="local",
               SKYPILOT_DISABLE_USAGE_COLLECTION="1", AWS_EC2_METADATA_DISABLED="true",
               COLUMNS="200")
    env.update(extra)
    return env


def run_orch(home: Path, *args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([ORCH, *args], env=orch_env(home, **env), capture_output=True,
                          text=True, timeout=timeout, cwd=str(ROOT), stdin=subprocess.DEVNULL)


def run_json(home: Path, *args: str, **kw) -> object:
    proc = run_orch(home, *args, "--json", **kw)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def orch_home():
    home = short_tmp("oh")
    yield home
    shutil.rmtree(home, ignore_errors=True)
