"""On-prem offers from the cluster's own nodes, the inventory check, and the runner's Python."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.base.errors import BackendError
from orchestrator.decision.cluster_offers import (
    UNPRICED_PREFIX,
    cluster_offers,
    inventory_mismatch,
    ran_unpriced,
    ray_gpu_name,
    unpriced_note,
)
from orchestrator.settings import OwnedGpus, Settings
from orchestrator.spec import load_spec_text
from providers.ray_cluster import ClusterSnapshot, Node
from providers.ray_python import NO_PYTHON_EXIT, find_python, runner_command
from tests.conftest import job_row


def node(cpus=8, gpus=0, model=None, alive=True, i=0):
    return Node(f"n{i}", "10.0.0.1", alive, i == 0, float(cpus), float(gpus), model)


def shape(offers):
    return [(o.gpu, o.count, o.cpus, round(o.power_per_hour, 6)) for o in offers]


# Power at 0.15 USD/kWh: 300 W per GPU -> 0.045 USD/h, 200 W per CPU-only node -> 0.03.
@pytest.mark.parametrize("nodes,expected", [
    ([], []),
    ([node(cpus=2), node(cpus=1, i=1)], [(None, 0, 3.0, 0.06)]),
    ([node(cpus=16, gpus=4, model="A100")], [("A100", 4.0, 16.0, 0.18)]),
    ([node(16, 2, "A100"), node(8, 1, "T4", i=1), node(4, i=2)],
     [("A100", 2.0, 16.0, 0.09), ("T4", 1.0, 8.0, 0.045), (None, 0, 28.0, 0.03)]),
    ([node(16, 2, "A100"), node(16, 2, "A100", i=1)], [("A100", 4.0, 32.0, 0.18)]),
    ([node(16, 8, "A100-80G")], [("A100-80GB", 8.0, 16.0, 0.36)]),  # Ray's spelling
    ([node(16, 4, "A100"), node(64, alive=False, i=1)], [("A100", 4.0, 16.0, 0.18)]),
    ([node(16, 1, None)], [("GPU", 1.0, 16.0, 0.045)]),  # Ray did not say which model
])
def test_offers_from_the_clusters_nodes(nodes, expected):
    offers = cluster_offers(nodes, 0.15)
    assert shape(offers) == expected
    for o in offers:
        assert o.target == "onprem" and o.amortized_per_hour == 0
        assert o.price_per_hour == o.power_per_hour
        assert o.unpriced and "purchase_price" in o.unpriced and "watts" in o.unpriced
    assert len({o.unpriced for o in offers}) <= 1  # one sentence for the whole cluster


@pytest.mark.parametrize("gpus,cpu_nodes,says,not_says", [
    (True, False, "300 W per GPU;", "CPU-only"),
    (True, True, "300 W per GPU and 200 W per CPU-only node", 'gpu = "CPU"'),
    (False, True, '200 W per node; add [[onprem]] gpu = "CPU", count, cpus', "per GPU"),
])
def test_the_unpriced_note_names_what_is_assumed_and_the_missing_keys(gpus, cpu_nodes, says,
                                                                      not_says):
    text = unpriced_note(gpus, cpu_nodes)
    assert text.startswith(UNPRICED_PREFIX) and says in text and not_says not in text
    assert "purchase_price and watts to the settings" in text


@pytest.mark.parametrize("model,name", [("A100", "A100"), ("A100-40G", "A100"),
                                        ("A100-80G", "A100-80GB"), ("T4", "T4"),
                                        ("H100", "H100"), (None, "GPU")])
def test_ray_accelerator_types_read_as_skypilot_names(model, name):
    assert ray_gpu_name(model) == name


def inv(gpu, count, cpus=None):
    return OwnedGpus(gpu=gpu, count=count, cpus=cpus, purchase_price=1000)


@pytest.mark.parametrize("inventory,nodes,words", [
    ([inv("A100", 4)], [node(16, 4, "A100")], None),
    ([inv("A100", 4)], [node(16, 2, "A100"), node(8, 1, "T4", i=1)],
     "the inventory says 4x A100, the cluster has 2x A100, 1x T4"),
    ([inv("A100", 2), inv("A100", 2)], [node(16, 4, "A100")], None),  # lines add up
    ([inv("A100-80GB", 8)], [node(16, 8, "A100-80G")], None),
    ([inv("A100", 4)], [node(16, 4, "A100"), node(4, i=1)], None),  # a CPU head is no news
    ([inv("CPU", 2, cpus=3)], [node(2), node(1, i=1)], None),
    ([inv("CPU", 3, cpus=3)], [node(2), node(1, i=1)],
     "CPU-only nodes: the inventory says 3, the cluster has 2 alive"),
    ([inv("A100", 4)], [node(16, 4, "A100", alive=False)], "the cluster has no GPUs"),
    ([inv("A100", 1)], [node(16, 1, None)], None),  # no model from Ray: counts alone
    ([inv("H100", 8)], [], "the inventory says 8x H100, the cluster has no GPUs"),
])
def test_an_inventory_that_disagrees_with_the_cluster_is_named(inventory, nodes, words):
    note = inventory_mismatch(inventory, nodes, "http://head:8265")
    if words is None:
        assert note is None
    else:
        assert words in note and "http://head:8265" in note and "[[onprem]]" in note


@pytest.mark.parametrize("rec,unpriced", [
    ({"target": "onprem", "decision": {"choice": {"full_cost_known": False}}}, True),
    ({"target": "onprem", "decision": {"choice": {}, "notes": [unpriced_note(False, True)]}},
     True),
    ({"target": "onprem", "decision": {"choice": {"full_cost_known": True}, "notes": []}},
     False),
    ({"target": "cloud", "decision": {"notes": [unpriced_note(True, False)]}}, False),
    ({"target": "local", "decision": None}, False),
])
def test_a_job_that_ran_on_an_unpriced_cluster_is_known_from_its_record(rec, unpriced):
    row = job_row({"id": "orch-1", "name": "j", "status": "SUCCEEDED", **rec})
    assert ran_unpriced(row) is unpriced


# -- planning: one read of the cluster feeds the offers, the capacity and the notes ---------

STEADY = ("name: nightly\nschedule: {kind: steady}\nplacement: {allow: [onprem]}\n"
          "estimate: {hours: 1}\nrun: python train.py\n")


@pytest.fixture
def cluster_reads(monkeypatch):
    """The cluster planning reads (through the registry), counted; set `.answer` to a
    snapshot or a BackendError."""
    import providers.registry

    class Reads:
        answer: object = None
        count = 0

    def read(target, settings):
        assert target == "onprem"
        Reads.count += 1
        return Reads.answer

    monkeypatch.setattr(providers.registry, "read_capacity", read)
    return Reads


def snap(*nodes):
    cpus = sum(n.cpus for n in nodes if n.alive)
    gpus = sum(n.gpus for n in nodes if n.alive)
    return ClusterSnapshot("http://head:8265", tuple(nodes), {"CPU": cpus, "GPU": gpus},
                           {"CPU": 0.0, "GPU": 0.0}, (), 1_700_000_000.0)


def plan(tmp_path, text=STEADY, offers=None, capacity=None, **settings):
    """The job planned on what the service gathers (the cluster read once, through the
    `cluster_reads` fixture's answer), unless `offers` and `capacity` are given."""
    from orchestrator.decision.facts import decide_on
    from orchestrator.service.planning import gather

    s = Settings(home=tmp_path / "home", mode="hybrid", ray_address="http://head:8265",
                 **settings)
    spec, now = load_spec_text(text), 1_700_000_000.0
    facts = gather(spec, s, now, fingerprint="fp", history=(), offers=offers,
                   capacity=capacity, spent_this_month=0.0)
    return decide_on(spec, s, facts, fingerprint="fp", now=now)


def test_without_an_inventory_the_cluster_is_a_place_to_run(tmp_path, cluster_reads):
    cluster_reads.answer = snap(node(cpus=2), node(cpus=1, i=1))
    d = plan(tmp_path)
    assert cluster_reads.count == 1  # offers and capacity from one read
    assert d.target == "onprem" and d.choice.offer.gpu is None and d.choice.offer.cpus == 3
    note = unpriced_note(False, True)
    assert list(d.notes).count(note) == 1
    assert "on-prem capacity: http://head:8265" in " ".join(d.notes)


def test_a_gpu_job_goes_to_the_clusters_gpus(tmp_path, cluster_reads):
    cluster_reads.answer = snap(node(16, 2, "A100"), node(8, 1, "T4", i=1))
    d = plan(tmp_path, STEADY + "resources: {accelerators: A100:2}\n")
    assert d.target == "onprem" and (d.choice.offer.gpu, d.choice.used) == ("A100", 2)
    assert d.choice.offer.unpriced in d.notes


def test_an_unreachable_cluster_is_a_row_that_says_why(tmp_path, cluster_reads):
    cluster_reads.answer = BackendError("cannot reach Ray at http://head:8265: refused",
                                        "check ORCH_RAY_ADDRESS")
    why = "on-prem: cannot reach Ray at http://head:8265: refused; check ORCH_RAY_ADDRESS"
    d = plan(tmp_path, STEADY + "resources: {accelerators: A100:2}\n")
    assert cluster_reads.count == 1 and d.target is None
    (row,) = [a for a in d.alternatives if a.offer.target == "onprem"]  # a stand-in, unpriced
    assert (row.offer.gpu, row.used, row.est_cost, row.excluded) == ("A100", 2, None, why)
    assert d.to_dict()["alternatives"][-1]["price_per_hour"] is None
    assert d.refusal == why and why in d.notes


def test_an_unreachable_cluster_is_named_where_the_job_goes_instead(tmp_path, cluster_reads):
    cluster_reads.answer = BackendError("cannot reach Ray at http://head:8265: refused")
    d = plan(tmp_path, STEADY.replace("[onprem]", "[onprem, local]"))
    why = "on-prem: cannot reach Ray at http://head:8265: refused"
    assert d.target == "local" and why in d.notes
    assert [a.excluded for a in d.alternatives if a.offer.target == "onprem"] == [why]


def test_the_inventory_prices_and_a_mismatch_is_noted(tmp_path, cluster_reads):
    cluster_reads.answer = snap(node(16, 2, "A100"), node(8, 1, "T4", i=1))
    d = plan(tmp_path, STEADY + "resources: {accelerators: A100:1}\n",
             onprem=[inv("A100", 4)])
    assert cluster_reads.count == 1
    assert d.target == "onprem" and d.choice.offer.unpriced is None
    assert d.choice.offer.count == 4  # the inventory's offer, priced in full
    mismatch = [n for n in d.notes if "disagrees" in n]
    assert len(mismatch) == 1 and "2x A100, 1x T4" in mismatch[0]
    assert not any(n.startswith(UNPRICED_PREFIX) for n in d.notes)


def test_given_offers_and_capacity_the_cluster_is_not_read(tmp_path, cluster_reads):
    from orchestrator.decision.models import Capacity

    offers = cluster_offers([node(cpus=4)], 0.15)
    d = plan(tmp_path, offers=offers, capacity=Capacity(source="test"))
    assert cluster_reads.count == 0 and d.target == "onprem"
    assert list(d.notes).count(offers[0].unpriced) == 1


# -- the runner's Python on a cluster node ------------------------------------------------

def _bare_env() -> dict:
    """PATH without this venv (as a node where `ray start` ran by its absolute path)."""
    venv_bin = str(Path(sys.executable).parent)
    path = ":".join(p for p in os.environ.get("PATH", "").split(":") if p and p != venv_bin)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["PATH"] = path or "/usr/bin:/bin"
    return env


def test_the_runner_starts_under_the_python_of_the_ray_above_it():
    # A Python process with Ray's core library loaded runs the entrypoint, as the Ray job
    # supervisor does; the entrypoint finds that interpreter, not the first python3.
    probe = find_python() + '\n"$orch_py" -c "import sys; print(sys.prefix)"'
    parent = ("import subprocess, sys, ray._raylet; "
              "sys.exit(subprocess.run(['bash', '-c', sys.argv[1]]).returncode)")
    proc = subprocess.run([sys.executable, "-c", parent, probe], env=_bare_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == sys.prefix


def test_a_cluster_that_names_its_python_runs_the_runner_under_it(tmp_path):
    # A user's own cluster (jobs/user_cluster.py) names its interpreter: one that finds
    # Ray through a .pth file, which the walk up to Ray's library would miss.
    wrapper = tmp_path / "py"
    wrapper.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} \"$@\"\n")
    wrapper.chmod(0o755)
    probe = find_python() + '\necho "$orch_py"'
    proc = subprocess.run(["bash", "-c", probe], env={**_bare_env(), "ORCH_RAY_PYTHON": str(wrapper)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(wrapper)


def test_without_a_python_that_has_ray_and_torch_the_job_fails_at_once_saying_so(tmp_path):
    from jobs import events

    # No Ray above the shell, and the only python3 on the PATH lacks ray and torch.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("grep", "sed", "readlink"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (bin_dir / "python3").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "python3").chmod(0o755)
    # Detached (setsid --fork): the test process above may have Ray loaded (an earlier test
    # imported it), and the script would rightly find that Python; a job's shell has Ray's
    # supervisor above it, this one nothing.
    script, out, err, rc = (tmp_path / n for n in ("run.sh", "out", "err", "rc"))
    script.write_text(runner_command())
    bash = shutil.which("bash")
    subprocess.run([shutil.which("setsid"), "-f", bash, "-c",
                    f"{bash} {script} >{out} 2>{err}; echo $? >{rc}.tmp; {shutil.which('mv')} {rc}.tmp {rc}"],
                   env={**_bare_env(), "PATH": str(bin_dir)}, timeout=30, check=True)
    deadline = time.monotonic() + 30
    while not rc.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stdout, stderr = out.read_text(), err.read_text()
    assert int(rc.read_text()) == NO_PYTHON_EXIT, stderr
    assert "no Python with ray and torch" in stderr and "Traceback" not in stderr
    result = [e for e in events.parse(stdout) if e["event"] == "result"]
    assert result and result[0]["ok"] is False
    assert f"tried: {bin_dir / 'python3'}" in result[0]["error"]
    assert "install torch into the Python environment that runs ray start" in result[0]["error"]
