"""The metrics route: GET /metrics in Prometheus's text format (server/metrics.py), for
the server's read-only metrics token (`metrics_token`, what Prometheus should hold) or any
API token; never a token in the URL (docs/security.md says why)."""

from __future__ import annotations

import hmac
from typing import Any, Optional, Union

from fastapi import APIRouter, Depends, Request, Response

from orchestrator.server import auth
from orchestrator.server.routes.deps import Server, identify, server
from orchestrator.service.metrics_snapshot import Snapshot

router = APIRouter()

_TEXT: dict[Union[int, str], dict[str, Any]] = {200: {"description": "Prometheus's text format (version 0.0.4)",
               "content": {"text/plain": {"schema": {"type": "string"}}}}}


@router.get("/metrics", response_class=Response, responses=_TEXT)
def metrics(request: Request, srv: Server = Depends(server)) -> Response:
    """Jobs by state, target and kind; the queue; the month's spend and the budget; each
    running job's device, throughput and cost so far; owned GPUs in use and how busy they
    measure (docs/serve.md). Read from the store, never from a backend: as fresh as the
    scheduler's last pass. Takes `metrics_token` or any API token, in the Authorization
    header."""
    from orchestrator.server.metrics import CONTENT_TYPE, exposition

    reader(srv, auth.bearer(request.headers.get("authorization")))

    def read() -> Snapshot:
        with srv.service() as orch:
            return orch.metrics_snapshot()

    return Response(exposition(read), media_type=CONTENT_TYPE)


def reader(srv: Server, token: Optional[str]) -> str:
    """Who may read the metrics: "metrics" for the metrics token, else the API token's
    name; auth.Unauthorized (401) for none or another."""
    if token is None:
        raise auth.Unauthorized("this request needs a token: Authorization: Bearer <token>",
                                "Prometheus: `authorization: {credentials_file: FILE}` holding "
                                "the server's metrics_token (or any API token)")
    kept = srv.settings.metrics_token
    if kept is not None and hmac.compare_digest(token.encode("utf-8", "surrogatepass"),
                                                kept.get_secret_value().encode("utf-8")):
        return "metrics"
    return identify(srv.settings, token).name
