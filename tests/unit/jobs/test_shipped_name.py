"""orch's runner on a target: under its shipped name (`_orch_runner`), so that a job's own
`jobs` package is the job's, while a job without one still imports orch's helpers as `jobs`."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from providers.runner_package import NAME, SOURCE, link_in, module
from tests.conftest import ROOT

# Run in a fresh interpreter as a target runs it: the runner on the path under its shipped
# name, the job's workdir first (as worker_entry puts it), orch's own install beside.
WORKER = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, os.getcwd())
    from _orch_runner import train_loops
    train_loops.offer_public_name()
    fn = train_loops.imported(sys.argv[1])
    print(fn.__module__, fn({}))
    import jobs, _orch_runner.context
    try:
        import jobs.context
        ours = jobs.context is _orch_runner.context
    except ImportError:
        ours = False
    print(os.path.relpath(jobs.__file__), ours, _orch_runner.context.__spec__.name)
    print(train_loops.resolve_callable("image-classification").__module__)
""")


def _worker(tmp_path, workdir, target):
    path = link_in(tmp_path / "runner")
    env = {**os.environ, "PYTHONPATH": str(path)}
    proc = subprocess.run([sys.executable, "-c", WORKER, target], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.splitlines()


def test_a_jobs_package_of_the_jobs_own_is_the_one_its_entrypoint_imports(tmp_path):
    work = tmp_path / "work"
    (work / "jobs").mkdir(parents=True)
    (work / "jobs" / "__init__.py").write_text("MINE = True\n")
    (work / "jobs" / "train.py").write_text(
        "import jobs\n\ndef train_loop(config):\n    return jobs.MINE\n")
    entry, public, builtin = _worker(tmp_path, work, "jobs.train:train_loop")
    assert entry == "jobs.train True"
    # `jobs` stays the job's; orch's helpers are there under the shipped name only.
    assert public == f"jobs/__init__.py False {NAME}.context"
    assert builtin == f"{NAME}.builtin.image_classification"


def test_without_one_jobs_names_the_runners_own_modules(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "loop.py").write_text(
        "from jobs.context import current\n\ndef train_loop(config):\n"
        "    return current.__module__\n")
    entry, public, _ = _worker(tmp_path, work, "loop:train_loop")
    # The user's `from jobs.context import current` is the runner's own context module, so
    # `current()` is this run's context; the module keeps its own name and spec.
    assert entry == f"loop {NAME}.context"
    assert public.endswith(f" True {NAME}.context")  # jobs.__file__: the runner's


def test_the_runner_folder_links_this_install_and_backends_start_the_shipped_name(tmp_path):
    parent = link_in(tmp_path / "r")
    assert (parent / NAME).resolve() == SOURCE == (ROOT / "jobs").resolve()
    assert link_in(tmp_path / "r") == parent  # again: left as it is
    (parent / NAME).unlink()
    (parent / NAME).symlink_to(tmp_path)  # another install's
    assert (link_in(parent) / NAME).resolve() == SOURCE
    assert module("runner") == "_orch_runner.runner"


def test_the_local_ray_puts_the_runner_first_on_its_processes_path(tmp_path, monkeypatch):
    from providers.local_ray import LocalRay

    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    assert LocalRay(tmp_path).job_env()["PYTHONPATH"] == str(tmp_path / "local" / "runner")
    env = LocalRay(tmp_path, pass_env=["PYTHONPATH"]).job_env()  # the admin passes it on
    assert env["PYTHONPATH"] == f"{tmp_path / 'local' / 'runner'}{os.pathsep}/elsewhere"
    assert (tmp_path / "local" / "runner" / NAME).resolve() == SOURCE


def test_a_local_ray_an_earlier_orch_started_is_refused_with_how_to_restart_it(tmp_path, monkeypatch):
    from orchestrator.base.errors import BackendError
    from providers.local_ray import LocalRay

    ray = LocalRay(tmp_path)
    # Running, its state without the runner's folder: its processes cannot import the runner.
    monkeypatch.setattr(LocalRay, "status", lambda self: {"dashboard_url": "http://127.0.0.1:1"})
    with pytest.raises(BackendError) as refused:
        ray.up()
    assert "earlier version of orch" in refused.value.message
    assert "`orch local down`" in refused.value.hint
