"""A real local Ray instance, started through `orch local up` and stopped by the tests."""

from __future__ import annotations

import contextlib
import json
import shutil
import time

import psutil
import pytest

from providers.local_ray import processes_matching
from tests.conftest import run_orch, short_tmp


def ray_processes_under(path: str) -> list:
    return processes_matching(path)


def local_ray_dir(home) -> str:
    """The temp folder of the local Ray a home's orch runs on (its state, `local/ray.json`)."""
    return json.loads((home / "local" / "ray.json").read_text())["temp_dir"]


def actor_processes(ray_dir, *titles: str) -> list:
    """The actor processes of the Ray whose temp folder is `ray_dir` (their raylet names it)
    whose title (Ray titles them `ray::Class...`) holds one of `titles`: the other pytest
    process may be running a job on another Ray at the same moment."""
    found = []
    for title in titles:
        for p in processes_matching(title):
            with contextlib.suppress(psutil.Error):
                if str(ray_dir) in " ".join(p.parent().cmdline()):
                    found.append(p)
    return found


def train_processes(ray_dir) -> list:
    """Ray Train's actors of that Ray: its controllers and workers."""
    return actor_processes(ray_dir, "ray::RayTrainWorker", "ray::TrainController")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A shared Ray (the session's local Ray, the two-node cluster) is stopped as soon as this
    process's next test does not use it, not at the run's end: tests/scheduling.py runs a
    Ray's tests one after the other in one process, and an idle Ray takes about a tenth of a
    core from the tests still running. A later test that asked for it would start it again."""
    result = yield
    if nextitem is not None:  # after the last test, the session's own teardown stops them
        from tests.scheduling import SHARED

        for name in SHARED:
            if name in item.fixturenames and name not in getattr(nextitem, "fixturenames", ()):
                fixturedef = item._request._fixture_defs.get(name)  # pytest has no public way
                if fixturedef is not None:
                    fixturedef.finish(item._request)
    return result


@pytest.fixture(scope="session")
def cluster():
    """The two-node loopback cluster (tests/integration/cluster.py), started once a session
    for every test file that needs it. A test that kills its second node starts it again."""
    from tests.integration.cluster import TwoNodeCluster

    c = TwoNodeCluster(short_tmp("oc"))
    try:
        c.start_head()
        c.start_node()
        yield c
    finally:
        left = c.stop()
        assert not left, f"cluster processes left running: {left}"


# Variables of the environment `orch local up` starts the session's local Ray from that no
# job may see: one an admin's serve_env_secrets would list for some user only, and orch's
# own metrics token.
SERVER_ONLY = {"SERVER_ONLY_TOKEN": "server-only-0c5e1f", "ORCH_METRICS_TOKEN": "m" * 40}


@pytest.fixture(scope="session")
def ray_home():
    home = short_tmp("ohr")
    # Fake AWS credentials in every Ray process, so jobs reach the tests' moto S3 server:
    # passed on by name, as an admin would (the local Ray gets no other variable of orch's).
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[local]\npass_env = ["AWS_ACCESS_KEY_ID", '
                                      '"AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", '
                                      '"AWS_EC2_METADATA_DISABLED"]\n')
    # And what a server's environment holds that no job may see (test_job_reach.py).
    proc = run_orch(home, "local", "up", "--json", timeout=300, AWS_ACCESS_KEY_ID="testing",
                    AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1",
                    **SERVER_ONLY)
    assert proc.returncode == 0, proc.stderr
    state = json.loads(proc.stdout)
    try:
        yield home
    finally:
        down = run_orch(home, "local", "down", timeout=120)
        deadline = time.monotonic() + 20
        while ray_processes_under(state["temp_dir"]) and time.monotonic() < deadline:
            time.sleep(0.5)
        leftover = ray_processes_under(state["temp_dir"])
        shutil.rmtree(home, ignore_errors=True)
        assert down.returncode == 0, down.stderr
        assert not leftover, f"processes left running: {leftover}"


def on_session_ray(home, ray_home):
    """`home` in local mode on the session's local Ray and its runner host, rather than a Ray
    of its own (a start and a stop of about 20 s each): its `local` folder, where orch keeps
    the local Ray's state, is the session home's. Remove it with `remove_home`."""
    (home / "local").symlink_to(ray_home / "local", target_is_directory=True)
    return home


def remove_home(home) -> None:
    """Teardown of a home on the session's Ray: the Ray stays up (`ray_home` stops it at the
    session's end and checks that no process of it is left)."""
    link = home / "local"
    if link.is_symlink():
        link.unlink()
    shutil.rmtree(home, ignore_errors=True)


def wait_until(what: str, check, timeout: float = 120, poll_s: float = 0.3):
    """check()'s first truthy value, polled until `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def client_home():
    """A client's own ORCH_HOME, empty: what it shows can only come from the server."""
    path = short_tmp("ohc")
    yield path
    shutil.rmtree(path, ignore_errors=True)
