"""Before `orch serve` reads a request's body: its token, its size, and its pace.

A pure ASGI middleware, in front of every /v1 request that may carry a body (any method
but GET, HEAD and OPTIONS). The token is looked up (in a worker thread: the store is
blocking) before a byte of the body is read: FastAPI reads and parses a JSON body before
any dependency runs, so without this a caller with no token could make the server hold
hundreds of MiB. A declared Content-Length over the endpoint's limit is refused at once, a
body without one is counted as it arrives and cut off at the limit, and each wait for the
next piece of it is bounded (a client that stops sending gets 408, not a request held
open forever). Every refusal closes the connection, as the rest of the body is never read.
The caller it found is left in the request's state, for the endpoint's dependency.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, MutableMapping, Optional

from orchestrator.base.errors import OrchError, StoreError
from orchestrator.records.caller import Caller
from orchestrator.server import auth

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

STATE_KEY = "orch_caller"  # request.state.orch_caller: the Caller found here
_NO_BODY = ("GET", "HEAD", "OPTIONS")


@dataclass(frozen=True)
class Limit:
    """The most bytes an endpoint's body may hold, and its refusal for a body of `size`
    bytes (None: over the limit while arriving, its full size unknown)."""

    max_bytes: int
    refuse: Callable[[Optional[int]], OrchError]


def json_limit(max_bytes: int) -> Limit:
    """The limit of a JSON body (a job file, its envs and secrets)."""
    from orchestrator.service.upload import TooLarge, human

    def refuse(size: Optional[int]) -> OrchError:
        return TooLarge(f"the request body is {human(size) if size else 'over the limit'}; "
                        f"this server takes at most {human(max_bytes)}",
                        "a job file is at most 1 MiB: put data in files the job reads "
                        "(workdir, file_mounts)")
    return Limit(max_bytes, refuse)


def install(app: Any, settings: Any, identify: Callable[[Optional[str]], Caller],
            json_max: int) -> None:
    """Put a BodyGuard in front of the FastAPI `app`: an upload's body up to upload_max_mb
    (with the upload's own refusal), any other up to `json_max` bytes."""
    from orchestrator.service.upload import MiB, too_large

    uploads = settings.upload_max_mb * MiB

    def limit(path: str) -> Limit:
        if path == "/v1/uploads" and uploads > 0:  # 0: the endpoint refuses, reading nothing
            return Limit(uploads, lambda size: too_large(size, uploads))
        return json_limit(json_max)

    app.add_middleware(BodyGuard, identify=identify, limit=limit,
                       timeout_s=settings.serve_body_timeout_s)


class _Refused(Exception):
    def __init__(self, status: int, error: OrchError):
        super().__init__(error.message)
        self.status, self.error = status, error


class BodyGuard:
    """`identify(token)` answers the caller or raises auth.Unauthorized (blocking: run in a
    thread); `limit(path)` the body limit of a /v1 path; `timeout_s` the longest wait for
    the next piece of a body."""

    def __init__(self, app: ASGIApp, identify: Callable[[Optional[str]], Caller],
                 limit: Callable[[str], Limit], timeout_s: float):
        self.app, self.identify, self.limit, self.timeout_s = app, identify, limit, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or not scope["path"].startswith("/v1/")
                or scope["method"] in _NO_BODY):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        from starlette.concurrency import run_in_threadpool

        try:
            who = await run_in_threadpool(self.identify, auth.bearer(headers.get("authorization")))
        except auth.Unauthorized as e:
            await _answer(send, 401, e, {"www-authenticate": "Bearer"})
            return
        except StoreError as e:  # the database away: a 503 its client retries, as the routes'
            await _answer(send, 503, e)
            return
        scope.setdefault("state", {})[STATE_KEY] = who
        limit = self.limit(scope["path"])
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > limit.max_bytes:
            await _answer(send, 413, limit.refuse(int(length)))
            return
        await self._guarded(scope, receive, send, limit)

    async def _guarded(self, scope: Scope, receive: Receive, send: Send, limit: Limit) -> None:
        refused: Optional[_Refused] = None
        started = done = False
        received = 0

        async def next_piece() -> Message:
            nonlocal refused, received, done
            if done:  # the body is in: waiting for a disconnect is not ours to bound
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.timeout_s)
            except asyncio.TimeoutError:
                refused = _Refused(408, OrchError(
                    f"the request body stopped arriving: nothing for {self.timeout_s:g} s",
                    "send the body without pausing; over a slow link, raise "
                    "serve_body_timeout_s (ORCH_SERVE_BODY_TIMEOUT_S) on the server"))
                raise refused from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit.max_bytes:
                    refused = _Refused(413, limit.refuse(None))
                    raise refused
                done = not message.get("more_body", False)
            return message

        async def answer(message: Message) -> None:
            nonlocal started
            if refused is not None:  # the app's own answer to a body it could not read
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, next_piece, answer)
        except Exception:
            if refused is None:
                raise
        if refused is not None and not started:
            await _answer(send, refused.status, refused.error)


async def _answer(send: Send, status: int, e: OrchError, extra: Optional[dict] = None) -> None:
    """The API's error shape, {"error", "hint"}, closing the connection (the rest of the
    request's body is not read)."""
    body = json.dumps({"error": e.message, "hint": e.hint}).encode()
    headers = {"content-type": "application/json", "content-length": str(len(body)),
               "connection": "close", **(extra or {})}
    await send({"type": "http.response.start", "status": status,
                "headers": [(k.encode(), v.encode()) for k, v in headers.items()]})
    await send({"type": "http.response.body", "body": body})
