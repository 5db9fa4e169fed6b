"""Sweeps: one job file expanded into runs (a grid, a list, random samples), each checked
as its own job file would be; placed together, the longest runs first, so the owned GPUs go
to the runs that need them most and the rest rent (a 2-GPU cluster read as Ray would
report it, the cloud behind the fake); one row in `orch status`, cancelled at once."""

from __future__ import annotations

import json

import pytest

from orchestrator.base.errors import InputError, SpecError
from orchestrator.decision import sweeps as rules
from orchestrator.spec import load_spec_text
from orchestrator.spec.sweep import run_label
from orchestrator.spec.sweep_runs import expand

BASE = """\
name: lr
run: python train.py --lr $LR
envs: {LR: "0.1"}
estimate: {hours: 1}
"""


def test_a_grid_is_every_combination_in_order():
    spec = load_spec_text(BASE + 'sweep:\n  grid: {envs.LR: ["0.1", "0.01"], envs.SEED: [1, 2, 3]}\n',
                          "lr.yaml")
    runs = expand(spec)
    assert [r.name for r in runs] == [f"lr-{i}" for i in range(1, 7)]
    assert [(r.envs["LR"], r.envs["SEED"]) for r in runs] == [
        ("0.1", 1), ("0.1", 2), ("0.1", 3), ("0.01", 1), ("0.01", 2), ("0.01", 3)]
    assert all(r.sweep is None and r.run == spec.run for r in runs)
    assert run_label(spec.sweep.values()[4]) == "LR=0.01 SEED=2"


def test_runs_and_random_samples():
    spec = load_spec_text(BASE + "sweep:\n  runs: [{estimate.hours: 3}, {envs.LR: '0.5'}]\n",
                          "lr.yaml")
    a, b = expand(spec)
    assert (a.estimate.hours, b.estimate.hours, b.envs["LR"]) == (3, 1, "0.5")
    text = BASE + ("sweep:\n  random:\n    samples: 5\n    seed: 7\n    space:\n"
                   "      envs.LR: {loguniform: [0.0001, 0.1]}\n      envs.SEED: {choice: [1, 2]}\n")
    first = [r.envs for r in expand(load_spec_text(text, "lr.yaml"))]
    assert len(first) == 5 and all(1e-4 <= float(e["LR"]) <= 0.1 for e in first)
    assert first == [r.envs for r in expand(load_spec_text(text, "lr.yaml"))]  # by its seed


@pytest.mark.parametrize("sweep,problem", [
    ("sweep: {grid: {}}", "a grid needs at least one key"),
    ("sweep: {grid: {envs.A: [1]}, runs: [{envs.A: 2}]}", "give exactly one of grid"),
    ("sweep: {runs: []}", "runs: needs at least one run"),
    ("sweep: {random: {samples: 2, space: {envs.A: {uniform: [0, 1], choice: [1]}}}}",
     "give exactly one of uniform"),
    ("sweep: {grid: {envs.A: [1]}, mode: best}", "mode"),
])
def test_a_bad_sweep_names_its_line(sweep, problem):
    with pytest.raises(SpecError) as e:
        load_spec_text(BASE + sweep + "\n", "lr.yaml")
    assert e.value.line == 5 and e.value.key.startswith("sweep"), e.value.message
    assert problem in e.value.message


def test_a_value_its_job_file_could_not_hold_is_refused_at_the_sweep():
    spec = load_spec_text(BASE + "sweep:\n  runs: [{estimate.hours: 2}, {estimate.hours: soon}]\n",
                          "lr.yaml")
    with pytest.raises(SpecError) as e:
        expand(spec)
    assert (e.value.line, e.value.key) == (5, "sweep")
    assert "run 2 (hours=soon): estimate.hours" in e.value.problem
    big = load_spec_text(BASE + "sweep:\n  grid: {envs.A: " + str(list(range(30))) + ", envs.B: "
                         + str(list(range(10))) + "}\n", "lr.yaml")
    with pytest.raises(SpecError, match="expands to 300 runs, more than 200"):
        expand(big)


