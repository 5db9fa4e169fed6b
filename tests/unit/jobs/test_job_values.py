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
    server = job_values.Server({"API_TOKEN": "s3cret"}, host_pid=None, folder=str(tmp_path))
    try:
        assert job_values.fetch(server.path) == {"API_TOKEN": "s3cret"}
        assert oct(os.stat(server.dir).st_mode & 0o777) == "0o700"
    finally:
        server.close()
    assert not os.path.exists(server.dir)


def test_the_host_and_what_it_starts_are_refused(tmp_path):
    # This process plays the host: it, and a child it starts, ask and get nothing.
    server = job_values.Server({"API_TOKEN": "s3cret"}, host_pid=os.getpid(), folder=str(tmp_path))
    try:
        with pytest.raises(RuntimeError, match="refused"):
            job_values.fetch(server.path)
        child = subprocess.run([sys.executable, "-c", FETCH, server.path], capture_output=True,
                               text=True, timeout=60)
        assert child.returncode != 0 and "s3cret" not in child.stdout + child.stderr
        assert server.refused == 2
    finally:
        server.close()


def test_the_host_hands_on_names_only():
    remote = job_values.Remote({"PUBLIC": "p"}, "/nowhere", ["API_TOKEN"])
    assert repr(remote) == "<hidden: API_TOKEN, PUBLIC>"
    assert remote.path == "/nowhere" and "s3cret" not in repr(vars(remote))
