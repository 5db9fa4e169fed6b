"""A plain token turns git against a real `orch serve` (one process for the module, no Ray):
a folder whose `.git/config` names programs (core.fsmonitor, diff.external, a clean filter)
given as a workdir under the server's roots and as an upload; git URLs to a host that
accepts and never answers, sent by the dozen; a URL to a host the server does not allow.
The server runs nothing the folder names, answers /healthz and other users while git
hangs, refuses a user's requests past their limit with 429, and never connects to a host
it does not allow."""

from __future__ import annotations

import io
import json
import shutil
import socket
import tarfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import NamedTuple

import pytest

from tests.conftest import short_tmp, store_at
from tests.integration.conftest import wait_until
from tests.integration.test_serve import Server, _serve_home, _token
from tests.repos import committed_repo, git

pytestmark = pytest.mark.integration

PLANNERS = ("alice", "bob", "carol")


class Listener:
    """A loopback TCP port that counts the connections it gets; `hold`: kept open, never
    answered (a git host that hangs), else closed at once."""

    def __init__(self, hold: bool):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        self.hold, self.conns, self.count = hold, [], 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.count += 1
            if self.hold:
                self.conns.append(conn)
            else:
                conn.close()

    def close(self) -> None:
        for c in [self.sock, *self.conns]:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()


class World(NamedTuple):
    server: Server
    root: Path  # the server's serve_workdir_roots entry
    markers: Path  # where a program git was made to run would leave a file
    hang: Listener
    other: Listener


@pytest.fixture(scope="module")
def world():
    root, markers = short_tmp("ogr"), short_tmp("ogm")
    hang, other = Listener(hold=True), Listener(hold=False)
    for home in _serve_home(short_tmp("ogs")):
        tokens = json.loads((home / "tokens.json").read_text())
        from orchestrator.server import auth

        store = store_at(home)
        tokens["carol"], digest = auth.new_token()
        store.add_token("carol", digest, admin=False)
        store.close()
        (home / "tokens.json").write_text(json.dumps(tokens))
        server = Server(home, env={"ORCH_SERVE_WORKDIR_ROOTS": str(root),
                                   "ORCH_SERVE_GIT_SCHEMES": "https",
                                   "ORCH_SERVE_GIT_HOSTS": f"127.0.0.1:{hang.port}",
                                   "ORCH_SERVE_GIT_TIMEOUT_S": "60"})
        try:
            yield World(server, root, markers, hang, other)
        finally:
            hang.close()
            other.close()
            server.stop()
            shutil.rmtree(root, ignore_errors=True)
            shutil.rmtree(markers, ignore_errors=True)


