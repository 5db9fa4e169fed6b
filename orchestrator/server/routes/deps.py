"""What every route shares: the server's settings, scheduler and git gate (kept on the app's
state by `app.create_app`), and who the caller is (their bearer token, checked against the
store)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Optional

from fastapi import Request

from orchestrator.records.caller import Caller
from orchestrator.server import auth, guard
from orchestrator.server.git_gate import GitGate
from orchestrator.server.log_share import LogShare
from orchestrator.server.scheduler import Scheduler
from orchestrator.service.orch import Orch
from orchestrator.settings import Settings


@dataclass(frozen=True)
class Server:
    """What the routes run with: one per app."""
    settings: Settings
    scheduler: Scheduler
    git_gate: GitGate  # a client's git work, off the request threads
    log_share: LogShare = field(default_factory=LogShare)  # one read per followed job

    def service(self) -> AbstractContextManager[Orch]:
        """The service for this request's thread (its own store connection), closed after
        use: the one place every route takes it from."""
        return self.scheduler.session()


def server(request: Request) -> Server:
    return request.app.state.server


def identify(settings, token: Optional[str]) -> Caller:
    """Who holds `token` (blocking: the store); Unauthorized for none or an unknown one."""
    if token is None:
        raise auth.Unauthorized("this request needs a token: Authorization: Bearer <token>",
                                "`orch token create NAME` on the server makes one")
    from orchestrator.store import open_store

    store = open_store(settings)
    try:
        found = store.token_by_hash(auth.hash_token(token))
    finally:
        store.close()
    if found is None:
        raise auth.Unauthorized("unknown or revoked token", "`orch token list` on the server "
                                "shows the tokens; `orch token create NAME` makes a new one")
    return Caller(found["name"], found["admin"])


def caller(request: Request) -> Caller:
    found = getattr(request.state, guard.STATE_KEY, None)  # looked up before the body
    if isinstance(found, Caller):
        return found
    return identify(server(request).settings, auth.bearer(request.headers.get("authorization")))


def still_valid(request: Request) -> bool:
    """Whether the request's token is still known (not revoked since the request began):
    looked up afresh, never from what the request found at its start."""
    try:
        identify(server(request).settings, auth.bearer(request.headers.get("authorization")))
    except auth.Unauthorized:
        return False
    return True
