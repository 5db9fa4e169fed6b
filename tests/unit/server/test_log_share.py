"""Followers of one job share one read of its log a second (issue 47: 30 followers each
re-read the whole log every second, and another user's list took 6.8 s)."""

from __future__ import annotations

import threading

from orchestrator.server.log_share import FRESH_S, KEEP_S, LogShare


def test_followers_of_one_job_share_one_read_and_a_read_under_way_is_waited_for():
    now = [0.0]
    share = LogShare(clock=lambda: now[0])
    reads, release = [], threading.Event()

    def fetch():
        reads.append(1)
        release.wait(5)
        return ("RUNNING", "line\n")

    got: list = []
    followers = [threading.Thread(target=lambda: got.append(share.read("j", fetch)))
                 for _ in range(30)]
    for t in followers:
        t.start()
    release.set()
    for t in followers:
        t.join(5)
    assert len(reads) == 1 and got == [("RUNNING", "line\n")] * 30
    now[0] += FRESH_S / 2
    share.read("j", fetch)
    assert len(reads) == 1  # still fresh
    now[0] += FRESH_S
    share.read("j", fetch)
    share.read("other", fetch)  # another job: its own read
    assert len(reads) == 3
    now[0] += KEEP_S + 1
    share.read("other", fetch)
    assert len(share) == 1  # a job no one follows any more is forgotten


def test_a_read_that_fails_is_not_kept():
    share = LogShare(clock=lambda: 0.0)
    calls = []

    def failing():
        calls.append(1)
        raise OSError("backend away")

    for _ in range(2):
        try:
            share.read("j", failing)
        except OSError:
            pass
    assert len(calls) == 2
