"""A hosted run's secret values travel from the job's runner to its workers, never through
the runner host (jobs/job_values.py): the runner refuses the host and what the host starts."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jobs import job_values

FETCH = "import sys; from jobs import job_values; print(job_values.fetch(sys.argv[1]))"


def test_a_process_other_than_the_host_gets_the_values(tmp_path):
    # This process plays the raylet (the node whose descendants, the run's workers, may ask).
    server = job_values.Server({"API_TOKEN": "s3cret"}, host_pid=None, folder=str(tmp_path),
                               node=os.getpid())
    try:
        assert job_values.fetch(server.path) == {"API_TOKEN": "s3cret"}
        assert oct(os.stat(server.dir).st_mode & 0o777) == "0o700"
    finally:
        server.close()
    assert not os.path.exists(server.dir)


def test_the_host_and_what_it_starts_are_refused(tmp_path):
    # This process plays the host: it, and a child it starts, ask and get nothing.
    server = job_values.Server({"API_TOKEN": "s3cret"}, host_pid=os.getpid(), folder=str(tmp_path),
                               node=os.getppid())
    try:
        with pytest.raises(RuntimeError, match="refused"):
            job_values.fetch(server.path)
        child = subprocess.run([sys.executable, "-c", FETCH, server.path], capture_output=True,
                               text=True, timeout=60)
        assert child.returncode != 0 and "s3cret" not in child.stdout + child.stderr
        assert server.refused == 2
    finally:
        server.close()


def test_a_process_outside_the_ray_node_is_refused_and_no_node_means_no_server(tmp_path):
    # The node is another process (a sleeping child): this process, of the same user and
    # able to reach the socket, is not below it, and gets nothing.
    node = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        server = job_values.Server({"API_TOKEN": "s3cret"}, host_pid=None,
                                   folder=str(tmp_path), node=node.pid)
        try:
            with pytest.raises(RuntimeError, match="refused"):
                job_values.fetch(server.path)
            assert server.refused == 1
        finally:
            server.close()
    finally:
        node.kill()
        node.wait()
    # Without a node to answer below, no server: the runner runs the job itself instead.
    with pytest.raises(ValueError):
        job_values.Server({"API_TOKEN": "s3cret"}, host_pid=None, folder=str(tmp_path), node=None)


def test_a_runner_with_no_ray_node_above_it_keeps_its_values_from_the_host(tmp_path, monkeypatch,
                                                                           capsys):
    from jobs import hosted

    monkeypatch.setenv(hosted.HOST_VAR, str(tmp_path / "host.sock"))
    monkeypatch.setattr(hosted, "connect", lambda sock: pytest.fail("reached the host"))
    req = hosted.RunRequest(job_id="orch-x", target="mlp")
    assert hosted.delegate(req, {"API_TOKEN": "s3cret"}) is None  # this test has no raylet above
    assert "runs in this process" in capsys.readouterr().err


def test_the_host_hands_on_names_only():
    remote = job_values.Remote({"PUBLIC": "p"}, "/nowhere", ["API_TOKEN"])
    assert repr(remote) == "<hidden: API_TOKEN, PUBLIC>"
    assert remote.path == "/nowhere" and "s3cret" not in repr(vars(remote))
