"""The upload routes: a client's workdir received as a tar.gz, and whether it is here."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Path, Request
from fastapi.concurrency import run_in_threadpool

from orchestrator.base.errors import InputError, NotFound
from orchestrator.records.caller import Caller
from orchestrator.server.routes.deps import Server, caller, server
from orchestrator.service.upload import DIGEST_PATTERN, MiB

router = APIRouter()

_UPLOAD_BODY = {"requestBody": {"required": True, "description": "a tar.gz of the workdir",
                                "content": {"application/octet-stream": {"schema": {
                                    "type": "string", "format": "binary"}}}}}


@router.post("/v1/uploads", status_code=201, openapi_extra=_UPLOAD_BODY)
async def upload(request: Request, who: Caller = Depends(caller), srv: Server = Depends(server)):
    """A job's workdir as a tar.gz (at most upload_max_mb): unpacked, safely, into this
    server's HOME/uploads/<sha256 of the body>, the id a job then names as `upload`; on a
    PostgreSQL store its archive is kept there too, for the other replicas.
    The same bytes again are not unpacked again ("existing": true)."""
    from starlette.requests import ClientDisconnect

    from orchestrator.service.upload import Receiver, sharing

    settings = srv.settings
    limit = settings.upload_max_mb * MiB
    if limit == 0:
        raise InputError("this server takes no uploads (upload_max_mb is 0)",
                         "give the job a workdir the server sees (a shared filesystem)")
    receiver = await run_in_threadpool(Receiver, settings.home, limit, who.name,
                                       settings.upload_quota_mb * MiB, settings.upload_keep_hours,
                                       sharing.held_everywhere(settings, who.name))
    try:
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise receiver.refuse(int(length))
        try:
            async for chunk in request.stream():
                receiver.write(chunk)
        except ClientDisconnect:
            raise InputError("the upload was cut off before its end", "send it again") from None
        answer = await run_in_threadpool(receiver.finish)
        await run_in_threadpool(sharing.keep, settings, answer["upload"], receiver, who.name)
        return answer
    finally:
        receiver.close()


@router.get("/v1/uploads/{digest}")
def uploaded(digest: str = Path(..., pattern=DIGEST_PATTERN), who: Caller = Depends(caller),
             srv: Server = Depends(server)):
    """Whether the caller sent this server (or another replica of it) the upload `digest`
    (need not send it again)."""
    from orchestrator.service.upload import sharing

    if not sharing.available(srv.settings, digest, who.name, who.admin):
        raise NotFound(f"upload {digest[:16]}... is not on this server", "send it: POST /v1/uploads")
    return {"upload": digest, "existing": True}
