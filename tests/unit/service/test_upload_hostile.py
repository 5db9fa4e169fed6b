"""Uploads written to hurt the server, refused before they cost it: an extended header (pax,
GNU long name) that holds 300 MiB in a 300 KiB archive, 100,001 empty entries, a `.git`
folder; and whose upload is whose: owners, and the per-user quota."""

from __future__ import annotations

import io
import os
import tarfile
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest

from orchestrator.base.errors import InputError
from orchestrator.service.upload import MiB, TooLarge, unpack, unpacking
from tests.repos import packed

HUGE = 300 * MiB


def _header(name: str, kind: bytes, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(format=tarfile.USTAR_FORMAT)


def _gzip(head: bytes, filler: bytes, times: int, tail: bytes) -> io.BytesIO:
    """A gzip whose content is head + filler * times + tail, made without compressing all of
    it: `filler` is deflated once after a full flush (so it refers to nothing before it)
    and that piece repeated."""
    def piece(data: bytes, final: bool = False) -> bytes:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush(zlib.Z_FINISH if final else zlib.Z_FULL_FLUSH)

    crc, size = zlib.crc32(head), len(head) + len(filler) * times + len(tail)
    for _ in range(times):
        crc = zlib.crc32(filler, crc)
    crc = zlib.crc32(tail, crc)
    body = piece(head) + piece(filler) * times + piece(tail, final=True)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return io.BytesIO(header + body + crc.to_bytes(4, "little") + (size % 2**32).to_bytes(4, "little"))


def _end(after: int) -> bytes:
    """The padding after `after` bytes of data, one small file, and the end of the archive."""
    return bytes(-after % 512) + _header("x.py", tarfile.REGTYPE, 1) + b"1".ljust(512, b"\0") + bytes(1024)


def _huge_pax() -> io.BytesIO:
    """A pax header holding one 300 MiB record (a comment), then a file."""
    prefix = b"%d comment=" % HUGE
    rest = HUGE - len(prefix) - 1  # the value, before the record's newline
    times = rest // MiB
    return _gzip(_header("././@PaxHeader", tarfile.XHDTYPE, HUGE) + prefix, b"a" * MiB, times,
                 b"a" * (rest - times * MiB) + b"\n" + _end(HUGE))


def _huge_long_name() -> io.BytesIO:
    """A GNU long-name header holding a 300 MiB name, then a file."""
    return _gzip(_header("././@LongLink", tarfile.GNUTYPE_LONGNAME, HUGE), b"a" * MiB,
                 HUGE // MiB, _end(HUGE))


@pytest.mark.parametrize("make", [_huge_pax, _huge_long_name], ids=["pax", "gnu-long-name"])
def test_an_extended_header_of_300_mib_is_refused_without_reading_it(tmp_path, make):
    archive = make()
    assert len(archive.getvalue()) < 400 * 1024  # what the attacker sends
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(InputError) as e:
            unpack(archive, tmp_path / "dest", 100 * MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    took = time.monotonic() - started
    kind = "pax" if make is _huge_pax else "long name"
    assert e.value.message == f"the upload is refused: a {kind} header of 300.0 MiB; at most 64.0 KiB"
    assert peak < 20 * MiB, f"{peak / MiB:.0f} MiB"  # tarfile read it whole: 300 MiB and more
    assert took < 5, took
    assert os.listdir(tmp_path) == []


def _many(count: int) -> io.BytesIO:
    """`count` empty files f000000..., written header by header (quick to make)."""
    template = bytearray(_header("f000000", tarfile.REGTYPE, 0))
    template[148:156] = b" " * 8
    base = sum(template) - sum(b"f000000")
    blocks = []
    for i in range(count):
        name = b"f%06d" % i
        template[0:7] = name
        template[148:156] = b"%06o\0 " % (base + sum(name))
        blocks.append(bytes(template))
    raw = b"".join(blocks) + bytes(1024)
    return io.BytesIO(zlib.compress(raw, 1, wbits=31))


def test_over_100000_entries_are_refused_before_a_file_is_written(tmp_path, monkeypatch):
    def wrote(*args):
        raise AssertionError("a file was written before the refusal")

    monkeypatch.setattr(unpacking, "_place", wrote)  # where each file's place is made
    started = time.monotonic()
    with pytest.raises(TooLarge, match="the upload holds over 100,000 entries"):
        unpack(_many(100_001), tmp_path / "dest", 100 * MiB)
    assert time.monotonic() - started < 15
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT], ids=["pax", "gnu"])
def test_the_first_pass_finds_what_tarfile_finds(tmp_path, fmt):
    """Its offsets are tarfile's: long names and links (pax records or GNU headers), a
    folder whose header claims a size (tarfile reads no data after it)."""
    from orchestrator.service.upload.headers import survey

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=fmt) as tar:
        for name, data in (("a" * 150 + "/b.py", b"x" * 700), ("é.txt", b"y"), ("s.py", b"")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("l")
        link.type, link.linkname = tarfile.SYMTYPE, "a" * 150 + "/b.py"
        folder = tarfile.TarInfo("d")
        folder.type, folder.size = tarfile.DIRTYPE, 10_000
        for info in (link, folder):
            tar.addfile(info)
        tar.addfile(tarfile.TarInfo("after-d.py"), io.BytesIO(b""))
    buf.seek(0)
    found = survey(buf, MiB, 100)
    assert (found.entries, found.bytes) == (6, 701) and buf.tell() == 0  # left where it was
    with tarfile.open(fileobj=buf, mode="r:gz") as tar:
        assert len(tar.getmembers()) == 6
    buf.seek(0)
    assert unpack(buf, tmp_path / "dest", MiB) == {"files": 4, "bytes": 701}


GIT = {
    ".git/config": [(".git/config", "file", "[core]\n\tfsmonitor = touch /tmp/pwned\n")],
    "sub/.git": [("sub/.git", "file", "gitdir: /srv/other\n")],
    ".GIT folder": [(".GIT", "dir", None)],
    "a link named .git": [("repo", "dir", None), (".git", "link", "repo")],
    "a link to .git": [("g", "link", ".git"), ("g/config", "file", "[core]\n")],
}


@pytest.mark.parametrize("case", GIT, ids=list(GIT))
def test_an_upload_with_a_git_folder_is_refused(tmp_path, case):
    from tests.unit.service.test_upload import _archive

    with pytest.raises(InputError) as e:
        unpack(_archive(("train.py", "file", "x"), *GIT[case]), tmp_path / "dest", MiB)
    assert e.value.message.startswith("the upload is refused: ") and ".git folder" in e.value.message
    assert "orch submit` leaves .git out" in e.value.hint
    assert os.listdir(tmp_path) == []


# -- whose upload is whose ---------------------------------------------------------------------

D1, D2, D3 = "1" * 64, "2" * 64, "3" * 64


def test_owners_are_kept_per_upload_and_the_quota_counts_each_owner(tmp_path):
    from orchestrator.service.upload import owners

    root = tmp_path / "uploads"
    root.mkdir()
    owners.claim(root, D1, "alice", 600_000, quota=MiB)
    assert owners.owns(root, D1, "alice") and not owners.owns(root, D1, "bob")
    assert not owners.owns(root, D2, "alice")  # never sent
    owners.claim(root, D1, "alice", 600_000, quota=MiB)  # again: nothing changes
    assert owners.held(root, "alice") == 600_000
    with pytest.raises(TooLarge) as e:
        owners.claim(root, D2, "alice", 500_000, quota=MiB)
    assert e.value.message == ("alice's uploads on this server hold 585.9 KiB; this one "
                               "(488.3 KiB, 4 KiB counted for each file and folder) would be "
                               "over the upload quota of 1.0 MiB")
    assert "upload_keep_hours" in e.value.hint and "upload_quota_mb" in e.value.hint
    assert not owners.owns(root, D2, "alice") and owners.held(root, "alice") == 600_000
    owners.claim(root, D1, "bob", 600_000, quota=MiB)  # the same bytes: each owner counts them
    assert owners.owns(root, D1, "bob") and owners.held(root, "bob") == 600_000
    owners.claim(root, D2, "alice", 500_000, quota=0)  # 0: no quota
    assert owners.held(root, "alice") == 1_100_000
    owners.forget(root, D1)  # the collector removed the upload
    assert not owners.owns(root, D1, "alice") and owners.held(root, "alice") == 500_000
    assert sorted(os.listdir(root / owners.DIR)) == [f"{D2}.json"]  # no temporary left
    # A record is written whole and renamed over; one that is not JSON names no owner.
    (root / owners.DIR / f"{D3}.json").write_text('{"version": 1, "bytes": 5, "owners": ["al')
    assert not owners.owns(root, D3, "alice") and owners.held(root, "alice") == 500_000


def test_a_release_undoes_a_claim_whose_unpack_failed(tmp_path):
    from orchestrator.service.upload import owners

    root = tmp_path / "uploads"
    root.mkdir()
    owners.claim(root, D3, "alice", 10, quota=MiB)
    owners.claim(root, D3, "bob", 10, quota=MiB)
    owners.release(root, D3, "bob")
    assert owners.owns(root, D3, "alice") and not owners.owns(root, D3, "bob")
    owners.release(root, D3, "alice")
    assert os.listdir(root / owners.DIR) == []


def test_only_an_owner_or_an_admin_gets_an_upload_and_others_get_the_missing_error(tmp_path):
    from orchestrator.service import upload
    from orchestrator.service.upload import owners

    home = tmp_path / "home"
    path = upload.uploads_root(home) / D1
    path.mkdir(parents=True)
    owners.claim(upload.uploads_root(home), D1, "alice", 1, quota=MiB)
    assert upload.folder(home, D1, "alice") == path
    assert upload.folder(home, D1, "root", admin=True) == path
    with pytest.raises(InputError) as theirs:
        upload.folder(home, D1, "bob")
    with pytest.raises(InputError) as none:
        upload.folder(home, D2, "bob")
    assert theirs.value.message == f"upload {D1[:16]}... is not on this server"
    assert (theirs.value.message.replace(D1[:16], D2[:16]), theirs.value.hint) == (
        none.value.message, none.value.hint)


def _send_as(api, who: str, data: bytes):
    return api("POST", "/v1/uploads", who=who, content=data,
               headers={"Content-Type": "application/octet-stream"})


@pytest.fixture
def api(tmp_path, monkeypatch):
    """The app in-process with alice and bob (users) and root (an admin), a 1 MiB quota."""
    from fastapi.testclient import TestClient

    from orchestrator.server import auth
    from orchestrator.server.app import create_app
    from orchestrator.server.scheduler import Scheduler
    from tests.conftest import serve_settings, store_at

    settings, alice = serve_settings(tmp_path, monkeypatch, upload_max_mb=2, upload_quota_mb=1)
    tokens = {"alice": alice}
    store = store_at(settings.home)
    for name in ("bob", "root"):
        tokens[name], digest = auth.new_token()
        store.add_token(name, digest, admin=name == "root")
    store.close()
    with TestClient(create_app(settings, Scheduler(settings), run_scheduler=False)) as client:
        def call(method, path, who="alice", **kw):
            headers = {"Authorization": f"Bearer {tokens[who]}", **kw.pop("headers", {})}
            return client.request(method, path, headers=headers, **kw)
        call.settings = settings
        yield call


def _packed(tmp_path: Path, name: str, size: int) -> bytes:
    code = tmp_path / name
    code.mkdir()
    (code / "data.bin").write_bytes(os.urandom(size))
    return packed(code, 2 * MiB)


def test_the_api_keeps_uploads_to_their_owners_and_each_user_to_the_quota(api, tmp_path):
    small, big = _packed(tmp_path, "small", 600_000), _packed(tmp_path, "big", 500_000)
    digest = _send_as(api, "alice", small).json()["upload"]
    job = {"spec": "name: j\nworkdir: .\nrun: python t.py\n", "upload": digest}
    assert api("GET", f"/v1/uploads/{digest}").status_code == 200
    assert api("GET", f"/v1/uploads/{digest}", who="root").status_code == 200
    r = api("GET", f"/v1/uploads/{digest}", who="bob")
    assert r.status_code == 404 and r.json()["error"] == f"upload {digest[:16]}... is not on this server"
    r = api("POST", "/v1/plan", who="bob", json=job)
    assert r.status_code == 400 and r.json() == api("POST", "/v1/plan", who="bob", json={
        **job, "upload": "f" * 64}).json() | {"error": f"upload {digest[:16]}... is not on this server"}
    # The same bytes from bob: now his too (not "existing" for him).
    assert _send_as(api, "bob", small).json() == {"upload": digest, "existing": False}
    assert api("GET", f"/v1/uploads/{digest}", who="bob").status_code == 200
    # alice holds 590 KiB of her 1 MiB (586 KiB and its folder and file, 4 KiB each): 492 KiB
    # more is refused, and nothing is unpacked.
    r = _send_as(api, "alice", big)
    assert r.status_code == 413 and r.json()["error"] == (
        "alice's uploads on this server hold 589.9 KiB; this one (492.3 KiB, 4 KiB counted "
        "for each file and folder) would be over the upload quota of 1.0 MiB")
    from orchestrator.service.upload import uploads_root

    assert sorted(os.listdir(uploads_root(api.settings.home))) == [".owners", digest]
    assert _send_as(api, "root", big).status_code == 201  # root's quota is root's own


def _folders(n: int, tag: str) -> bytes:
    """A tar.gz of `n` empty folders (a few KB): what took 393 MiB and 100,005 inodes of
    the server's disk for 99,990 of them, counted as 0 bytes, before issue 47."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for i in range(n):
            info = tarfile.TarInfo(f"{tag}{i}")
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
    return out.getvalue()


def _receive(home: Path, body: bytes, quota: int, elsewhere=None):
    from orchestrator.service.upload import Receiver

    r = Receiver(home, 2 * MiB, "mallory", quota, 24.0,
                 **({"elsewhere": elsewhere} if elsewhere else {}))
    try:
        r.write(body)
        return r.finish()
    finally:
        r.close()


def test_the_quota_counts_each_entry_so_empty_folders_cannot_fill_the_disk(tmp_path):
    # 1,000 empty folders count 3.9 MiB: two of them fit an 8 MiB quota, a third does not.
    _receive(tmp_path, _folders(1000, "a"), 8 * MiB)
    _receive(tmp_path, _folders(1000, "b"), 8 * MiB)
    with pytest.raises(TooLarge, match="would be over the upload quota of 8.0 MiB"):
        _receive(tmp_path, _folders(1000, "c"), 8 * MiB)


def test_the_quota_counts_the_users_uploads_on_every_replica(tmp_path):
    # Where replicas share a store, what its other uploads hold anywhere counts (the store's
    # sum, sharing.held_everywhere): 7.5 MiB elsewhere, and 1,000 folders here are too many.
    seen = []
    with pytest.raises(TooLarge, match="hold 7.5 MiB"):
        _receive(tmp_path, _folders(1000, "a"), 8 * MiB,
                 lambda besides: seen.append(besides) or int(7.5 * MiB))
    assert len(seen[0]) == 64  # the upload itself is not counted twice
