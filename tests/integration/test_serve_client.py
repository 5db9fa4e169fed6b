"""The CLI as a client of a real `orch serve` (one process for the module, on a loopback
port, with a temporary home): a job's workdir on the client is sent, unpacked on the
server and run from there; cron schedules are listed, shown, paused, resumed and removed
with `orch schedule`, each user's rights checked by the server. One local Ray, started by
the first job and stopped at the end."""

from __future__ import annotations

import json
import os
import stat

import pytest

from orchestrator.server import auth
from tests.conftest import home_store, run_orch, short_tmp, store_at
from tests.integration.conftest import on_session_ray, remove_home
from tests.integration.test_serve import Server

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(postgres_base, ray_home):
    """(server, home, tokens): alice and bob are users, root an admin."""
    home = on_session_ray(short_tmp("osc"), ray_home)
    with home_store(home, postgres_base):
        store = store_at(home)
        tokens = {}
        for name in ("alice", "bob", "root"):
            tokens[name], digest = auth.new_token()
            store.add_token(name, digest, admin=name == "root")
        store.close()
        server = Server(home)
        try:
            yield server, home, tokens
        finally:
            server.stop()
            remove_home(home)


def orch_as(served, client_home, who, *args, **env):
    server, _, tokens = served
    return run_orch(client_home, *args, timeout=300, ORCH_SERVER=server.url,
                    ORCH_TOKEN=tokens[who], **env)