def call(server: Server, who, method: str, path: str, body=None, timeout: float = 60,
         raw: bytes = b"") -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else (raw or None)
    headers = {"Content-Type": "application/json" if body is not None else "application/octet-stream"}
    if who:
        headers["Authorization"] = f"Bearer {_token(server.log.parent, who)}"
    req = urllib.request.Request(server.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


_git = git


def hostile_repo(where: Path, markers: Path) -> Path:
    """A repository with uncommitted changes whose own config has git run shell commands."""
    committed_repo(where, {"train.py": "print(1)\n"})
    for key, command in (("core.fsmonitor", f"touch {markers}/fsmonitor; false"),
                         ("diff.external", f"touch {markers}/diff-external; true"),
                         ("filter.evil.clean", f"touch {markers}/clean-filter; cat")):
        _git(where, "config", key, command)
    (where / ".gitattributes").write_text("* filter=evil\n")
    (where / "train.py").write_text("print(2)  # changed\n")
    return where


def test_a_folders_git_config_runs_nothing_on_the_server(world):
    repo = hostile_repo(world.root / "hostile", world.markers)
    job = f"name: h\nrun: python train.py\nworkdir: {repo}\n"
    code, body = call(world.server, "bob", "POST", "/v1/plan", {"spec": job})
    assert code == 200, body  # a folder under serve_workdir_roots: planned
    assert sorted(p.name for p in world.markers.iterdir()) == []

    # The same folder sent as an upload: refused for its .git, or planned without git.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(repo, arcname=".")
    code, up = call(world.server, "bob", "POST", "/v1/uploads", raw=buf.getvalue())
    if code == 201:
        code, body = call(world.server, "bob", "POST", "/v1/plan", {
            "spec": "name: h\nrun: python train.py\nworkdir: hostile\n", "upload": up["upload"]})
        assert code == 200, body
    else:
        assert code == 400 and ".git" in up["error"], up
    assert sorted(p.name for p in world.markers.iterdir()) == []


def test_plans_hanging_on_a_git_host_leave_the_api_answering(world):
    """60 plans whose git host never answers: /healthz answers within 1 s and another
    user's GET /v1/jobs within 2 s; each user's requests past their limit get 429 at once;
    when the host goes, the hung ones end and the server recovers."""
    url = f"https://127.0.0.1:{world.hang.port}/x.git"
    body = {"spec": f"name: g\nrun: echo hi\nworkdir: {{url: '{url}', ref: main}}\n"}
    results: list[tuple[int, dict]] = []

    def plan(who: str) -> None:
        try:
            results.append(call(world.server, who, "POST", "/v1/plan", body, timeout=120))
        except OSError as e:
            results.append((0, {"error": str(e)}))

    threads = [threading.Thread(target=plan, args=(PLANNERS[i % 3],), daemon=True)
               for i in range(60)]
    for t in threads:
        t.start()
    try:
        per_user = 2  # serve_git_per_user's default
        # Every request has arrived: those past each user's limit refused at once, the
        # others' git at the host.
        wait_until("every request to arrive", lambda: len(results) >= 60 - per_user * len(PLANNERS)
                   and world.hang.count >= per_user * len(PLANNERS), timeout=30, poll_s=0.05)
        start = time.monotonic()
        urllib.request.urlopen(world.server.url + "/healthz", timeout=1).close()
        assert time.monotonic() - start < 1.0
        start = time.monotonic()
        code, _ = call(world.server, "root", "GET", "/v1/jobs", timeout=2)
        assert code == 200 and time.monotonic() - start < 2.0

        busy = wait_until("the refusals past each user's limit",
                          lambda: [b for c, b in list(results) if c == 429]
                          if len(results) >= 60 - per_user * len(PLANNERS) else None, timeout=30)
        assert len(busy) == 60 - per_user * len(PLANNERS), results
        assert "wait for your other requests" in busy[0]["hint"]
        assert world.hang.count <= per_user * len(PLANNERS)
    finally:
        world.hang.close()  # the host goes: git fails, the hung plans end
    for t in threads:
        t.join(60)
    assert len(results) == 60
    ended = [b for c, b in results if c != 429]
    assert all(c in (400, 429) for c, _ in results), results
    home = str(world.server.log.parent)
    assert all(home not in json.dumps(b) for b in ended), ended
    urllib.request.urlopen(world.server.url + "/healthz", timeout=1).close()


@pytest.mark.parametrize("url, words", [
    ("https://127.0.0.1:{other}/x.git", "not one this server's git may reach"),
    ("https://localhost:{other}/x.git", "not one this server's git may reach"),
    ("file://{root}/hostile", "file:// URL"),
    ("{root}/hostile", "a path on the server"),
])
def test_a_git_url_the_server_does_not_allow_is_refused_before_git_runs(world, url, words):
    url = url.format(other=world.other.port, root=world.root)
    for endpoint, extra in (("/v1/plan", ""), ("/v1/jobs", ""),
                            ("/v1/jobs", "schedule: {cron: '0 3 * * *'}\n")):
        job = f"name: g\nrun: echo hi\nworkdir: {{url: '{url}', ref: main}}\n{extra}"
        code, body = call(world.server, "bob", "POST", endpoint, {"spec": job}, timeout=30)
        assert code == 400 and words in body["error"], (endpoint, extra, body)
        assert "remote URL" in body["hint"]
    time.sleep(0.2)
    assert world.other.count == 0
