"""A connection whose request headers never end, against a real uvicorn on loopback (issue 47:
3,000 half-open connections stayed open): closed once serve_header_timeout_s has passed, also
when bytes trickle in; ordinary requests, one after another on one connection, still answer."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from orchestrator.server.header_timeout import protocol

TIMEOUT_S = 0.5


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.fixture
def port():
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(_app, log_level="warning", lifespan="off", http=protocol(TIMEOUT_S),
                            timeout_keep_alive=30)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield sock.getsockname()[1]
    server.should_exit = True
    thread.join(10)
    sock.close()


def _closed_within(conn: socket.socket, seconds: float, trickle: bool = False) -> bool:
    """Whether the server closed `conn` within `seconds` (an EOF or a reset)."""
    conn.settimeout(0.1)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if trickle:
                conn.sendall(b"X-Slow: 1\r\n")
            if conn.recv(1024) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:
            return True
    return False


def test_a_connection_whose_headers_never_end_is_closed(port):
    silent = socket.create_connection(("127.0.0.1", port))
    partial = socket.create_connection(("127.0.0.1", port))
    partial.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
    try:
        assert _closed_within(silent, 5 * TIMEOUT_S)
        assert _closed_within(partial, 5 * TIMEOUT_S)
        assert _closed_within(slow, 5 * TIMEOUT_S, trickle=True)  # bytes do not extend it
    finally:
        for c in (silent, partial, slow):
            c.close()


def test_requests_still_answer_and_a_kept_alive_connection_gets_the_deadline_again(port):
    conn = socket.create_connection(("127.0.0.1", port))
    try:
        for _ in range(2):
            time.sleep(TIMEOUT_S / 2)
            conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            conn.settimeout(5)
            got = b""
            while not got.endswith(b"ok"):
                piece = conn.recv(1024)
                assert piece, got  # closed before its answer
                got += piece
        conn.sendall(b"GET / HTTP/1.1\r\n")  # a third request, whose headers stop
        assert _closed_within(conn, 5 * TIMEOUT_S)
    finally:
        conn.close()
