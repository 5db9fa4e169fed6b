"""Replicas of `orch serve` (server/replicas.py): one secret key for all of them, checked
at start; a launcher on another host alive by its replica's row."""

from __future__ import annotations

import socket

import pytest

from orchestrator.base.errors import InputError
from orchestrator.server.replicas import Heartbeat, check_key, launcher_alive
from orchestrator.settings import Settings
from tests.conftest import store_at


@pytest.fixture
def pg(job_store):
    if job_store is None:
        pytest.skip("needs PostgreSQL: runs with --store both (make test) or --store postgresql")
    return job_store


def test_replicas_must_share_the_secret_key_and_one_with_another_is_refused(tmp_path, pg):
    shared = tmp_path / "key"
    check_key(Settings(home=tmp_path / "a", database_url=pg, secret_key_file=shared))
    check_key(Settings(home=tmp_path / "b", database_url=pg, secret_key_file=shared))
    with pytest.raises(InputError) as e:
        check_key(Settings(home=tmp_path / "c", database_url=pg))  # a key of its own
    assert "is not the one the other replicas of this store use" in e.value.message
    assert str(tmp_path / "c" / "secret_key") in e.value.message
    assert shared.read_bytes().hex() not in e.value.message + e.value.hint
    assert "ORCH_SECRET_KEY_FILE" in e.value.hint


def test_a_sqlite_store_has_no_key_to_agree_on(tmp_path, job_store):
    if job_store is not None:
        pytest.skip("the SQLite case")
    check_key(Settings(home=tmp_path / "a"))
    assert not (tmp_path / "a" / "secret_key").exists()


def test_a_launcher_on_another_host_is_alive_while_its_replica_beats(tmp_path, pg):
    settings = Settings(home=tmp_path / "a", database_url=pg)
    store = store_at(tmp_path)
    far = "another-host.example/4242/1700000000.0"
    assert launcher_alive(far, store) is True  # never seen: cannot be told, as before
    beat = Heartbeat(settings, far, lambda: "standby", "http://10.1.2.3:8765")
    beat.beat()
    assert launcher_alive(far, store) is True
    assert [r.url for r in store.replicas()] == ["http://10.1.2.3:8765"]
    store._db.execute("UPDATE replicas SET seen_at = seen_at - 60")
    assert launcher_alive(far, store) is False  # stopped beating: dead
    beat.stop()  # never started: it removes its row all the same
    assert store.replica_alive(far) is None
    here = f"{socket.gethostname()}/1/1.0"  # this host: the process is asked, not the row
    store.replica_seen(here, "standby")
    assert launcher_alive(here, store) is False
    store.close()


def test_a_request_while_the_database_is_away_is_a_503_its_client_retries(tmp_path, monkeypatch):
    """The body guard looks the token up before the body: a store that does not answer is
    the same 503 as in the routes, never a 500."""
    from fastapi.testclient import TestClient

    from orchestrator.server.app import create_app
    from orchestrator.server.scheduler import Scheduler

    monkeypatch.delenv("ORCH_DATABASE_URL", raising=False)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings(home=tmp_path / "a", database_url=f"postgresql://orch:pw@127.0.0.1:{port}/orch")
    with TestClient(create_app(settings, Scheduler(settings), run_scheduler=False)) as client:
        for method, path in (("POST", "/v1/jobs"), ("GET", "/v1/jobs"), ("POST", "/v1/uploads")):
            r = client.request(method, path, headers={"Authorization": "Bearer orch_x"},
                               **({"json": {"spec": "run: echo"}} if path == "/v1/jobs" else {}))
            assert r.status_code == 503, (method, path, r.text)
            body = r.json()
            assert "cannot connect to the PostgreSQL job store" in body["error"], body
            assert "pw" not in r.text and "database_url" in body["hint"]


def test_two_threads_ending_the_same_job_each_write_its_log_whole(tmp_path):
    """Two request threads of one replica may see a job's end at once: each writes the log
    through a temporary file of its own."""
    import threading

    from orchestrator.service.following import write_private

    path, errors = tmp_path / "logs" / "j.log", []

    def write(text: str) -> None:
        try:
            for _ in range(200):
                write_private(path, text)
        except OSError as e:
            errors.append(e)

    threads = [threading.Thread(target=write, args=(c * 5000,)) for c in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and path.read_text() in ("a" * 5000, "b" * 5000)
    assert [p.name for p in path.parent.iterdir()] == ["j.log"]
