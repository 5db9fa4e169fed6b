"""A real `orch serve` (one process for the module, no Ray) against requests meant to cost it
memory, disk or connections, and users reaching each other's uploads: a body sent without a
token (or over the endpoint's limit) is refused before it is read, a body that stops
arriving is cut off after serve_body_timeout_s, bob cannot use or see alice's upload, and
each user's uploads stay within upload_quota_mb. Malformed requests go over raw sockets,
with short timeouts: on code without these checks the server waits for the body, and the
test fails on its timeout instead of hanging."""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from orchestrator.service.upload import MiB, human
from tests.conftest import short_tmp
from tests.integration.test_serve import Server, _serve_home, _token
from tests.repos import packed

pytestmark = pytest.mark.integration

TIMEOUT_S = 1.0  # the server's serve_body_timeout_s


@pytest.fixture(scope="module")
def server():
    for home in _serve_home(short_tmp("ohu")):
        served = Server(home, env={"ORCH_SERVE_BODY_TIMEOUT_S": str(TIMEOUT_S),
                                   "ORCH_UPLOAD_QUOTA_MB": "1"})
        try:
            yield served
        finally:
            served.stop()


def _raw(server: Server, head: str, body: bytes = b"", wait_s: float = 5.0):
    """Send the request line and headers, then `body` (of whatever Content-Length the
    headers claim), and read the answer: (the response, its JSON, the socket)."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=wait_s)
    sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
    resp = http.client.HTTPResponse(sock)
    resp.begin()  # on code that reads the whole body first: socket.timeout here
    return resp, json.loads(resp.read()), sock


def _rss(server: Server) -> int:
    return psutil.Process(server.proc.pid).memory_info().rss


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed the connection (what it never read is not read later)."""
    try:
        for _ in range(40):  # 20 MiB more of the body the server refused
            sock.sendall(b"x" * (512 * 1024))
        return sock.recv(1) == b""
    except TimeoutError:  # still open, and not reading
        return False
    except OSError:  # reset, or a broken pipe
        return True
    finally:
        sock.close()


def test_a_body_is_not_read_without_a_valid_token_nor_over_the_limit(server):
    claimed = 200 * MiB
    before = _rss(server)
    for auth in ("", "Authorization: Bearer orch_wrong\n"):
        started = time.monotonic()
        resp, body, sock = _raw(server, f"POST /v1/jobs HTTP/1.1\nHost: x\n{auth}"
                                f"Content-Type: application/json\nContent-Length: {claimed}\n",
                                b'{"spec": "' + b"a" * 4096)
        assert resp.status == 401 and time.monotonic() - started < 3
        assert resp.getheader("WWW-Authenticate") == "Bearer"
        assert set(body) == {"error", "hint"} and "token" in body["error"]
        assert _closed(sock)
    # With bob's token: over the limit, said before reading (a JSON body: 2 MiB at most).
    bob = f"Authorization: Bearer {_token(server.log.parent, 'bob')}\n"
    resp, body, sock = _raw(server, f"POST /v1/jobs HTTP/1.1\nHost: x\n{bob}"
                            f"Content-Type: application/json\nContent-Length: {claimed}\n", b"{")
    assert resp.status == 413 and body["error"] == ("the request body is 200.0 MiB; this server "
                                                    "takes at most 2.0 MiB")
    assert _closed(sock)
    # Without a length (chunked): counted as it arrives and cut off at the limit.
    chunk = b"a" * (256 * 1024)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(12))  # 3 MiB
    resp, body, sock = _raw(server, f"POST /v1/jobs HTTP/1.1\nHost: x\n{bob}Content-Type: "
                            "application/json\nTransfer-Encoding: chunked\n", chunked)
    assert resp.status == 413 and body["error"].startswith("the request body is over the limit")
    sock.close()
    assert _rss(server) - before < 20 * MiB


def test_a_body_that_stops_arriving_is_cut_off(server):
    bob = f"Authorization: Bearer {_token(server.log.parent, 'bob')}\n"
    for path, kind in (("/v1/jobs", "application/json"), ("/v1/uploads", "application/octet-stream")):
        started = time.monotonic()
        resp, body, sock = _raw(server, f"POST {path} HTTP/1.1\nHost: x\n{bob}Content-Type: "
                                f"{kind}\nContent-Length: 1000\n", b"{\"spec\": ", wait_s=TIMEOUT_S + 4)
        took = time.monotonic() - started
        assert resp.status == 408 and TIMEOUT_S <= took < TIMEOUT_S + 3, (path, took)
        assert body["error"] == f"the request body stopped arriving: nothing for {TIMEOUT_S:g} s"
        assert "serve_body_timeout_s" in body["hint"]
        assert resp.getheader("Connection") == "close" and sock.recv(1) == b""
        sock.close()


def _call(server: Server, who: str, method: str, path: str, data: bytes = b"",
          kind: str = "application/json") -> tuple[int, dict]:
    req = urllib.request.Request(server.url + path, data=data or None, method=method, headers={
        "Authorization": f"Bearer {_token(server.log.parent, who)}", "Content-Type": kind})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _workdir(root: Path, name: str, size: int) -> bytes:
    code = root / name
    code.mkdir()
    (code / "train.py").write_text("print('trained')\n")
    (code / "data.bin").write_bytes(os.urandom(size))
    return packed(code, 10 * MiB)


def test_an_upload_is_its_senders_and_each_user_stays_within_the_quota(server, tmp_path):
    upload = _workdir(tmp_path, "alices", 600_000)
    status, sent = _call(server, "alice", "POST", "/v1/uploads", upload, "application/octet-stream")
    assert status == 201, sent
    digest = sent["upload"]
    # Bob knows the digest (it is no secret): he can neither see nor use the upload.
    assert _call(server, "alice", "GET", f"/v1/uploads/{digest}")[0] == 200
    assert _call(server, "root", "GET", f"/v1/uploads/{digest}")[0] == 200  # an admin
    status, got = _call(server, "bob", "GET", f"/v1/uploads/{digest}")
    assert status == 404 and got["error"] == f"upload {digest[:16]}... is not on this server"
    job = {"spec": "name: j\nworkdir: .\nrun: python train.py\n", "upload": digest}
    theirs = _call(server, "bob", "POST", "/v1/plan", json.dumps(job).encode())
    none = _call(server, "bob", "POST", "/v1/plan", json.dumps({**job, "upload": "e" * 64}).encode())
    assert theirs[0] == none[0] == 400
    assert theirs[1] == {**none[1], "error": none[1]["error"].replace("e" * 16, digest[:16])}
    assert theirs[1]["error"] == f"upload {digest[:16]}... is not on this server"
    # Alice holds 594 KiB of her 1 MiB (two files, 4 KiB each besides their bytes): another
    # 496 KiB is refused, with what to do.
    status, got = _call(server, "alice", "POST", "/v1/uploads", _workdir(tmp_path, "more", 500_000),
                        "application/octet-stream")
    assert status == 413 and got["error"] == (
        f"alice's uploads on this server hold {human(600_017 + 2 * 4096)}; this one "
        f"({human(500_017 + 2 * 4096)}, 4 KiB counted for each file and folder) would be over "
        "the upload quota of 1.0 MiB"), got
    assert "upload_keep_hours" in got["hint"]
