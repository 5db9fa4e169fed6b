"""The client against a server that answers with a redirect (issue 47): urllib's default
handler sent the request again, Authorization header and all, to wherever the redirect
pointed (another host, plain http). Now nothing is sent there, and the user is told."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestrator.base.errors import OrchError
from orchestrator.client.remote import Remote


def _serve(answer):
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            seen.append(dict(self.headers))
            answer(self)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return httpd, seen


@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_a_redirect_is_refused_and_the_token_goes_nowhere_else(code):
    def steal(h):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.end_headers()
        h.wfile.write(b"[]")

    thief, stolen = _serve(steal)
    where = f"http://127.0.0.1:{thief.server_address[1]}/v1/jobs"

    def moved(h):
        h.send_response(code)
        h.send_header("Location", where)
        h.end_headers()

    server, asked = _serve(moved)
    try:
        client = Remote(f"http://127.0.0.1:{server.server_address[1]}", "SECRET-TOKEN",
                        timeout_s=5, retry_s=0)
        with pytest.raises(OrchError) as e:
            client.jobs()
    finally:
        server.shutdown()
        thief.shutdown()
    assert asked and asked[0].get("Authorization") == "Bearer SECRET-TOKEN"
    assert stolen == []  # before issue 47: the token, sent to the other address
    assert f"answered with a redirect (HTTP {code}) to '{where}'" in e.value.message
    assert "SECRET-TOKEN" not in e.value.message and "server's own address" in e.value.hint
