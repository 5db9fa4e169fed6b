"""Local jobs orch starts without a Ray job (providers/process_jobs.py, jobs/keeper.py): real
processes, their state, log, exit code and cancel kept in the job's folder as Ray's Jobs API
kept them; a job that plays the attacker reaches nothing of the process that started it."""

from __future__ import annotations

import io
import os
import signal
import stat
import time
import zipfile
from pathlib import Path

import pytest

from providers.process_jobs import ProcessJobs
from providers.ray_cluster import ClusterSnapshot


def _wait(jobs: ProcessJobs, job_id: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        state = jobs.state(job_id)
        if state.status not in ("PENDING", "RUNNING") or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def _package(files: dict) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, (text, mode) in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFREG | mode) << 16
            z.writestr(info, text)
    return buf.getvalue()


@pytest.fixture
def jobs(tmp_path):
    return ProcessJobs(tmp_path / "orch-jobs")


def test_a_job_runs_in_its_unpacked_folder_with_only_its_environment(jobs, monkeypatch):
    monkeypatch.setenv("ORCH_STORE_URL", "postgresql://orch:hunter2@db/orch")  # orch's own
    package = _package({"run.sh": ("echo from the script\n", 0o755), "data/x.txt": ("x", 0o644),
                        "../escape.txt": ("out", 0o644), "suid": ("x", 0o4755)})
    env = {"PATH": os.environ["PATH"], "GREETING": "hello"}
    cmd = "echo $GREETING; pwd; ./run.sh; env | sort | grep -c =; env | grep -c hunter2 || true"
    assert jobs.submit("orch-a1", cmd, env, package, {"orch_job": "orch-a1"}) == "orch-a1"
    state = _wait(jobs, "orch-a1")
    assert state.status == "SUCCEEDED" and state.exit_code == 0, state
    assert state.info["backend_start"] <= state.info["backend_end"] <= time.time()
    lines = jobs.logs("orch-a1").splitlines()
    work = jobs.root / "orch-a1" / "workdir"
    assert lines[:3] == ["hello", str(work), "from the script"], lines
    assert lines[-1] == "0"  # nothing of orch's environment
    assert (work / "data" / "x.txt").read_text() == "x"
    assert not (jobs.root / "orch-a1" / "escape.txt").exists()
    assert stat.S_IMODE((work / "suid").stat().st_mode) == 0o755  # no set-id bit kept
    assert stat.S_IMODE((jobs.root / "orch-a1").stat().st_mode) == 0o700
    assert stat.S_IMODE(jobs.root.stat().st_mode) == 0o700


def test_a_failing_job_says_its_exit_code_and_a_job_is_never_started_twice(jobs):
    jobs.submit("orch-b1", "echo ran >> count; exit 3", {"PATH": os.environ["PATH"]}, None, {})
    state = _wait(jobs, "orch-b1")
    assert state.status == "FAILED" and state.exit_code == 3
    assert state.message == "Job entrypoint command failed with exit code 3"
    # The same id again (a submit that crashed after the start, recovered): not run again.
    assert jobs.submit("orch-b1", "echo ran >> count", {"PATH": os.environ["PATH"]}, None, {}) == "orch-b1"
    time.sleep(0.5)
    assert (jobs.root / "orch-b1" / "workdir" / "count").read_text() == "ran\n"
    assert jobs.state("orch-nothing").unknown
    with pytest.raises(ValueError):
        jobs.submit("../orch-c1", "true", {}, None, {})
    assert not jobs.has("../orch-b1") and jobs.state("../orch-b1").unknown


