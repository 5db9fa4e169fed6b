"""The per-user isolation mode on the on-prem target (issue 46, part 3): two client users'
jobs on the two-node loopback cluster, each in a Ray cluster of its owner's own (a head and
a worker node), as an OS user of its own, started through the base cluster. Bob's job plays
the attacker against Alice's running two-node job with every method a job on a shared
cluster had: her processes' /proc/<pid>/environ and cmdline on both nodes, her Ray's logs
and folders, her GCS packages and her Jobs API (list, logs, stop) with his own token, her
token files and the base cluster's. It gets nothing, and Alice's job runs on. Real Ray
clusters started as real OS users: root only."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import short_tmp
from tests.integration.conftest import wait_until
from tests.integration.test_isolation import ATTACK, _user_python, attack_result

pytestmark = [pytest.mark.integration, pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="the per-user mode makes OS users and starts Ray as them: it needs root and "
           "useradd (CI runs as root)")]

# Beside the local test's attack: her job's log and its stop through her Jobs API, and the
# base cluster's (where her cluster's holder job runs), with his token.
MORE = r"""
def api_at(base, path, method="GET"):
    req = urllib.request.Request(base + path, headers=headers, method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read()
attempt("her job's log", lambda: needle.encode() in api(f"/api/jobs/{target['job']}/logs"))
attempt("the base cluster's jobs", lambda: api_at(target["base"], "/api/jobs/"))
attempt("stop her cluster", lambda: api_at(target["base"], f"/api/jobs/{target['holder']}/stop", "POST"))
for path in target["more_logs"]:
    attempt(f"log {path}", lambda: any(needle.encode() in open(p, "rb").read() for p in
                                      glob.glob(path + "/session_latest/logs/*")) or None)
print("MORE " + json.dumps({"reached": reached, "tried": tried}))
"""


def test_another_users_job_reaches_nothing_of_a_two_node_job_on_the_owned_cluster(
        cluster, tmp_path):
    import psutil

    from orchestrator.service.orch import Orch
    from orchestrator.settings import Settings
    from orchestrator.spec.load import load_spec_text
    from providers.onprem_users import OnPremUsersProvider
    from providers.user_ray import os_user_name

    home, root = short_tmp("ohp"), short_tmp("opu")
    os.chmod(root, 0o755)
    tag = os.urandom(3).hex()
    alice, bob = f"a{tag}", f"b{tag}"
    settings = Settings(home=home, mode="hybrid", ray_address=cluster.address,
                        ray_token_file=cluster.token_file, onprem_isolation="per-user",
                        serve_isolation_root=root, serve_isolation_python=_user_python(root),
                        local={"object_store_mb": 100})
    needle = "alice-" + os.urandom(8).hex()
    orch = Orch(settings)
    users = [os_user_name(alice, {}), os_user_name(bob, {})]  # made on their first job
    try:
        spec = load_spec_text(
            "name: victim\nnum_nodes: 2\nplacement: {allow: [onprem]}\nresources: {cpus: 1}\n"
            f"secrets:\n  HER_KEY: {needle}\nenvs:\n  HER_NOTE: {needle}\n"
            "run: echo key=$HER_KEY; sleep 300\n")
        rec = orch.launch(orch.record(spec, owner=alice).rec, spec)
        assert rec.target == "onprem", rec
        provider = orch.provider("onprem")
        assert isinstance(provider, OnPremUsersProvider)
        name, her = provider._for_job(rec.backend_id)
        assert her is not None and name == users[0]
        wait_until("her job running", lambda: provider.state(rec.backend_id).status == "RUNNING",
                   timeout=120)
        uid = int(subprocess.run(["id", "-u", users[0]], capture_output=True, text=True,
                                 check=True).stdout)

        def hers() -> list[int]:
            return [p.pid for p in psutil.process_iter(["uids"])
                    if p.info["uids"] and p.info["uids"].real == uid]

        def holding() -> list[int]:  # her job's processes, with her value in their environ
            found = []
            for pid in hers():
                with contextlib.suppress(OSError):
                    if needle.encode() in Path(f"/proc/{pid}/environ").read_bytes():
                        found.append(pid)
            return found

        # Her driver (her secret) and her job's processes on each node (her envs, which
        # Ray gives every process of the job).
        wait_until("her value on both nodes", lambda: len(holding()) >= 3, timeout=90)
        raylets = [p for p in hers() if "raylet" in psutil.Process(p).name()]
        assert len(raylets) == 2, raylets  # a head and a worker node, both hers
        pids = hers()
        folder = root / users[0]
        target = {"needle": needle, "pids": pids, "temp_dir": str(folder / "r0"),
                  "token": str(folder / ".ray-token"), "home": str(folder),
                  "dashboard": her.address, "job": rec.backend_id, "gcs": her.cluster["gcs"],
                  "base": cluster.address, "holder": her.cluster["holder"],
                  "more_logs": [str(folder / "r1"), str(cluster.head_dir), str(cluster.node_dir)],
                  "orch": [str(home), str(home / "orch.db"), str(cluster.token_file),
                           str(provider._paths(users[0])[1])]}
        work = tmp_path / "attack"
        work.mkdir()
        (work / "attack.py").write_text(ATTACK + MORE)
        (work / "target.json").write_text(json.dumps(target))
        bob_spec = load_spec_text(f"name: attacker\nworkdir: {work}\nplacement: {{allow: "
                                  "[onprem]}\nresources: {cpus: 1}\nrun: python attack.py\n")
        bob_rec = orch.launch(orch.record(bob_spec, owner=bob).rec, bob_spec)
        his_name, his = provider._for_job(bob_rec.backend_id)
        assert his_name == users[1] and his is not None and his.address != her.address
        result = attack_result(provider, bob_rec.backend_id, "MORE ")
        assert result["reached"] == ["own environ"], result
        assert result["tried"] >= 2 * len(pids) + 18, result
        assert provider.state(rec.backend_id).status == "RUNNING"
        # Her next job runs on her warm cluster, as her.
        again = load_spec_text("name: again\nplacement: {allow: [onprem]}\nrun: id -un\n")
        again_rec = orch.launch(orch.record(again, owner=alice).rec, again)
        assert provider._for_job(again_rec.backend_id)[1].cluster == her.cluster
        wait_until("her second job ended", lambda: provider.state(
            again_rec.backend_id).status == "SUCCEEDED", timeout=60)
        assert users[0] in provider.logs(again_rec.backend_id).splitlines()
        provider.cancel(rec.backend_id)
        wait_until("her job stopped", lambda: provider.state(rec.backend_id).status
                   == "CANCELLED", timeout=60)
        # Idle past serve_isolation_idle_s: orch serve's next tick stops both clusters.
        settings.serve_isolation_idle_s = 0
        assert sorted(orch.stop_idle()) == sorted(users)
        assert not [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and
                    p.info["uids"].real == uid]
        assert cluster.alive_nodes() == 2
    finally:
        orch.stop_idle(everyone=True)
        orch.close()
        for name in users:
            subprocess.run(["userdel", name], capture_output=True, timeout=60)
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
