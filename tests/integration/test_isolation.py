"""The per-user isolation mode (issue 46, part 3): two client users' jobs on the server's
own machine, each in a Ray instance of its own owner's, as an OS user of its own. Bob's job
plays the attacker against Alice's running job with every method a job on a shared cluster
had: her processes' /proc/<pid>/environ, her Ray's logs and packages (her token file, her
dashboard with his own token), stopping her job, and orch's home. It gets nothing, and
Alice's job runs on. Real Ray instances started as real OS users: root only."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import short_tmp
from tests.integration.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="the per-user mode makes OS users and starts Ray as them: it needs root and "
           "useradd (CI runs as root)")]

# Run by Bob's job (under the users' interpreter, with Ray): each attempt that obtains
# something is listed under "reached".
ATTACK = r"""
import glob, json, os, sys, urllib.request
target = json.load(open("target.json"))
needle = target["needle"]
reached, tried = [], 0

def attempt(what, fn):
    global tried
    tried += 1
    try:
        got = fn()
    except Exception:
        return
    if got:
        reached.append(what)

def read(path):
    with open(path, "rb") as f:
        return f.read()

for pid in target["pids"]:
    attempt(f"environ {pid}", lambda: needle.encode() in read(f"/proc/{pid}/environ"))
    attempt(f"cmdline-env {pid}", lambda: needle.encode() in read(f"/proc/{pid}/cmdline"))
attempt("her Ray's folder", lambda: os.listdir(target["temp_dir"]) or True)
attempt("her logs", lambda: any(needle.encode() in read(p) for p in glob.glob(
    target["temp_dir"] + "/session_latest/logs/job-driver-*.log")) or None)
attempt("her token", lambda: read(target["token"]))
attempt("her home", lambda: os.listdir(target["home"]) or True)
for path in target["orch"]:
    attempt(f"orch {path}", lambda: os.listdir(path) if os.path.isdir(path) else read(path))
mine = read(os.environ["RAY_AUTH_TOKEN_PATH"]).decode().strip()
headers = {"Authorization": f"Bearer {mine}"}
def api(path, method="GET"):
    req = urllib.request.Request(target["dashboard"] + path, headers=headers, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read()
attempt("her jobs", lambda: api("/api/jobs/"))
attempt("her package list", lambda: api("/api/packages/gcs/x.zip"))
attempt("stop her job", lambda: api(f"/api/jobs/{target['job']}/stop", "POST"))
def her_gcs():  # every package key in her GCS, with his own token (the shared mode's attack)
    import threading
    from ray._raylet import GcsClient
    got = []
    def run():
        got.append(GcsClient(address=target["gcs"]).internal_kv_keys(b"gcs://", None))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)
    return got and got[0]
attempt("her packages in GCS", her_gcs)
attempt("own environ", lambda: b"PATH=" in read("/proc/self/environ"))  # the method works
print("ATTACK " + json.dumps({"reached": reached, "tried": tried}))
"""


def _user_python(root: Path) -> Path:
    """An interpreter the job users can run, with this install's packages: orch's own is
    where a test machine keeps it, under /root, which only root can enter."""
    python = Path(sys.executable)
    if all(os.stat(p).st_mode & 0o001 for p in python.resolve().parents):
        return python
    venv = root / ".py"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip",
                    str(venv)], check=True, timeout=120)
    site = sysconfig.get_paths()["purelib"]
    (next(venv.glob("lib/python3*/site-packages")) / "orch.pth").write_text(
        f"import site; site.addsitedir({site!r})\n")
    return venv / "bin" / "python"


def attack_result(provider, backend_id: str, prefix: str) -> dict:
    """What the attacker's job printed on its line starting `prefix`, once it has ended."""
    wait_until("his job ended", lambda: provider.state(backend_id).status in (
        "SUCCEEDED", "FAILED"), timeout=180)
    out = provider.logs(backend_id)
    line = next((x for x in out.splitlines() if x.startswith(prefix)), None)
    assert line, out[-3000:]
    return json.loads(line[len(prefix):])


