"""Uploads shared between `orch serve` replicas on one PostgreSQL store
(service/upload/sharing.py): sent to one replica's home, unpacked by another for its
owners only, a job's workdir moved to the launching replica's own folder, the archives
nobody needs dropped; on SQLite nothing is kept."""

from __future__ import annotations

import time

import pytest

from orchestrator.base.errors import InputError
from orchestrator.service import upload
from orchestrator.service.upload import sharing
from orchestrator.service.upload_gc import collect_shared
from orchestrator.settings import Settings
from tests.conftest import store_at

MiB = 1 << 20


@pytest.fixture
def pg(job_store):
    if job_store is None:
        pytest.skip("needs PostgreSQL: runs with --store both (make test) or --store postgresql")
    return job_store


def _replica(tmp_path, name: str, url) -> Settings:
    return Settings(home=tmp_path / name, mode="local", database_url=url)


def _workdir(tmp_path):
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "train.py").write_text("print('hello from the upload')\n")
    (work / "data" / "x.txt").write_text("1 2 3\n")
    return work


def _send(settings: Settings, workdir, user: str) -> str:
    """What POST /v1/uploads does: receive, unpack, keep for the other replicas."""
    packed = upload.pack(workdir, 10 * MiB)
    receiver = upload.Receiver(settings.home, 10 * MiB, user)
    try:
        receiver.write(packed.file.read())
        digest = receiver.finish()["upload"]
        sharing.keep(settings, digest, receiver, user)
    finally:
        receiver.close()
        packed.close()
    return digest


def test_an_upload_sent_to_one_replica_is_unpacked_by_another_for_its_owners_only(tmp_path, pg):
    a, b = _replica(tmp_path, "a", pg), _replica(tmp_path, "b", pg)
    digest = _send(a, _workdir(tmp_path), "alice")
    assert not upload.has(b.home, digest, "alice")  # not on b's disk yet
    assert sharing.available(b, digest, "alice") and sharing.available(b, digest, "root", admin=True)
    assert not sharing.available(b, digest, "bob")  # the same answer as for one never sent

    sharing.ensure(b, digest, "bob")
    assert not (upload.uploads_root(b.home) / digest).exists()
    with pytest.raises(InputError, match="is not on this server"):
        upload.folder(b.home, digest, "bob")

    sharing.ensure(b, digest, "alice")
    path = upload.folder(b.home, digest, "alice")
    assert path == upload.uploads_root(b.home) / digest
    assert (path / "train.py").read_text() == "print('hello from the upload')\n"
    assert (path / "data" / "x.txt").read_text() == "1 2 3\n"
    assert upload.owners.read(upload.uploads_root(b.home), digest).owners == ("alice",)
    assert [p.name for p in upload.uploads_root(b.home).iterdir() if p.name.startswith(".unp")] == []

    # bob sends the same bytes to b: he owns it too, everywhere
    assert _send(b, tmp_path / "work", "bob") == digest
    assert store_at(a.home).upload_owned(digest, "bob")
    # carol sends them to a, where b has the folder already (alice's): b learns she owns it
    assert _send(a, tmp_path / "work", "carol") == digest
    sharing.ensure(b, digest, "carol")
    assert upload.folder(b.home, digest, "carol") == path
    # Each user's quota counts what the store holds of theirs, whichever replica took it.
    held = sharing.held_everywhere(b, "carol")
    assert held is not None and held("") == upload.owners.read(
        upload.uploads_root(a.home), digest).bytes > 0 and held(digest) == 0
    assert sharing.held_everywhere(b, "dave")("") == 0


def test_a_job_taken_by_one_replica_runs_from_the_launching_replicas_own_folder(tmp_path, pg):
    a, c = _replica(tmp_path, "a", pg), _replica(tmp_path, "c", pg)
    digest = _send(a, _workdir(tmp_path), "alice")
    stored = str(upload.uploads_root(a.home) / digest)  # the workdir a's intake wrote
    mine = upload.uploads_root(c.home) / digest
    assert sharing.relocate(c, stored, None, "alice") == str(mine)  # found in the path, unpacked here
    assert (mine / "train.py").is_file()
    assert sharing.relocate(c, stored, digest, "alice") == str(mine)
    assert sharing.relocate(c, str(mine), None, "alice") == str(mine)
    assert sharing.relocate(c, "/srv/code", None, "alice") == "/srv/code"  # not an upload
    assert sharing.relocate(c, f"/srv/uploads/{'z' * 64}", None, "alice") == f"/srv/uploads/{'z' * 64}"
    assert sharing.relocate(c, None, None, "alice") is None
    # A job file's own path naming another user's upload reaches nothing: not unpacked on a
    # replica that lacks it, not moved where this one has it.
    d = _replica(tmp_path, "d", pg)
    assert sharing.relocate(d, stored, None, "bob") == stored
    assert not (upload.uploads_root(d.home) / digest).exists()
    assert sharing.relocate(c, stored, None, "bob") == stored
    assert sharing.relocate(d, stored, digest, "bob") == str(upload.uploads_root(d.home) / digest)
    missing = "e" * 64
    assert sharing.relocate(c, f"/x/uploads/{missing}", None, "alice") == f"/x/uploads/{missing}"  # says so at launch


def test_the_archives_nobody_needs_are_dropped_and_those_a_job_needs_kept(tmp_path, pg):
    a = _replica(tmp_path, "a", pg)
    kept = _send(a, _workdir(tmp_path), "alice")
    (tmp_path / "work" / "train.py").write_text("print('another')\n")
    dropped = _send(a, tmp_path / "work", "alice")
    store = store_at(a.home)
    store.create_job(name="uses-it", spec={"run": "x", "workdir": f"/elsewhere/uploads/{kept}"},
                     kind="exploratory", target="local", fingerprint=None)  # PENDING
    later = time.time() + 3 * 3600
    assert collect_shared(store, 1.0, later) == [dropped]
    assert set(store.kept_uploads()) == {kept}
    assert collect_shared(store, 0.0, later) == []  # upload_keep_hours 0: kept for ever
    store.close()


def test_on_a_sqlite_store_no_archive_is_kept(tmp_path, job_store):
    if job_store is not None:
        pytest.skip("the SQLite case")
    a = Settings(home=tmp_path / "a", mode="local")
    digest = _send(a, _workdir(tmp_path), "alice")
    assert upload.has(a.home, digest, "alice") and not sharing.shared(a)
    assert store_at(a.home).kept_uploads() == {}
