"""The backend interface: every backend is a `Backend` with nothing left abstract, its
optional capabilities are the mixins it subclasses, and the registry builds the backend of
each target and refuses the rest saying what to use."""

from __future__ import annotations

import ast
import inspect

import pytest

from orchestrator.base.errors import InputError
from orchestrator.base.targets import CLOUD, TARGETS, rented
from orchestrator.settings import Settings
from providers.base import Backend, HasCapacity, HasLaunchInfo, KeepsLogs
from providers.cloud import CloudProvider
from providers.local import LocalProvider
from providers.onprem import OnPremProvider
from providers.ray_jobs import RayJobsProvider
from providers.registry import BACKENDS, backend_class, backend_for

CLASSES = {"local": LocalProvider, "onprem": OnPremProvider, "cloud": CloudProvider}


@pytest.mark.parametrize("cls", [*CLASSES.values(), RayJobsProvider])
def test_every_backend_implements_the_whole_interface(cls):
    assert issubclass(cls, Backend) and not inspect.isabstract(cls)
    for name in Backend.__abstractmethods__:
        method = getattr(cls, name)
        assert not getattr(method, "__isabstractmethod__", False), name
        assert inspect.signature(method).parameters.keys() == \
            inspect.signature(getattr(Backend, name)).parameters.keys(), name


def test_capabilities_are_the_mixins_a_backend_subclasses():
    assert {t for t, c in BACKENDS.items() if issubclass(c, HasCapacity)} == {"local", "onprem"}
    assert {t for t, c in BACKENDS.items() if issubclass(c, HasLaunchInfo)} == {"cloud"}
    assert {t for t, c in BACKENDS.items() if issubclass(c, KeepsLogs)} == {"local"}


def test_what_a_launch_looks_like_is_known_per_backend_class(tmp_path):
    settings = Settings(home=tmp_path, cloud_storage="s3://b/ckpt",
                        onprem_checkpoint_storage="/shared/ckpt")
    assert [CLASSES[t].default_storage(settings) for t in ("local", "onprem", "cloud")] == [
        str(tmp_path / "checkpoints"), "/shared/ckpt", "s3://b/ckpt"]
    assert CloudProvider.runner_command() == "python3 -m _orch_runner.runner"
    assert '"$orch_py" -m _orch_runner.runner' in OnPremProvider.runner_command()
    assert LocalProvider.shell_prelude().startswith("export PATH=")
    assert OnPremProvider.shell_prelude() == ""
    # A multi-node train job: the runner alone where a Ray cluster spans the nodes; on
    # num_nodes VMs, jobs.multinode makes that cluster first.
    for cls in (LocalProvider, OnPremProvider):
        assert cls.train_command(2) == cls.runner_command()
    assert CloudProvider.train_command(1) == "python3 -m _orch_runner.runner"
    assert CloudProvider.train_command(2) == "python3 -m _orch_runner.multinode -- python3 -m _orch_runner.runner"
    assert (CloudProvider.launch_grace_s, OnPremProvider.launch_grace_s) == (600.0, 0.0)
    # Which targets rent their machines is one registry's answer (base.targets), and every
    # backend serves one of its names.
    assert [t for t in BACKENDS if rented(t)] == [CLOUD] and set(BACKENDS) == set(TARGETS)


def test_the_cloud_prelude_puts_the_shipped_runner_on_pythonpath(tmp_path):
    """SkyPilot exports a task's envs quoted: a `~` there would reach Python unexpanded."""
    import subprocess
    import sys

    script = CloudProvider.shell_prelude() + f"{sys.executable} -c 'import sys; print(sys.path)'"
    out = subprocess.run(["bash", "-c", script], env={"HOME": str(tmp_path), "PYTHONPATH": "/x"},
                         capture_output=True, text=True, timeout=60, check=True).stdout
    path = ast.literal_eval(out)
    assert str(tmp_path / ".orch-runner") in path and "/x" in path


def test_the_registry_builds_the_backend_of_each_target(tmp_path, monkeypatch):
    monkeypatch.setenv("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")  # what the SDK sets, undone after
    settings = Settings(home=tmp_path, ray_address="http://127.0.0.1:1")
    for target, cls in CLASSES.items():
        assert backend_class(target) is cls
        backend = backend_for(target, settings)
        assert type(backend) is cls and backend.name == target
    assert backend_for("local", settings).gone()  # no local Ray started under this home
    assert backend_for("onprem", settings).gone() is None


@pytest.mark.parametrize("target, settings", [
    ("mars", {}), ("onprem", {"ray_address": None}),  # unknown; on-prem without ORCH_RAY_ADDRESS
])
def test_the_registry_refuses_a_target_it_cannot_serve_saying_what_to_use(tmp_path, target, settings):
    with pytest.raises(InputError, match=f"target '{target}' is not available") as e:
        backend_for(target, Settings(home=tmp_path, **settings))
    assert "placement.allow" in (e.value.hint or "")
    if target not in CLASSES:
        with pytest.raises(InputError):
            backend_class(target)