def test_another_users_job_reaches_nothing_of_a_running_job_nor_orchs_home(tmp_path):
    import psutil

    from orchestrator.service.orch import Orch
    from orchestrator.settings import Settings
    from orchestrator.spec.load import load_spec_text
    from providers.isolated import IsolatedLocalProvider
    from providers.user_ray import os_user_name

    home, root = short_tmp("ohi"), short_tmp("oiu")
    os.chmod(root, 0o755)
    tag = os.urandom(3).hex()
    alice, bob = f"a{tag}", f"b{tag}"
    settings = Settings(home=home, mode="local", serve_isolation="per-user",
                        serve_isolation_root=root, serve_isolation_python=_user_python(root),
                        local={"runner_host": False, "cpus": 1})
    needle = "alice-" + os.urandom(8).hex()
    orch = Orch(settings)
    users = [os_user_name(alice, {}), os_user_name(bob, {})]  # made by orch on their first job
    try:
        spec = load_spec_text(f"name: victim\nsecrets:\n  HER_KEY: {needle}\nrun: echo key=$HER_KEY; sleep 300\n")
        rec = orch.launch(orch.record(spec, owner=alice).rec, spec)
        provider = orch.provider("local")
        assert isinstance(provider, IsolatedLocalProvider)
        her = provider._for_job(rec.backend_id)
        assert her is not None
        wait_until("her job running", lambda: provider.state(rec.backend_id).status == "RUNNING",
                   timeout=120)
        her_state = her.ray._state()

        def hers() -> list[int]:
            return [p.pid for p in psutil.process_iter(["uids"])
                    if p.info["uids"] and p.info["uids"].real == her.ray.user.uid]

        def holding() -> list[int]:  # her job's processes, with her value in their environ
            found = []
            for pid in hers():
                with contextlib.suppress(OSError):
                    if needle.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                        found.append(pid)
            return found

        wait_until("her value in her job's processes", holding, timeout=60)
        pids = hers()
        assert len(pids) >= 3, pids  # her Ray's daemons and her job
        target = {"needle": needle, "pids": pids, "temp_dir": her_state["temp_dir"],
                  "token": str(her.ray.user_token), "home": str(her.ray.user.home),
                  "dashboard": her_state["dashboard_url"], "job": rec.backend_id,
                  "gcs": her_state["address"],
                  "orch": [str(home), str(home / "orch.db"), str(home / "secret_key"),
                           str(home / "local" / "auth_token"), str(her.ray.token_file)]}
        work = tmp_path / "attack"
        work.mkdir()
        (work / "attack.py").write_text(ATTACK)
        (work / "target.json").write_text(json.dumps(target))
        bob_spec = load_spec_text(
            f"name: attacker\nworkdir: {work}\nrun: python attack.py\n")
        bob_rec = orch.launch(orch.record(bob_spec, owner=bob).rec, bob_spec)
        his = provider._for_job(bob_rec.backend_id)
        assert his is not None and his.ray.user.uid != her.ray.user.uid
        result = attack_result(provider, bob_rec.backend_id, "ATTACK ")
        assert result["reached"] == ["own environ"], result
        assert result["tried"] >= 2 * len(pids) + 12, result
        assert provider.state(rec.backend_id).status == "RUNNING"
        # Her next job runs on her warm instance, not a new one.
        again = load_spec_text("name: again\nrun: id -un\n")
        again_rec = orch.launch(orch.record(again, owner=alice).rec, again)
        warm = provider._for_job(again_rec.backend_id).ray._state()
        assert (warm["started_at"], warm["address"]) == (her_state["started_at"],
                                                         her_state["address"])
        wait_until("her second job ended", lambda: provider.state(
            again_rec.backend_id).status == "SUCCEEDED", timeout=60)
        assert her.ray.user.name in provider.logs(again_rec.backend_id).splitlines()
        provider.cancel(rec.backend_id)
        wait_until("her job stopped", lambda: provider.state(rec.backend_id).status
                   == "CANCELLED", timeout=60)
        # Idle past serve_isolation_idle_s: orch serve's next tick stops both.
        settings.serve_isolation_idle_s = 0
        assert sorted(orch.stop_idle()) == sorted(users)
        assert her.ray.status() is None and his.ray.status() is None
        assert not [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and
                    p.info["uids"].real in (her.ray.user.uid, his.ray.user.uid)]
    finally:
        orch.stop_idle(everyone=True)
        orch.close()
        for name in users:
            subprocess.run(["userdel", name], capture_output=True, timeout=60)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
