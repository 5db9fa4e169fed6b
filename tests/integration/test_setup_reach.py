"""A `train:` job's `setup:` cannot reach its event key (issue 46, part 4), on the real
local Ray: setup dumps its environment, its ancestors' environments and command lines and
what its own and its parent's inherited fds yield, and finds no key; its secret is there,
and the job still ends SUCCEEDED, its result signed by its runner."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.conftest import _in_process, run_orch
from tests.unit.jobs.test_setup_without_key import dump

pytestmark = pytest.mark.integration


def test_setup_dumps_everything_it_can_read_and_finds_no_event_key(ray_home, tmp_path):
    out = tmp_path / "dump.txt"
    setup = dump(out).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    job = tmp_path / "job.yaml"
    job.write_text(f'name: setup-reach\nsecrets: {{A_SECRET: null}}\nsetup: "{setup}"\n'
                   "train:\n  job: image-classification\n  config: {epochs: 1}\n"
                   "scaling: {num_workers: 1}\nprecision: fp32\n")
    proc = run_orch(ray_home, "submit", str(job), "--json", A_SECRET="tok-setup-reach")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    assert rec["status"] == "SUCCEEDED", rec  # counted only with its runner's signature
    key = _in_process(ray_home, {}, lambda local: local.orch.get(rec["id"]).info.event_key)
    assert len(key) == 64
    text = out.read_text()
    assert "== ancestor" in text and "ORCH_JOB_ID=" in text  # it did read them
    assert f"== secret sha {hashlib.sha256(b'tok-setup-reach').hexdigest()}" in text
    assert key not in text
