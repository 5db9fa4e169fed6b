"""The local Ray orch starts listens on loopback only (docs/security.md, "Ray's local ports")."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from providers.local_ray import processes_matching
from tests.conftest import run_orch, status_in_process
from tests.integration.conftest import wait_until

pytestmark = pytest.mark.integration

# Sockets that docs/security.md lists as not on loopback, with the reason: (process
# name or cmdline fragment, reason). Empty: every socket is on loopback.
NOT_LOOPBACK: dict[str, str] = {}


def _ray_pids(state: dict) -> dict[int, str]:
    """This instance's processes, found as `orch local down` finds them (an argument naming
    its temp dir or ending in its GCS port, as the Ray Client server's does), and their
    children."""
    found = {}
    for p in processes_matching(state["temp_dir"], f":{state['ports']['gcs']}"):
        for q in [p, *p.children(recursive=True)]:
            try:
                found[q.pid] = " ".join(q.cmdline())[:200]
            except psutil.Error:
                pass
    return found


def _bound_sockets(pids: dict[int, str]) -> list[tuple[str, str, int, str]]:
    """(kind, ip, port, process) of every listening TCP and bound UDP socket of `pids`."""
    out = []
    for c in psutil.net_connections(kind="inet"):
        if c.pid not in pids or not c.laddr:
            continue
        tcp = c.type == socket.SOCK_STREAM
        if (tcp and c.status == psutil.CONN_LISTEN) or (not tcp and not c.raddr):
            out.append(("tcp" if tcp else "udp", c.laddr.ip, c.laddr.port, pids[c.pid]))
    return out


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    mapped = getattr(addr, "ipv4_mapped", None)  # ::ffff:127.0.0.1, Ray's gRPC servers
    return (mapped or addr).is_loopback


def _job_pids(state: dict, job_id: str) -> dict[int, str]:
    """The processes of a job orch started itself (providers/process_jobs.py): its keeper's
    tree, and what the warm-Python zygote forked for its `python` (providers/warm_python.py;
    this test's job is the only one running on the session's Ray): the job's Ray driver."""
    from providers.process_jobs import _keeper, in_session
    from providers.warm_python import SOCKET

    folder = in_session(Path(state["temp_dir"])).folder(job_id)
    tops = [pid] if folder and (pid := _keeper(folder)) is not None else []
    tops += [p.pid for p in processes_matching(str(Path(state["temp_dir"]) / SOCKET))]
    found = {}
    for top in tops:
        with contextlib.suppress(psutil.Error):
            for q in psutil.Process(top).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    found[q.pid] = " ".join(q.cmdline())[:200]
    return found


def _with_job(state: dict, job_id: str):
    """(pids, sockets) of the instance and the job once both the job's driver and the worker
    running its task listen; else None."""
    job = _job_pids(state, job_id)
    pids = {**_ray_pids(state), **job}
    sockets = _bound_sockets(pids)
    driver = any(s[3] in job.values() for s in sockets)
    worker = any(s[3].startswith("ray::sleeper") for s in sockets)
    return (pids, sockets) if driver and worker else None


DRIVER = ("import ray, time\n"
          "ray.init()\n"
          "@ray.remote\n"
          "def sleeper():\n"
          "    time.sleep(30)\n"
          "task = sleeper.remote()\n"
          "time.sleep(30)\n")


def test_every_port_of_the_local_ray_is_on_loopback(ray_home, tmp_path):
    state = json.loads((ray_home / "local" / "ray.json").read_text())
    # A job running, a Ray driver whose task runs on a worker: both have servers of their own.
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "driver.py").write_text(DRIVER)
    job = tmp_path / "sleep.yaml"
    job.write_text("name: ports\nworkdir: work\nrun: python driver.py\n")
    proc = run_orch(ray_home, "submit", "--detach", str(job))
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    try:
        rec = wait_until("the job to run", lambda: (r := status_in_process(ray_home, job_id))
                         ["status"] == "RUNNING" and r, timeout=120)
        # Its processes' servers start as it does: until its driver's and its worker's listen.
        pids, sockets = wait_until("the job's driver and worker to listen",
                                   lambda: _with_job(state, rec["backend_id"]), timeout=60)
    finally:
        run_orch(ray_home, "cancel", job_id)
    assert len(pids) > 3 and sockets, (pids, sockets)
    bound = {port for kind, ip, port, _ in sockets if _loopback(ip)}
    for name in ("gcs", "dashboard", "client", "agent_http", "agent_grpc", "runtime_env", "metrics"):
        assert state["ports"][name] in bound, f"the {name} port is not on loopback: {sockets}"
    open_ = [s for s in sockets if not _loopback(s[1])
             and not any(part in s[3] for part in NOT_LOOPBACK)]
    assert not open_, "listening beyond loopback:\n" + "\n".join(map(str, open_))


def test_the_dashboard_refuses_a_request_without_the_token(ray_home):
    """What protects the loopback ports from the machine's other users (docs/security.md)."""
    state = json.loads((ray_home / "local" / "ray.json").read_text())
    token = (ray_home / "local" / "auth_token").read_text().strip()
    url = state["dashboard_url"] + "/api/jobs/"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=10)
    assert refused.value.code in (401, 403), refused.value.code
    with urllib.request.urlopen(urllib.request.Request(
            url, headers={"Authorization": f"Bearer {token}"}), timeout=10) as ok:
        assert ok.status == 200
