"""How the client opens a request: with urllib, following no redirect. urllib's default
handler sends the request again, with its Authorization header, wherever a redirect points
(another host, plain http): the token would go with it (issue 47)."""

from __future__ import annotations

from typing import Any, Optional

from orchestrator.base.errors import OrchError
from orchestrator.base.inputs import clip

_OPENER: Any = None


def no_redirects() -> Any:
    """An opener that follows no redirect (made once): refused, urllib raises the 3xx as an
    HTTPError, sending nothing more."""
    import urllib.request

    global _OPENER
    if _OPENER is None:
        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, req, fp, code, msg, headers, newurl):
                return None

        _OPENER = urllib.request.build_opener(NoRedirect())
    return _OPENER


def redirected(url: str, code: int, location: Optional[str]) -> OrchError:
    """A redirect, refused (the token stays with the address the user gave)."""
    where = f" to {clip(location, 120)}" if location else ""
    return OrchError(f"the orch server at {url} answered with a redirect (HTTP {code}){where}: "
                     "orch sends its token to no other address than the one it was given",
                     "set `server` (ORCH_SERVER) to the server's own address, https:// where it "
                     "is behind a TLS proxy")
