"""A backend is its folder plus one line in the registry and one in base/targets.py
(docs/backends.md): the toy backend (tests/backends/toy/) is added so, then planned,
submitted, followed to its end and cancelled through orch's service."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from orchestrator.base.errors import InputError
from orchestrator.base.targets import declare, forget
from orchestrator.service.orch import Orch
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from providers.registry import register, unregister
from tests.backends.toy import ToyBackend
from tests.backends.toy import offers as toy_offers

REPO = Path(__file__).resolve().parents[3]
FOLDER = "tests/backends/toy/"


@pytest.fixture(params=[False, True], ids=["rented", "owned"])
def toy(request):
    # The two lines a backend adds outside its folder: in base/targets.py and providers/registry.py.
    declare("toy", owned=request.param, tie=3)
    register("toy", ToyBackend, toy_offers.offers, lambda s: ToyBackend(s.home / "toy"))
    yield request.param
    unregister("toy")
    forget("toy")


def _until(orch: Orch, job_id: str, status: str):
    deadline = time.monotonic() + 20
    rec = orch.refresh(orch.get(job_id))
    while rec.status != status and time.monotonic() < deadline:
        time.sleep(0.05)
        rec = orch.refresh(orch.get(job_id))
    assert rec.status == status, (rec.status, rec.message)
    return rec


def test_a_backend_known_to_the_registry_alone_plans_runs_and_cancels(tmp_path, toy):
    # A cloud configured without credentials here: a rented target that is not a SkyPilot
    # cloud needs none (it was refused as "credentials for None").
    orch = Orch(Settings(home=tmp_path / "home", mode="hybrid", clouds=["aws"]))
    try:
        job = load_spec_text("name: t\nrun: echo hello from toy\nplacement: {allow: [toy]}\n",
                             "t.yaml")
        planned = orch.plan(job)
        assert planned.decision.target == "toy", planned.decision.refusal
        rec = orch.submit(job).rec
        assert rec.target == "toy"
        rec = _until(orch, rec.id, "SUCCEEDED")
        assert "hello from toy" in orch.logs(rec)
        long = orch.submit(load_spec_text(
            "name: l\nrun: sleep 30\nplacement: {allow: [toy]}\n", "l.yaml")).rec
        _until(orch, long.id, "RUNNING")
        orch.cancel_job(long.id)
        _until(orch, long.id, "CANCELLED")
        shown = orch.metrics_snapshot()  # lines of its own
        assert "toy" in {q.target for q in shown.queue}
        assert ("toy" in {o.target for o in shown.owned}) is toy
        assert ("toy" in {o.target for o in orch.fleet().owned}) is toy
    finally:
        orch.close()


def test_an_undeclared_target_is_refused_naming_the_known_ones():
    with pytest.raises(InputError) as e:
        load_spec_text("name: t\nrun: echo\nplacement: {allow: [toy]}\n", "t.yaml")
    assert "placement.allow.0: unknown target 'toy': use one of local, onprem, cloud" in str(
        e.value)


def test_no_file_outside_its_folder_names_the_toy_backend_but_its_registration():
    # Its module or its target's name, quoted: a fifth file the backend needed would name it.
    names = re.compile(r"tests[./]backends[./]toy|[\"']toy[\"']")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    naming = sorted(f for f in files if f and not f.startswith(FOLDER) and (REPO / f).is_file()
                    and names.search((REPO / f).read_text(errors="replace")))
    assert naming == ["docs/backends.md", "tests/unit/providers/test_new_backend.py"]  # its example
