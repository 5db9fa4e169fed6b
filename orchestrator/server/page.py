"""The status page: static files shipped in the package (`static/`: one HTML shell, its
stylesheet and its ES modules, hand-written, no build step and nothing fetched from elsewhere),
served with a policy that lets them run only this server's scripts and talk only to it.

The page reads the REST API like any client: the token given once in the URL fragment
(`/#token=...`; a fragment never reaches the server), kept in sessionStorage, sent only in
the Authorization header.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import Optional

_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".js": "text/javascript; charset=utf-8"}
_NAME = re.compile(r"^[a-z][a-z0-9_-]*\.(css|js)$")  # what /static/ serves: these files, by name

HEADERS = {"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                                      "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "
                                      "form-action 'none'; frame-ancestors 'none'",
           "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff",
           "Cache-Control": "no-cache"}


@functools.lru_cache(maxsize=32)
def asset(name: str) -> Optional[tuple[bytes, str]]:
    """A static file's bytes and media type; None for a name that is not one of them."""
    if name != "index.html" and not _NAME.match(name):
        return None
    path = resources.files("orchestrator.server").joinpath("static", name)
    if not path.is_file():
        return None
    return path.read_bytes(), _TYPES[name[name.rindex("."):]]


def names() -> list[str]:
    """Every file the page is made of."""
    return sorted(p.name for p in resources.files("orchestrator.server").joinpath("static").iterdir()
                  if p.name == "index.html" or _NAME.match(p.name))
