"""SkyPilot's own API server on loopback, with no cloud enabled and no network: each of
orch's calls through it ends in a definite state or one clear message, never a traceback,
and the fake (tests/fake_sky.py) replays what this server answers."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import fake_sky, sky_api_server
from tests.conftest import ROOT, short_tmp

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


@pytest.fixture
def sky_server():
    home = short_tmp("osk")
    server = sky_api_server.start(home)
    try:
        yield server
    finally:
        left = sky_api_server.stop(server)
        shutil.rmtree(home, ignore_errors=True)
        assert not left, f"SkyPilot API server processes left running: {left}"


def test_orch_calls_through_a_real_api_server(sky_server, tmp_path):
    out = tmp_path / "answers.json"
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("sky_api_calls.py")), str(out),
         str(tmp_path / "orch")],
        env={**sky_server.client_env(), "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    got = json.loads(out.read_text())

    # What the server says with no jobs controller: the answers the fake replays.
    no_jobs = {"type": "ClusterNotUpError", "message": fake_sky.NO_JOBS, "hint": None,
               "cluster_status": None}
    assert got["sdk.queue"] == no_jobs and got["sdk.cancel"] == no_jobs
    assert got["sdk.logs"] == {"value": ""}
    assert got["sdk.request"] == {"value": ["FAILED", "SkyPilot has no request no-such-request"]}
    assert got["sdk.launch"]["type"] == "CloudError"
    assert got["sdk.launch"]["str"] == str(fake_sky.catalog_offline())

    # What orch makes of them.
    assert got["state"] == {"value": {"status": "FAILED", "message": "SkyPilot has no job orch-none",
                                      "info": None, "exit_code": None, "unknown": True}}
    assert got["state.request"]["value"]["status"] == "FAILED"
    assert got["logs"] == {"value": ""} and got["cancel"] == {"value": None}
    assert got["submit"]["type"] == "BackendError"
    assert "could not download its catalog common/accelerators.csv" in got["submit"]["message"]
    assert "raw.githubusercontent.com" in got["submit"]["hint"]
    (rec,) = got["records"]
    assert rec["placed_on"] == "cloud" and rec["status"] == "FAILED"
    assert rec["message"].startswith("launch failed: SkyPilot did not accept orch-")
    assert sky_server.proc.poll() is None, sky_server.log_tail()  # it answered all of that
    print("seconds per call:", got["seconds"])
