"""`orch doctor`: each check as ok, a clear problem with its fix, or skipped; exit 1 on any
problem. Backends are real servers on loopback (a stub Ray dashboard, moto's S3)."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import pwd
import stat
import subprocess
import sys
import threading
import time

import psutil
import pytest

from orchestrator.service import doctor
from orchestrator.settings import Settings
from providers.local_ray import _free_port
from tests.conftest import ROOT
from tests.moto_server import moto_s3  # noqa: F401  (a fixture)
from tests.unit.store.test_store_recovery import fill, orch

# The SQLite file itself (damage, modes, WAL); test_store_pg.py checks a PostgreSQL store.
pytestmark = pytest.mark.sqlite_only

SECRET = "wJalrXUtnFEMI-doctor-must-never-print-this"


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No ORCH_ or AWS settings from the machine running the tests; no AWS files either."""
    for key in list(os.environ):
        if key.startswith(("ORCH_", "RAY_", "AWS_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def checks(settings: Settings) -> dict[str, doctor.Check]:
    return {c.name: c for c in doctor.run_checks(settings)}


def test_a_fresh_home_is_all_ok_or_skipped_and_doctor_creates_nothing(orch_home, monkeypatch,
                                                                     capsys):
    home = orch_home / "never-used"
    code, out, err = orch(monkeypatch, capsys, home, "doctor")
    assert code == 0, out + err
    lines = out.splitlines()
    assert [line.split()[0] for line in lines[:-1]] == ["ok", "ok", "ok", "ok", "ok",
                                                        "skipped", "skipped", "skipped"]
    assert lines[0] == f"ok       store            {home}/orch.db: none yet (a fresh home; " \
                       "the first job creates it)"
    assert lines[4].startswith("ok       local target     refused to clients: this home is in "
                               "local-only mode")
    assert lines[5] == "skipped  on-prem cluster  not configured (ORCH_RAY_ADDRESS)"
    assert lines[-1] == "no problems"
    assert not home.exists()


def test_store_counts_and_json(orch_home, monkeypatch, capsys, clean_env):
    fill(orch_home / "orch.db", 2)
    fill(orch_home / "orch.db", 1, status="FAILED")
    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["ok"] is True and report["problems"] == 0
    store = report["checks"][0]
    assert store == {"name": "store", "ok": True, "state": "ok", "fix": None,
                     "detail": f"{orch_home}/orch.db: schema 5, 3 jobs: 1 FAILED, 2 SUCCEEDED"}
    assert report["checks"][1]["detail"].startswith("PRAGMA integrity_check: ok")


def test_files_others_can_read_are_a_problem_with_the_chmod_that_fixes_it(orch_home, clean_env):
    fill(orch_home / "orch.db", 1)
    logs = orch_home / "logs"
    logs.mkdir(mode=0o700)
    log = logs / "orch-0000abcd.log"
    log.write_text("hi\n")
    os.chmod(log, 0o644)
    os.chmod(orch_home / "orch.db", 0o640)
    os.chmod(orch_home, 0o755)
    check = checks(Settings(home=orch_home))["file modes"]
    assert check.ok is False
    assert check.detail == (f"others can read: {orch_home} is 0755; {orch_home}/orch.db is 0640; "
                            f"{log} is 0644")
    assert check.fix == (f"chmod 700 {orch_home} && chmod 600 {orch_home}/orch.db {log}")
    os.system(check.fix)  # the fix it prints is the fix
    assert checks(Settings(home=orch_home))["file modes"].ok is True


def test_local_ray_is_read_not_started_and_its_token_must_be_private(orch_home, clean_env):
    local = orch_home / "local"
    local.mkdir(mode=0o700)
    dead = _free_port()  # an instance that crashed: its state file names a closed port
    (local / "ray.json").write_text(json.dumps({"dashboard_url": f"http://127.0.0.1:{dead}"}))
    (local / "auth_token").write_text("0123")
    os.chmod(local / "auth_token", 0o644)
    start = time.monotonic()
    check = checks(Settings(home=orch_home))["local Ray"]
    assert time.monotonic() - start < 3
    assert check.ok is False
    assert check.detail.startswith("not running (its last instance ended without `orch local "
                                   "down`")
    assert f"{local / 'auth_token'} is 0644" in check.detail
    assert check.fix == f"chmod 600 {local / 'auth_token'}"
    assert sorted(p.name for p in local.iterdir()) == ["auth_token", "ray.json"]


def test_onprem_closed_port_is_a_clear_problem_quickly(orch_home, clean_env):
    address = f"http://127.0.0.1:{_free_port()}"
    start = time.monotonic()
    check = checks(Settings(home=orch_home, ray_address=address))["on-prem cluster"]
    assert time.monotonic() - start < 2
    assert check.ok is False and check.detail.startswith(f"cannot reach Ray at {address}")
    assert "ORCH_RAY_ADDRESS" in check.fix


class _Dashboard(http.server.BaseHTTPRequestHandler):
    """Just enough of a Ray dashboard: two nodes (one with 4 A100-80GB, 1 in use), two jobs."""

    ANSWERS = {
        "/api/version": {"ray_version": "2.99.0", "version": "4"},
        "/api/v0/nodes?detail=1&limit=1000": {"data": {"result": {"result": [
            {"node_id": "head", "node_ip": "10.0.0.1", "state": "ALIVE", "is_head_node": True,
             "resources_total": {"CPU": 8}},
            {"node_id": "gpu1", "node_ip": "10.0.0.2", "state": "ALIVE",
             "resources_total": {"CPU": 32, "GPU": 4, "accelerator_type:A100-80GB": 1}}]}}},
        "/api/cluster_status": {"data": {"clusterStatus": {"loadMetricsReport": {
            "usage": {"CPU": [2.0, 40.0], "GPU": [1.0, 4.0]}}}}},
        "/api/jobs/": [{"submission_id": "a", "status": "RUNNING", "metadata": {}},
                       {"submission_id": "b", "status": "SUCCEEDED", "metadata": {}}],
    }

    def do_GET(self):
        body = json.dumps(self.ANSWERS[self.path]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_onprem_reachable_reports_version_and_free_gpus(orch_home, clean_env):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Dashboard)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"http://127.0.0.1:{server.server_port}"
    try:
        check = checks(Settings(home=orch_home, ray_address=address))["on-prem cluster"]
    finally:
        server.shutdown()
        server.server_close()
    assert check == doctor.Check("on-prem cluster", True, f"Ray 2.99.0 at {address}: 2 nodes "
                                 "alive, GPUs 3/4 free (A100-80GB x4), 1 jobs active")
    # The default mode, named as what it is (issue 46), and the per-user one.
    mode = checks(Settings(home=orch_home, ray_address=address))["cluster mode"]
    assert mode.detail.startswith("shared cluster, a trusted-team mode") and \
        "doesn't attempt to enforce isolation" in mode.detail
    from orchestrator.service.doctor.remote import cluster_mode_check
    from providers.onprem_users import OnPremUsersProvider
    from providers.registry import backend_for

    per_user = Settings(home=orch_home, ray_address=address, onprem_isolation="per-user")
    assert cluster_mode_check(per_user)[0].detail.startswith("per-user clusters: each client")
    assert isinstance(backend_for("onprem", per_user), OnPremUsersProvider)
    assert type(backend_for("onprem", Settings(home=orch_home, ray_address=address))) \
        is not OnPremUsersProvider


def test_skypilot_names_clouds_without_credentials_and_reads_the_catalogs(orch_home, clean_env,
                                                                          monkeypatch, tmp_path):
    assert checks(Settings(home=orch_home))["SkyPilot"].ok is None
    monkeypatch.setattr("providers.cloud.enabled_clouds",
                        lambda clouds: (["lambda"], {"runpod": "no API key in ~/.runpod"}))
    got = checks(Settings(home=orch_home, clouds=["lambda", "runpod"],
                          catalog_dir=ROOT / "examples" / "catalog"))
    assert got["SkyPilot"] == doctor.Check(
        "SkyPilot", False, "enabled: lambda; runpod: no API key in ~/.runpod",
        "`sky check runpod` says how to set up its credentials; or remove it from ORCH_CLOUDS")
    # lambda's catalog: 3 GPU instances, on-demand only; runpod's: 3, each also as spot.
    assert got["price catalogs"].detail == "readable: lambda (3 offers), runpod (6 offers)"
    got = checks(Settings(home=orch_home, clouds=["lambda"], catalog_dir=tmp_path))
    assert got["price catalogs"].ok is False
    assert f"no catalog at {tmp_path}/lambda/vms.csv" in got["price catalogs"].detail


def test_s3_without_credentials_or_endpoint_is_a_clear_problem(orch_home, clean_env,
                                                              monkeypatch):
    settings = Settings(home=orch_home, cloud_storage="s3://ckpt-bucket/runs",
                        s3_endpoint_url=f"http://127.0.0.1:{_free_port()}")
    check = checks(settings)["S3 cloud_storage"]
    assert check.ok is False and check.detail == "no AWS credentials for s3://ckpt-bucket on " \
                                                 f"S3 endpoint {settings.s3_endpoint_url}"
    assert "AWS_PROFILE" in check.fix
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIADOCTORTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    start = time.monotonic()
    check = checks(settings)["S3 cloud_storage"]
    assert time.monotonic() - start < 10
    assert check.detail == f"cannot reach S3 endpoint {settings.s3_endpoint_url}"
    assert SECRET not in repr(check) and "AKIADOCTORTEST" not in repr(check)


@pytest.mark.integration
def test_s3_against_moto_lists_the_bucket_or_names_the_missing_one(
        orch_home, clean_env, monkeypatch, capsys, moto_s3):  # noqa: F811
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--json",
                          ORCH_S3_ENDPOINT_URL=moto_s3.endpoint,
                          ORCH_CLOUD_STORAGE=f"s3://{moto_s3.bucket}/ckpt",
                          ORCH_ONPREM_CHECKPOINT_STORAGE="s3://no-such-bucket-here/ckpt")
    assert code == 1
    got = {c["name"]: c for c in json.loads(out)["checks"]}
    assert got["S3 cloud_storage"]["detail"] == (f"s3://{moto_s3.bucket}/ckpt on S3 endpoint "
                                                 f"{moto_s3.endpoint}: listable (credentials "
                                                 "from env)")
    assert got["S3 onprem_checkpoint_storage"]["detail"] == (
        f"no bucket 'no-such-bucket-here' on S3 endpoint {moto_s3.endpoint}")
    assert got["S3 onprem_checkpoint_storage"]["fix"] == (
        "create the bucket, or point ORCH_ONPREM_CHECKPOINT_STORAGE at one that exists")
    assert SECRET not in out + err


def test_problems_print_their_fix_and_exit_1(orch_home, monkeypatch, capsys):
    fill(orch_home / "orch.db", 1)
    os.chmod(orch_home / "orch.db", 0o644)
    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor")
    assert code == 1
    assert (f"problem  file modes       others can read: {orch_home}/orch.db is 0644\n"
            f"                            fix: chmod 600 {orch_home}/orch.db\n") in out
    assert out.endswith("1 problem\n")
    assert stat.S_IMODE(os.stat(orch_home / "orch.db").st_mode) == 0o644  # doctor fixes nothing


def test_each_s3_client_takes_the_credentials_there_are_now(clean_env, monkeypatch):
    # boto3's default session keeps the first credentials it finds for the process's life:
    # the doctor (and `orch serve`) would go on using keys that were since removed.
    from providers.artifacts import S3Artifacts

    endpoint = f"http://127.0.0.1:{_free_port()}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIADOCTORTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    first = S3Artifacts("s3://ckpt-bucket/runs", endpoint).client()
    assert first._request_signer._credentials.access_key == "AKIADOCTORTEST"
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert S3Artifacts("s3://ckpt-bucket/runs", endpoint).client()._request_signer._credentials is None


# -- job isolation: what the user jobs run as can read of the home --------------------------

HOME = ROOT / "srv-home"  # only a name in the messages: the table below is the file system
ORCH, JOBS, TOKEN = 998, 997, 990  # the server's user, the jobs' user, the Ray token's group
# Users as (uid, name, groups), built into JobUsers in the test (the old code has none).
SERVER = (ORCH, "orch", {ORCH})
WORKERS = (JOBS, "orch-jobs", {JOBS, TOKEN})
ROOT_USER = (0, "root", {0})


def served(home_mode: int = 0o700, home_gid: int = ORCH, **files: tuple[int, int]) -> dict:
    """A home owned by `orch` as name -> (uid, gid, mode, is_dir); files: name -> (mode, gid)."""
    stats = {".": (ORCH, home_gid, home_mode, True)}
    for name, (mode, gid) in files.items():
        stats[name.replace("_db", ".db")] = (ORCH, gid, mode, name in ("logs", "uploads"))
    return stats


PRIVATE = served(orch_db=(0o600, ORCH), secret_key=(0o600, ORCH), logs=(0o700, ORCH))


@pytest.mark.parametrize("users, stats, serving, ok, words", [
    # Ray as the server's own user (local mode, or both units as `orch`): everything.
    ([SERVER], PRIVATE, True, False,
     [f"jobs run as orch (uid {ORCH}), who can read {HOME}: its file list, orch.db, secret_key, "
      "logs; this home serves a team"]),
    # The token's group is also the home's, which lets its members in.
    ([WORKERS], served(0o750, TOKEN, orch_db=(0o600, ORCH), secret_key=(0o640, TOKEN)), True,
     False, [f"orch-jobs (uid {JOBS}), who can read {HOME}: its file list, secret_key;"]),
    # The same modes with a group the jobs' user is not in: nothing.
    ([WORKERS], served(0o750, 555, orch_db=(0o600, ORCH), secret_key=(0o640, 555)), True, True,
     [f"Ray's processes here run as orch-jobs (uid {JOBS}), who cannot read {HOME}'s store"]),
    # Others' bits: a 0755 home and a 0644 store.
    ([WORKERS], served(0o755, ORCH, orch_db=(0o644, ORCH), secret_key=(0o600, ORCH)), True,
     False, [f"can read {HOME}: its file list, orch.db;"]),
    # A 0644 store in a 0700 home: out of reach (the file modes check still names it).
    ([WORKERS], served(0o700, ORCH, orch_db=(0o644, ORCH)), True, True, ["who cannot read"]),
    # A searchable but unlistable home: the files by name.
    ([WORKERS], served(0o711, ORCH, secret_key=(0o604, ORCH)), True, False,
     [f"can read {HOME}: secret_key;"]),
    # Root reads every file whatever its mode.
    ([WORKERS, ROOT_USER], PRIVATE, True, False,
     [f"jobs run as root (uid 0), who reads every file whatever its mode, so can read {HOME}: "
      "its file list, orch.db, secret_key, logs"]),
    # The layout infra/ sets up: two users, the home 0700.
    ([WORKERS], PRIVATE, True, True, ["who cannot read"]),
    # Not serving: jobs running as you and reading your own store is local-only mode.
    ([SERVER], PRIVATE, False, True,
     ["who can read", "as expected: this home serves no team (its store has no API tokens), "
      "and in local-only mode your jobs run as you"]),
    # Serving unknown (the store could not be read): not a verdict either way.
    ([SERVER], PRIVATE, None, None, ["whether this home serves a team is unknown"]),
    # No Ray here: no user to judge.
    ([], PRIVATE, True, True, ["cannot tell: none of the Rays this home's jobs run on has a "
                               "process on this machine"]),
    ([SERVER], {}, True, True, [f"{HOME}: not created yet"]),
], ids=["same-uid", "group-member", "group-not-member", "others", "others-home-closed",
        "search-only-home", "root", "two-users", "not-serving", "serving-unknown", "no-ray",
        "no-home"])
def test_job_isolation_table(users, stats, serving, ok, words):
    from orchestrator.service.doctor.local import JobUser, Perms, job_isolation

    check = job_isolation(HOME, [JobUser(uid, name, frozenset(g)) for uid, name, g in users],
                          {k: Perms(*v) for k, v in stats.items()}, serving)
    assert check.name == "job isolation"
    assert check.ok is ok, check.detail
    for w in words:
        assert w in check.detail, check.detail
    if ok is False:
        assert check.fix is not None and "infra/README.md" in check.fix
        assert "its own user" in check.fix
    else:
        assert check.fix is None


def _serving_home(home) -> None:
    """A home `orch serve` used: an API token in its store, and its secret key."""
    from orchestrator.store import Store

    store = Store(home / "orch.db")
    store.add_token("alice", "0" * 64)
    store.close()
    (home / "secret_key").write_bytes(b"k" * 32)
    os.chmod(home / "secret_key", 0o600)


def _sleeper(*argv: str) -> subprocess.Popen:
    """A cheap long-lived process whose arguments are `argv` (argv[0] too): what Ray's
    processes look like to a process lister, without Ray. Returned once its arguments show:
    Popen returns as the child's exec closes its pipe, and a lister that looks in the moment
    before the kernel has set the new arguments reads none (a CI run's miss)."""
    proc = subprocess.Popen([argv[0], "-c", "import time; time.sleep(60)", *argv[1:]],
                            executable=sys.executable)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
                if f.read().split(b"\0")[0] == argv[0].encode():
                    return proc
        time.sleep(0.01)
    return proc


def test_a_cluster_worker_here_running_as_a_user_who_can_read_a_serving_home_fails(orch_home,
                                                                                  clean_env):
    """A real process titled as Ray titles its workers (`ray::IDLE`), running as this test's
    user, beside a home that serves a team and names a cluster (this machine may be a node)."""
    from orchestrator.service.doctor.local import JobUser, job_users, ray_processes

    _serving_home(orch_home)
    settings = Settings(home=orch_home, ray_address=f"http://127.0.0.1:{_free_port()}")
    worker = _sleeper("ray::IDLE")
    try:
        assert worker.pid in {p.pid for p in ray_processes(settings)}
        me = job_users([psutil.Process(worker.pid)])
        assert me == [JobUser(os.geteuid(), pwd.getpwuid(os.geteuid()).pw_name,
                              frozenset({os.getegid(), *os.getgroups()}))]
        check = checks(settings)["job isolation"]
    finally:
        worker.kill()
        worker.wait(10)
    assert check.ok is False, check.detail
    assert f"jobs run as {me[0]}, who " in check.detail
    assert "orch.db" in check.detail and "secret_key" in check.detail
    assert "this home serves a team (API tokens in its store)" in check.detail
    assert check.fix is not None and "infra/README.md" in check.fix
    assert "k" * 32 not in check.detail + check.fix


def test_in_local_mode_the_homes_own_ray_counts_and_another_ray_does_not(orch_home, clean_env):
    """Without a cluster this home's jobs run on its own local Ray (named by its state file):
    a Ray worker of some other Ray here runs other jobs."""
    from orchestrator.service.doctor.local import ray_processes

    _serving_home(orch_home)
    local = orch_home / "local"
    local.mkdir(mode=0o700)
    temp = str(local / "ray")
    dead = _free_port()  # not running as far as `local Ray` can tell: the check reads processes
    (local / "ray.json").write_text(json.dumps({"dashboard_url": f"http://127.0.0.1:{dead}",
                                                "temp_dir": temp}))
    settings = Settings(home=orch_home)
    other = _sleeper("ray::IDLE")
    try:
        assert other.pid not in {p.pid for p in ray_processes(settings)}
        raylet = _sleeper("/opt/ray/core/src/ray/raylet/raylet", f"--temp_dir={temp}")
        try:
            assert raylet.pid in {p.pid for p in ray_processes(settings)}
            check = checks(settings)["job isolation"]
        finally:
            raylet.kill()
            raylet.wait(10)
    finally:
        other.kill()
        other.wait(10)
    assert check.ok is False, check.detail
    assert "orch.db" in check.detail and "this home serves a team" in check.detail