def test_a_cancel_stops_the_job_and_what_it_started_and_one_that_ignores_it_is_killed(jobs):
    env = {"PATH": os.environ["PATH"]}
    jobs.submit("orch-d1", "sleep 300 & echo $! > child; wait", env, None, {"orch_job": "orch-d1"})
    jobs.submit("orch-d2", "trap '' TERM; echo started; sleep 300 & wait; sleep 300", env, None, {})
    deadline = time.monotonic() + 10
    while not (jobs.root / "orch-d1" / "workdir" / "child").exists() or "started" not in jobs.logs("orch-d2"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    running = jobs.state("orch-d1")  # said as Ray's Jobs API says it (a record's history)
    assert (running.status, running.message) == ("RUNNING", "Job is currently running.")
    snap = jobs.add_to(ClusterSnapshot("local", (), {}, {}, (), time.time()))
    assert {j.submission_id for j in snap.jobs} == {"orch-d1", "orch-d2"}
    assert next(j for j in snap.jobs if j.submission_id == "orch-d1").orch_id == "orch-d1"
    child = int((jobs.root / "orch-d1" / "workdir" / "child").read_text())
    started = time.monotonic()
    jobs.cancel("orch-d1")
    jobs.cancel("orch-d2")
    assert _wait(jobs, "orch-d1").status == "CANCELLED"
    state = _wait(jobs, "orch-d2")
    assert state.status == "CANCELLED" and state.exit_code == -signal.SIGKILL
    assert 2.5 < time.monotonic() - started < 10  # SIGKILL 3 s after the SIGTERM it ignored
    assert not os.path.exists(f"/proc/{child}") or _zombie(child)
    assert jobs.running() == []


def test_a_killed_keeper_fails_its_job_and_orch_keeps_no_child(jobs):
    jobs.submit("orch-e1", "echo $$ > group; sleep 300", {"PATH": os.environ["PATH"]}, None, {})
    pid = int((jobs.root / "orch-e1" / "pid").read_text().split()[0])
    with open(f"/proc/{pid}/stat") as f:
        parent = int(f.read().rsplit(")", 1)[1].split()[1])
    assert parent != os.getpid()  # not a child of orch's: nothing for orch to reap
    group = jobs.root / "orch-e1" / "workdir" / "group"
    deadline = time.monotonic() + 10
    while not group.exists() or not group.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
        state = _wait(jobs, "orch-e1")
        assert state.status == "FAILED" and "without its exit status" in state.message
    finally:  # the command its keeper no longer stops
        os.killpg(int(group.read_text()), signal.SIGKILL)


def test_the_secret_file_is_the_jobs_alone_and_forgotten(jobs):
    jobs.submit("orch-f1", "ls -l .orch-env-1; sleep 300", {"PATH": os.environ["PATH"]}, None, {},
                secret_file=(".orch-env-1", b"TOKEN=1\n"))
    path = jobs.root / "orch-f1" / "workdir" / ".orch-env-1"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    jobs.cancel("orch-f1")
    _wait(jobs, "orch-f1")
    jobs.forget_secrets("orch-f1")
    assert not path.exists()
    assert jobs.logs("orch-f1").startswith("-rw-------")


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_sigterm_that_is_no_cancel_stops_the_job_as_failed(jobs):
    # `orch local down` ends every process of the local Ray, a job's keeper among them.
    jobs.submit("orch-g1", "echo up; sleep 300", {"PATH": os.environ["PATH"]}, None, {})
    deadline = time.monotonic() + 10
    while "up" not in jobs.logs("orch-g1"):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(int((jobs.root / "orch-g1" / "pid").read_text().split()[0]), signal.SIGTERM)
    state = _wait(jobs, "orch-g1")
    assert state.status == "FAILED" and state.exit_code == -signal.SIGTERM, state


def test_an_ended_jobs_folder_goes_after_a_while_its_log_and_state_stay(jobs):
    jobs.submit("orch-h1", "echo done", {"PATH": os.environ["PATH"]}, _package({"a": ("1", 0o644)}), {})
    assert _wait(jobs, "orch-h1").status == "SUCCEEDED"
    old = time.time() - 601
    os.utime(jobs.root / "orch-h1" / "exit", (old, old))
    jobs.submit("orch-h2", "true", {"PATH": os.environ["PATH"]}, None, {})
    assert not (jobs.root / "orch-h1" / "workdir").exists()
    assert jobs.logs("orch-h1") == "done\n" and jobs.state("orch-h1").status == "SUCCEEDED"
    assert (jobs.root / "orch-h2" / "workdir").is_dir()


def test_a_pid_file_the_job_rewrote_names_no_process_for_a_cancel(jobs):
    # The job names another process of the same user (here one the test started, its start
    # time copied too) in its own pid file: orch's cancel must not signal that one.
    import subprocess

    bystander = subprocess.Popen(["sleep", "300"])
    try:
        ticks = Path(f"/proc/{bystander.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        jobs.submit("orch-i1", f"sleep 1; echo '{bystander.pid} {ticks}' > ../pid; sleep 300",
                    {"PATH": os.environ["PATH"]}, None, {})
        deadline = time.monotonic() + 10
        while str(bystander.pid) not in (jobs.root / "orch-i1" / "pid").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        jobs.cancel("orch-i1")
        time.sleep(0.5)
        assert bystander.poll() is None  # untouched
        assert jobs.running() == []  # nor counted as the job's keeper
    finally:
        bystander.kill()
        bystander.wait()
        import psutil

        for p in psutil.process_iter(["cmdline"]):  # the job's keeper and what it runs
            if str(jobs.root / "orch-i1") in (p.info["cmdline"] or []):
                for q in [*p.children(recursive=True), p]:
                    q.kill()


def test_the_session_is_found_while_ray_workers_make_its_link_again(tmp_path):
    # Each worker process Ray starts removes `session_latest` and makes it again (Ray's own
    # try_to_symlink, called here as a worker calls it); a job read in between must still
    # be found in the current session, never taken for one that Ray does not have.
    import threading

    from ray._private.utils import try_to_symlink

    from providers.process_jobs import in_session

    old, current = tmp_path / "session_2026-12-05_09-00-00_1_7", tmp_path / "session_2026-12-06_10-00-00_2_9"
    for session in (old, current):
        (session / "orch-jobs" / "orch-r1").mkdir(parents=True)
    (current / "orch-jobs" / "orch-r1" / "job.json").write_text("{}")
    link = str(tmp_path / "session_latest")
    try_to_symlink(link, str(current))
    stop = threading.Event()

    def workers_starting():
        while not stop.is_set():
            try_to_symlink(link, str(current))

    flipper = threading.Thread(target=workers_starting)
    flipper.start()
    try:
        found = [in_session(tmp_path).has("orch-r1") for _ in range(3000)]
    finally:
        stop.set()
        flipper.join()
    assert all(found), f"{found.count(False)} of {len(found)} reads lost the job"
    os.remove(link)  # no link at all (a worker stopped mid-way): the newest session
    assert in_session(tmp_path).root == current / "orch-jobs"


def test_a_job_that_rewrites_its_folder_changes_neither_its_state_nor_its_hours(jobs):
    # The attacker: its folder is its own to write (the same OS user). It says it ended at
    # once with success, an hour from now, and that it started in 1970 (and then in words):
    # it runs on, fails as it really does, and is charged from orch's launch to its real end.
    launched = time.time()
    forge = ('printf \'{"code": 0, "end": %s, "on_request": false}\' > ../exit; '
             'printf \'{"start_time": 0, "metadata": {}}\' > ../job.json; sleep 1; '
             'printf \'{"start_time": "x"}\' > ../job.json; exit 3') % (launched + 3600)
    jobs.submit("orch-h1", forge, {"PATH": os.environ["PATH"]}, None, {"orch_job": "orch-h1"})
    deadline = time.monotonic() + 10
    while not (jobs.root / "orch-h1" / "exit").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert jobs.state("orch-h1", launched).status == "RUNNING"  # its keeper still runs it
    _wait(jobs, "orch-h1")
    state = jobs.state("orch-h1", launched)
    assert (state.status, state.exit_code) == ("FAILED", 3), state
    assert state.info["backend_start"] == launched
    assert launched + 1 <= state.info["backend_end"] <= time.time(), state.info
    assert jobs.state("orch-h1").status == "FAILED"  # no launch time, a start in words: no error


def test_a_job_that_plants_links_and_fifos_in_its_folder_holds_up_and_reads_nothing(jobs, tmp_path):
    # The attacker: it swaps its log for a FIFO (a read would wait for ever) and its record
    # for a link to a file of the server's, then runs on. orch answers at once, reads neither,
    # still sees it running, and still stops it.
    server_file = tmp_path / "server-token"
    server_file.write_text("token-of-the-server")
    plant = (f"rm -f ../log && mkfifo ../log && rm ../job.json && ln -s {server_file} ../job.json"
             " && echo planted > ../planted; sleep 300")
    jobs.submit("orch-p1", plant, {"PATH": os.environ["PATH"]}, None, {"orch_job": "orch-p1"})
    deadline = time.monotonic() + 10
    while not (jobs.root / "orch-p1" / "planted").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    started = time.monotonic()
    assert jobs.logs("orch-p1") == ""
    assert jobs.has("orch-p1") and jobs.state("orch-p1", time.time()).status == "RUNNING"
    assert [r["submission_id"] for r in jobs.running()] == []  # its record is not read
    jobs.cancel("orch-p1")
    assert time.monotonic() - started < 2
    state = _wait(jobs, "orch-p1")
    assert state.status == "CANCELLED", state
    assert "token-of-the-server" not in jobs.logs("orch-p1")