def test_the_rules_longest_first_shares_and_best():
    assert rules.longest_first([1.0, 3.0, 0.5, 3.0]) == [1, 3, 0, 2]
    assert rules.budget_shares(10.0, [1.0, 3.0, 0.0, 1.0]) == [2.0, 6.0, 0.0, 2.0]
    assert rules.budget_shares(10.0, [0.0, 0.0]) == [None, None]
    runs = [("a", {"loss": 0.5}), ("b", {"loss": 0.2}), ("c", {"loss": float("nan")}), ("d", {})]
    assert rules.best(runs, "loss", "min") == ("b", 0.2)
    assert rules.best(runs, "loss", "max") == ("a", 0.5)
    assert rules.best(runs, "acc", "max") is None and rules.best(runs, None, "min") is None


# -- placed together: a 2-GPU cluster and the cloud ----------------------------------------

SWEEP = """\
name: lr
resources: {accelerators: A100:1}
run: python train.py
schedule: {kind: exploratory}
estimate: {hours: 1, gpu: A100}
sweep:
  runs: [%s]
  metric: val_loss
"""
# 12 runs; the 2 longest are the 5th and the 10th.
HOURS = [0.5, 0.4, 0.6, 0.5, 1.8, 0.3, 0.7, 0.5, 0.4, 1.6, 0.2, 0.5]


@pytest.fixture
def team(tmp_path, monkeypatch):
    """An orch in hybrid mode whose on-prem cluster has 2 A100s (each launched run holds
    one, as Ray reports it) and whose cloud is the fake."""
    import providers.registry
    from orchestrator.service.orch import Orch
    from orchestrator.settings import Settings
    from providers.cloud import CloudProvider
    from providers.ray_cluster import ClusterJob, ClusterSnapshot, Node
    from tests.fake_sky import FakeSky
    from tests.unit.providers.test_cloud import ROOT, T0

    launched: list = []

    class Cluster:
        address = "http://head:8265"

        def prepare(self):
            pass

        def submit(self, launch):
            launched.append(launch)
            return launch.job_id

        def gone(self):
            return None

        def state(self, backend_id, info=None):
            from providers.base import BackendState

            return BackendState("RUNNING")

        def logs(self, backend_id):
            return ""

        def cancel(self, backend_id):
            pass

    def read(target, settings):
        address = settings.ray_address
        jobs = tuple(ClusterJob(x.job_id, "RUNNING", x.job_id, x.tags.name, T0,
                                x.tags.est_hours, 1.0, x.tags.gpus)
                     for x in launched)
        used = sum(j.gpus for j in jobs)
        nodes = tuple(Node(f"n{i}", f"10.0.0.{i}", True, i == 0, 8.0, 1.0, "A100") for i in range(2))
        return ClusterSnapshot(address, nodes, {"CPU": 16.0, "GPU": 2.0},
                               {"CPU": float(len(jobs)), "GPU": used}, jobs, T0)

    monkeypatch.setattr(providers.registry, "read_capacity", read)
    monkeypatch.setattr("providers.cloud.enabled_clouds", lambda clouds: (list(clouds), {}))
    orch = Orch(Settings(home=tmp_path / "home", mode="hybrid", ray_address="http://head:8265",
                         clouds=["lambda", "runpod", "aws"], catalog_dir=ROOT / "examples" / "catalog"))
    orch.core.providers["onprem"] = Cluster()
    fake = FakeSky([])
    orch.core.providers["cloud"] = CloudProvider(sdk=fake, startup_minutes=6, clock=lambda: T0 + 10_000)
    return orch, launched, fake


def _sweep(hours=HOURS, extra=""):
    runs = ", ".join(f"{{estimate.hours: {h}}}" for h in hours)
    return load_spec_text(SWEEP % runs + extra, "lr.yaml")