@pytest.fixture
def code(tmp_path):
    """A client-side workdir with a script, what orch never sends, and a .orchignore."""
    code = tmp_path / "code"
    (code / ".git").mkdir(parents=True)
    (code / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (code / "hello.py").write_text(
        "import pathlib\n"
        "print('data:', pathlib.Path('data.txt').read_text().strip())\n"
        "print('sent:', sorted(p.name for p in pathlib.Path('.').iterdir()))\n")
    (code / "data.txt").write_text("from the client\n")
    (code / "secret.txt").write_text("never sent\n")
    (code / ".orchignore").write_text("secret.txt\n")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    return code


def test_a_client_workdir_is_sent_and_the_job_runs_from_the_servers_copy(served, client_home, code):
    server, home, _ = served
    job = code.parent / "jobs" / "hello.yaml"
    job.write_text("name: hello\nworkdir: ../code   # resolved from this file's folder\n"
                   "run: python hello.py\n")
    # Over the client's limit: refused before anything is sent.
    (code / "big.bin").write_bytes(os.urandom(2 << 20))
    proc = orch_as(served, client_home, "alice", "submit", str(job), ORCH_UPLOAD_MAX_MB="1")
    size = {p.name: p.stat().st_size for p in code.iterdir() if p.is_file()}
    assert proc.returncode == 2 and proc.stderr.splitlines()[0] == (
        f"error: the workdir {code} holds 2.0 MiB in 4 files; the upload limit is 1.0 MiB "
        f"(largest: big.bin 2.0 MiB, hello.py {size['hello.py']} bytes, data.txt 16 bytes)"), proc.stderr
    assert not (home / "uploads").exists() or os.listdir(home / "uploads") == []
    (code / "big.bin").unlink()

    proc = orch_as(served, client_home, "alice", "submit", str(job), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(proc.stdout)
    assert rec["status"] == "SUCCEEDED" and rec["owner"] == "alice"
    sent = f"3 files, {size['hello.py'] + size['data.txt'] + size['.orchignore']} bytes"
    assert f"note: sending the workdir {code} to the server: {sent}" in proc.stderr
    # The log: the script ran from the server's copy, which holds neither .git nor secret.txt.
    assert "data: from the client" in proc.stderr
    assert "sent: ['.orchignore', 'data.txt', 'hello.py']" in proc.stderr
    digest = rec["run"]["upload"]
    copy = home / "uploads" / digest
    assert sorted(os.listdir(copy)) == [".orchignore", "data.txt", "hello.py"]
    assert stat.S_IMODE(copy.stat().st_mode) == 0o700
    assert stat.S_IMODE((copy / "hello.py").stat().st_mode) == 0o600
    store = store_at(home)
    assert store.get(rec["id"]).spec["workdir"] == str(copy)
    store.close()
    # The same files again (a plan sends the workdir too): found on the server, not sent.
    # (To alice, who sent them: another user sends them to become an owner too.)
    proc = orch_as(served, client_home, "alice", "plan", str(job))
    assert proc.returncode == 0 and (
        f"note: workdir {code}: the server has these files already ({sent}); "
        "nothing sent") in proc.stderr
    assert sorted(os.listdir(home / "uploads")) == [".owners", digest]


def test_schedules_through_the_cli_with_each_users_rights(served, client_home, code):
    server, home, _ = served
    job = code.parent / "jobs" / "nightly.yaml"
    job.write_text("name: nightly\nworkdir: ../code\nrun: python hello.py\n"
                   "schedule: {cron: '0 3 * * *'}\n")
    proc = orch_as(served, client_home, "alice", "submit", str(job))
    assert proc.returncode == 0, proc.stderr
    sched_id = proc.stdout.split()[0]
    assert proc.stdout.startswith(f"{sched_id} nightly: cron 0 3 * * *, next run ")
    # The schedule runs its slots from the server's copy of the workdir.
    store = store_at(home)
    text = store.schedule(sched_id).source_text
    store.close()
    assert text.startswith(f'name: nightly\nworkdir: "{home}/uploads/')

    listed = orch_as(served, client_home, "bob", "schedule", "list")
    assert listed.returncode == 0, listed.stderr
    row = [line for line in listed.stdout.splitlines() if line.startswith(f" {sched_id} ")]
    assert [c.strip() for c in row[0].split("│")][:4] == [sched_id, "nightly", "alice", "0 3 * * *"]
    assert listed.stderr.strip() == f"run by the server at {server.url}"
    shown = orch_as(served, client_home, "bob", "schedule", "show", sched_id[:10], "--json")
    assert json.loads(shown.stdout)["log"][0]["message"] == "registered: cron '0 3 * * *'"

    # Another user's schedule: 403 from the server, exit 2; its owner and an admin may.
    for verb in ("pause", "rm"):
        proc = orch_as(served, client_home, "bob", "schedule", verb, sched_id)
        assert proc.returncode == 2 and proc.stderr.splitlines() == [
            f"error: {sched_id} belongs to alice: bob may not change it",
            "  -> only its owner or an admin token (`orch token create NAME --admin`) can"]
    proc = orch_as(served, client_home, "alice", "schedule", "pause", sched_id)
    assert proc.returncode == 0 and proc.stdout.startswith(f"{sched_id} nightly paused")
    proc = orch_as(served, client_home, "root", "schedule", "resume", sched_id)
    assert proc.returncode == 0 and proc.stdout.startswith(f"{sched_id} nightly resumed: next run")
    shown = orch_as(served, client_home, "alice", "schedule", "show", sched_id)
    assert [line.strip().split("  ", 1)[-1] for line in shown.stdout.splitlines()[-2:]] == [
        "paused by alice", "resumed by root"]

    # On the server's machine, without ORCH_SERVER: the same schedules, from its store.
    alone = run_orch(home, "schedule", "list", "--json")
    assert [s["id"] for s in json.loads(alone.stdout)] == [sched_id]
    proc = orch_as(served, client_home, "alice", "schedule", "rm", sched_id)
    assert proc.returncode == 0 and proc.stdout.startswith(f"{sched_id} nightly removed")
    proc = orch_as(served, client_home, "alice", "schedule", "show", sched_id)
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: no schedule '{sched_id}'")
    assert orch_as(served, client_home, "bob", "schedule", "list").stdout.startswith("no schedules")

    # Alone, a cron job file runs once, now, and says so.
    once = code.parent / "jobs" / "once.yaml"
    once.write_text("name: once\nrun: echo ran once\nschedule: {cron: '0 3 * * *'}\n")
    proc = run_orch(home, "submit", str(once))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.startswith("note: schedule.cron '0 3 * * *' is run by `orch serve`: alone, "
                                  "this job runs once, now.")
    assert "ran once" in proc.stdout and " SUCCEEDED in " in proc.stdout
