"""The git work `orch serve` does for a request (reading the commit a client's `workdir:
{url, ref}` names), off the request threads: serve_git_max threads of its own, at most
serve_git_per_user commands per user, and a refusal at once (HTTP 429) rather than a queue
that grows while a host does not answer. A URL the server does not allow is refused before
any of it (service/git_workdir.url_problem)."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from orchestrator.base.errors import OrchError
from orchestrator.service import git_workdir

ADMITTED_PER_THREAD = 2  # commands the gate holds per thread, running or waiting for one


class Busy(OrchError):
    """Too many requests of this kind at once (HTTP 429): the same request later may pass."""


class GitGate:
    def __init__(self, settings):
        self.where = git_workdir.reach(settings, server=True)
        self.per_user = settings.serve_git_per_user
        self.capacity = settings.serve_git_max * ADMITTED_PER_THREAD
        self._pool = ThreadPoolExecutor(settings.serve_git_max, thread_name_prefix="orch-git")
        self._lock = threading.Lock()
        self._by_user: dict[str, int] = {}
        self._admitted = 0

    def check(self, spec) -> None:
        """InputError for a git workdir URL this server does not allow (no git runs)."""
        if spec.git_workdir is not None:
            git_workdir.check_url(spec.git_workdir.url, self.where, spec)

    async def pin(self, spec, user: str) -> None:
        """The spec's git workdir pinned to the commit its ref names (git_workdir.pin), on
        the gate's threads; Busy at once when `user` or the gate has as many as it takes."""
        self.check(spec)
        if spec.git_workdir is None or spec.git_workdir.commit is not None:
            return
        self._admit(user)
        try:
            job: Future = self._pool.submit(git_workdir.pin, spec, self.where)
        except BaseException:
            self._release(user)
            raise
        # Released when git is done, not when the request is: a client that hangs up
        # leaves its git running until its timeout, and counted until then.
        job.add_done_callback(lambda _: self._release(user))
        await asyncio.wrap_future(job)

    def _admit(self, user: str) -> None:
        with self._lock:
            if self._by_user.get(user, 0) >= self.per_user:
                raise Busy(f"{user} has {self.per_user} requests reading git repositories on "
                           "this server already", "wait for your other requests to finish, "
                           "then send this one again")
            if self._admitted >= self.capacity:
                raise Busy("this server is reading as many git repositories as it takes at "
                           "once", "wait for your other requests to finish, or a moment, "
                           "then send this one again")
            self._by_user[user] = self._by_user.get(user, 0) + 1
            self._admitted += 1

    def _release(self, user: str) -> None:
        with self._lock:
            self._admitted -= 1
            left = self._by_user.get(user, 1) - 1
            if left > 0:
                self._by_user[user] = left
            else:
                self._by_user.pop(user, None)
