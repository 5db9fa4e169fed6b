"""The client's retry across replicas: a request that finds no server (refused, cut off, a
proxy's 503) is tried again on the next URL; one the server may have acted on is resent only
when that is safe, a submit with the same idempotency key. Real HTTP servers on loopback."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from orchestrator.base.errors import BackendError, OrchError
from orchestrator.client.remote import Remote
from orchestrator.client.retry import REFUSED, Lost, Tries
from orchestrator.settings import Settings

JOB = {"id": "orch-1", "name": "hi", "status": "PENDING", "existing": False}


class Scripted:
    """A server on loopback that answers each request as its script says, in order:
    "close" (reads the request, then closes the connection without a word), "proxy503"
    (a proxy's HTML 503), "orch503" / "orch502" (orch's own: store away, backend failed), a tuple of a followed
    log's lines ("close" among them cuts it there), or a JSON body (201)."""

    def __init__(self, *script):
        self.script, self.seen = list(script), []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # a followed log comes chunked, as from orch serve

            def log_message(self, *args):
                pass

            def _answer(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                owner.seen.append((self.command, self.path, json.loads(body) if body else None))
                step = owner.script.pop(0) if owner.script else JOB
                if step == "close":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if step == "proxy503":
                    self._send(503, b"<html><body>503 Service Unavailable</body></html>", "text/html")
                elif step == "orch503":  # orch's own: its store unreachable
                    self._send(503, json.dumps({"error": "the PostgreSQL job store failed",
                                                "hint": "check database_url"}).encode())
                elif step == "orch502":
                    self._send(502, json.dumps({"error": "ray is down", "hint": "start it"}).encode())
                elif isinstance(step, tuple):  # a followed log's lines
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for line in step:
                        if line == "close":  # cut off before the last chunk
                            self.wfile.flush()
                            self.connection.shutdown(socket.SHUT_RDWR)
                            self.close_connection = True
                            return
                        self.wfile.write(b"%x\r\n%s\n\r\n" % (len(line) + 1, line.encode()))
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self._send(201, json.dumps(step).encode())

            def _send(self, code, raw, kind="application/json"):
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = do_DELETE = _answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers():
    made: list[Scripted] = []

    def make(*script) -> Scripted:
        made.append(Scripted(*script))
        return made[-1]
    yield make
    for s in made:
        s.stop()


def refused_url() -> str:
    """A loopback port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def job_file(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text("name: hi\nrun: echo hi\n")
    return f


def client(urls, notes=None, retry_s=10.0) -> Remote:
    return Remote(",".join(urls), "t", timeout_s=5, upload_max_bytes=0, retry_s=retry_s,
                  on_note=None if notes is None else notes.append)


def test_a_submit_to_a_dead_replica_goes_to_the_next_with_a_key_and_one_note(servers, job_file):
    live, notes = servers(JOB, []), []
    remote = client([refused_url(), live.url], notes)
    sub = remote.submit(job_file)
    assert sub.id == "orch-1" and remote.url == live.url and remote.recovered == 1
    [(method, path, body)] = live.seen
    assert (method, path) == ("POST", "/v1/jobs") and body["idempotency_key"].startswith("client-")
    assert len(notes) == 1 and "connection refused" in notes[0] and live.url in notes[0]
    remote.jobs()  # the next request starts at the replica that answered: no new note
    assert len(notes) == 1 and len(live.seen) == 2


def test_a_submit_whose_answer_was_lost_is_resent_with_the_same_key(servers, job_file):
    """The first try reached the server and its answer was lost: the retry carries the same
    key, so the server returns that job (existing), which is the caller's own, not a repeat."""
    a, b = servers("close"), servers({**JOB, "existing": True})
    remote = client([a.url, b.url])
    sub = remote.submit(job_file, priority=3)
    first, again = a.seen[0][2], b.seen[0][2]
    assert first["idempotency_key"] == again["idempotency_key"] and first == again
    assert sub.existing is False  # the key was the client's own: this is the job just submitted
    keyed = client([servers({**JOB, "existing": True}).url]).submit(job_file, key="mine")
    assert keyed.existing is True  # the user's key: seen before means submitted before


def test_each_submit_has_a_key_of_its_own(servers, job_file):
    live = servers()
    remote = client([live.url])
    remote.submit(job_file)
    remote.submit(job_file)
    keys = [body["idempotency_key"] for _, _, body in live.seen]
    assert len(set(keys)) == 2


def test_one_url_a_proxys_503_is_tried_again_there(servers):
    lb = servers("proxy503", "proxy503", [])  # then an empty list of jobs
    remote = client([lb.url])
    assert remote.jobs() == [] and len(lb.seen) == 3 and remote.recovered == 1


def test_orchs_own_backend_failure_is_said_at_once(servers):
    s = servers("orch502")
    with pytest.raises(BackendError) as e:
        client([s.url]).jobs()
    assert e.value.message == "ray is down" and len(s.seen) == 1


def test_a_store_away_for_longer_than_the_bound_is_the_servers_own_message(servers):
    s = servers(*["orch503"] * 50)
    with pytest.raises(OrchError) as e:
        client([s.url], retry_s=0.6).jobs()
    assert e.value.message.startswith("the PostgreSQL job store failed (after ")
    assert e.value.hint == "check database_url" and len(s.seen) >= 2


def test_a_submit_nobody_answered_says_how_to_resend_it_safely(job_file):
    with pytest.raises(OrchError) as e:
        client([refused_url()], retry_s=0.3).submit(job_file)
    assert "--idempotency-key client-" in e.value.hint and "returns the job" in e.value.hint


def test_every_replica_down_says_which_were_tried_and_what_to_do_within_the_bound():
    urls = [refused_url(), refused_url()]
    started = time.monotonic()
    with pytest.raises(OrchError) as e:
        client(urls, retry_s=1.0).jobs()
    assert time.monotonic() - started < 3
    message = e.value.message
    assert all(u in message for u in urls) and "(ORCH_SERVER)" in message and "tries over" in message
    assert "connection refused" in message and "comma" in e.value.hint and "orch serve" in e.value.hint


def test_a_schedule_resent_after_a_lost_answer_carries_its_key_and_is_returned(servers, tmp_path):
    """The server keys a schedule's registration as it keys a job (test_serve_unit checks
    that side): the resend returns the schedule the first try registered."""
    cron = tmp_path / "cron.yaml"
    cron.write_text("name: nightly\nrun: echo hi\nschedule: {cron: '0 3 * * *'}\n")
    s = servers("close", {"schedule": {"id": "sched-1", "name": "nightly", "cron": "0 3 * * *",
                                       "existing": True}})
    got = client([s.url]).submit(cron).schedule
    assert got.id == "sched-1" and got.existing is False  # our own first try: new to the user
    (_, _, first), (_, _, again) = s.seen
    assert first["idempotency_key"].startswith("client-") and first == again


def test_a_followed_log_reattaches_and_skips_the_lines_already_given(servers):
    a = servers(("one", "two", "close"))
    b = servers(("one", "two", "three"))
    remote = client([a.url, b.url])
    assert list(remote.stream("orch-1")) == ["one", "two", "three"]
    assert remote.url == b.url


def test_tries_pause_after_each_round_and_stop_at_the_bound():
    now = [0.0]
    tries = Tries(["a", "b"], budget_s=10, clock=lambda: now[0])
    assert tries.url == "a" and tries.failed(Lost("a", "refused", False)) == 0.0
    assert tries.url == "b"
    wait = tries.failed(Lost("b", "reset", True))
    assert tries.url == "a" and wait is not None and 0 < wait <= 0.25
    now[0] = 10.5
    assert tries.failed(Lost("a", "refused", False)) is None
    assert "3 tries over 10 s" in tries.spent() and "b: reset" in tries.spent()


def test_tries_that_were_all_refused_stop_sooner():
    """Nothing listens at any URL: no server there (or one restarting on its machine)."""
    now = [0.0]
    tries = Tries(["a"], budget_s=30, clock=lambda: now[0])
    now[0] = 9.0
    assert tries.failed(Lost("a", REFUSED, False)) is not None
    now[0] = 10.5
    assert tries.failed(Lost("a", REFUSED, False)) is None  # 10 s, not 30
    tries = Tries(["a"], budget_s=30, clock=lambda: now[0])
    tries.failed(Lost("a", "HTTP 503: the store is away", True))
    now[0] = 21.0
    assert tries.failed(Lost("a", REFUSED, False)) is not None  # one answer that was not a refusal
    tries = Tries(["a"], budget_s=5, clock=lambda: now[0])
    now[0] = 26.0
    assert tries.failed(Lost("a", REFUSED, False)) is None  # a shorter bound given stays


def test_server_setting_takes_several_replicas_and_a_token_in_either():
    s = Settings(server="TOK@127.0.0.1:8765/, http://10.0.0.2:8765")
    assert s.server == "http://127.0.0.1:8765,http://10.0.0.2:8765"
    assert s.token is not None and s.token.get_secret_value() == "TOK"
    remote = Remote(s.server, "TOK")
    assert remote.urls == ["http://127.0.0.1:8765", "http://10.0.0.2:8765"]
    with pytest.raises(ValueError, match="separated by commas"):
        Settings(server="http://a:1,ftp://b")
