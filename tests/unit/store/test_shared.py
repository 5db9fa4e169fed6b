"""What replicas of `orch serve` share through the store (store/shared.py): finished logs,
upload archives with their senders, and who is alive. On both stores."""

from __future__ import annotations

import time

from orchestrator.store import shared as shared_mod
from tests.conftest import store_at


def test_a_finished_log_is_kept_compressed_and_read_back_whole(tmp_path):
    store = store_at(tmp_path)
    text = "".join(f"epoch {i} loss {1 / (i + 1):.4f} ünïcode\n" for i in range(20_000))
    assert store.kept_log("orch-none") is None
    store.keep_log("orch-1", text)
    assert store.kept_log("orch-1") == text
    row = store._db.execute("SELECT body, bytes FROM job_logs WHERE job_id = 'orch-1'").fetchone()
    assert row["bytes"] == len(text.encode()) and len(bytes(row["body"])) < len(text) / 5
    store.keep_log("orch-1", "again\n")  # a second end (two replicas saw it): the later one
    assert store.kept_log("orch-1") == "again\n"
    store.close()


def test_a_log_over_the_limit_keeps_its_end_and_says_what_was_left_out(tmp_path, monkeypatch):
    monkeypatch.setattr(shared_mod, "LOG_KEEP_BYTES", 1000)
    store = store_at(tmp_path)
    text = "".join(f"line {i:05d}\n" for i in range(1000))  # 11,000 bytes
    store.keep_log("orch-2", text)
    kept = store.kept_log("orch-2")
    first, _, rest = kept.partition("\n")
    assert first.startswith("[orch: the first 10000 bytes of this log are left out")
    assert rest == text[-1000:] and rest.endswith("line 00999\n")
    store.close()


def test_an_upload_is_kept_once_with_every_sender_and_dropped_only_if_unused_since(tmp_path):
    store = store_at(tmp_path)
    digest = "a" * 64
    assert store.upload_archive(digest) is None and not store.upload_owned(digest, None)
    store.keep_upload(digest, b"\x1f\x8b archive", 1234, "alice")
    store.keep_upload(digest, b"\x1f\x8b archive", 1234, "bob")  # the same bytes, sent by bob
    assert store.upload_owned(digest, "alice") and store.upload_owned(digest, "bob")
    assert not store.upload_owned(digest, "carol") and store.upload_owned(digest, None)
    used = store.kept_uploads()[digest]
    time.sleep(0.01)
    assert store.upload_archive(digest) == (b"\x1f\x8b archive", 1234, ["alice", "bob"])
    assert store.kept_uploads()[digest] > used  # reading it is a use
    assert store.drop_upload(digest, used) is False  # used after it was judged: kept
    assert store.drop_upload(digest, store.kept_uploads()[digest]) is True
    assert store.upload_archive(digest) is None and not store.upload_owned(digest, "alice")
    store.close()


def test_a_replica_is_alive_while_it_looks_and_gone_once_stopped(tmp_path, monkeypatch):
    store = store_at(tmp_path)
    assert store.replica_alive("host/1/2.0") is None  # never seen: cannot be told
    store.replica_seen("host/1/2.0", "standby", "http://10.0.0.1:8765")
    store.replica_seen("host/3/4.0", "leading", "http://10.0.0.2:8765")
    store.replica_seen("host/1/2.0", "standby")  # a later look keeps the URL
    assert [(r.id, r.role, r.url) for r in store.replicas()] == [
        ("host/3/4.0", "leading", "http://10.0.0.2:8765"),
        ("host/1/2.0", "standby", "http://10.0.0.1:8765")]
    assert store.replica_alive("host/1/2.0") is True
    later = time.time() + shared_mod.REPLICA_STALE_S + 1
    monkeypatch.setattr(shared_mod.time, "time", lambda: later)
    assert store.replica_alive("host/1/2.0") is False and store.replicas() == []
    monkeypatch.undo()
    store.replica_gone("host/1/2.0")
    assert store.replica_alive("host/1/2.0") is None
    store.close()