def test_the_longest_runs_take_the_owned_gpus_and_the_rest_rent(team):
    orch, on_cluster, fake = team
    done = orch.submit_sweep(_sweep())
    recs = [s.rec for s in done]
    assert [r.info.sweep_run for r in recs] == list(range(1, 13))  # the file's order
    owned = [r.info.sweep_run for r in recs if r.target == "onprem"]
    assert sorted(owned) == [5, 10], [(r.info.sweep_run, r.target) for r in recs]
    assert [launch.job_id for launch in on_cluster] == [recs[4].id, recs[9].id]  # longest first
    assert {r.target for r in recs if r.info.sweep_run not in (5, 10)} == {"cloud"}
    assert len(fake.launched) == 10
    assert len({r.info.sweep for r in recs}) == 1 and recs[0].info.sweep.startswith("sweep-")
    assert recs[4].info.sweep_values == "hours=1.8" and recs[0].info.sweep_runs == 12


def test_runs_submitted_one_by_one_in_the_files_order_do_worse(team):
    """The baseline the sweep beats: the first two runs of the file take the GPUs."""
    orch, on_cluster, fake = team
    for run in expand(_sweep()):
        orch.submit(run)
    assert [launch.tags.name for launch in on_cluster] == ["lr-1", "lr-2"]


def test_a_sweep_over_its_budget_is_refused_with_nothing_written(team):
    orch, on_cluster, fake = team
    with pytest.raises(InputError) as e:
        orch.submit_sweep(_sweep(extra="  max_cost: 1\n"))
    assert "its 12 runs are planned at" in e.value.message and "over its max_cost 1.00 USD" in e.value.message
    assert not orch.core.store.list() and not on_cluster and not fake.launched


def test_each_run_gets_its_share_of_the_sweeps_budget(team):
    orch, on_cluster, fake = team
    recs = [s.rec for s in orch.submit_sweep(_sweep(extra="  max_cost: 500\n"))]
    shares = [r.spec["budget"]["max_cost"] for r in recs]
    assert sum(shares) == pytest.approx(500)
    assert shares[0] > shares[10]  # by planned cost: both rent, the first for longer
    planned = [r.decision.estimate.cost for r in recs]
    assert all(share >= cost for share, cost in zip(shares, planned))


def test_status_shows_the_sweep_as_one_row_and_cancel_stops_every_run(team, monkeypatch):
    from typer.testing import CliRunner

    from orchestrator.cli.commands import app
    from orchestrator.client import Local

    orch, on_cluster, fake = team
    monkeypatch.setattr("orchestrator.client.connect", lambda **kw: Local(orch.settings, orch=orch))
    recs = [s.rec for s in orch.submit_sweep(_sweep())]
    for r, loss in ((recs[0], 0.4), (recs[3], 0.25)):
        orch.core.store.update(r.id, metrics={"val_loss": loss})
    r = CliRunner().invoke(app, ["status"])
    assert r.exit_code == 0, r.output
    line = " ".join(r.stdout.split())
    assert f"{recs[0].info.sweep} │ lr (sweep of 12: " in line
    assert "2 running" in line and "best val_loss 0.25 (hours=0.5))" in line
    assert r.stdout.count("\n sweep-") == 1 and "\n orch-" not in r.stdout
    r = CliRunner().invoke(app, ["status", recs[4].id])
    assert f"lr ({recs[0].info.sweep}): run 5 of 12, hours=1.8" in r.stdout
    r = CliRunner().invoke(app, ["cancel", recs[0].info.sweep])
    assert r.exit_code == 0, r.output
    assert all(orch.get(x.id).cancel_requested for x in recs)


def test_plan_shows_each_run_and_the_total(team, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from orchestrator.cli.commands import app
    from orchestrator.client import Local

    orch, _, _ = team
    monkeypatch.setattr("orchestrator.client.connect", lambda **kw: Local(orch.settings, orch=orch))
    job = tmp_path / "lr.yaml"
    job.write_text(SWEEP % ", ".join(f"{{estimate.hours: {h}}}" for h in HOURS))
    r = CliRunner().invoke(app, ["plan", str(job), "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["sweep"] == "lr" and len(d["runs"]) == 12 and d["values"][4] == "hours=1.8"
    assert d["total_cost_usd"] == pytest.approx(sum(p["estimate"]["cost_usd"] for p in d["runs"]))
    assert not orch.core.store.list()  # a plan writes nothing
