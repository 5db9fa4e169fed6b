"""A client's workdir sent to `orch serve`: what is packed, that the archive names its
content, the size limit, and that the server unpacks nothing outside its folder (absolute
names, `..`, links out, hard links, devices, bombs). Then the API in-process: an upload is
taken once, a job and a schedule's slots run from it."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import time
from pathlib import Path

import pytest

from orchestrator.base.errors import InputError
from orchestrator.service.upload import MiB, TooLarge, local_workdir, pack, set_workdir, unpack, uploads_root
from orchestrator.spec import load_spec, load_spec_text


def _write(path, text="x", mode=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)
    return path


def _tree(root):
    """Every path under root, relative, with what it is."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            out[rel] = ("link:" + os.readlink(p) if os.path.islink(p) else
                        "dir" if os.path.isdir(p) else Path(p).read_text())
    return out


@pytest.fixture
def workdir(tmp_path):
    w = tmp_path / "code"
    _write(w / "train.py", "print('trained')\n")
    _write(w / "run.sh", "#!/bin/sh\necho run\n", mode=0o755)
    _write(w / "sub" / "notes.txt", "kept")
    (w / "empty").mkdir()
    for skipped in (".git/config", "__pycache__/train.cpython-311.pyc", ".venv/bin/python",
                    "sub/__pycache__/x.pyc", "data/big.bin", "model.ckpt", "sub/best.ckpt",
                    "sub/only-here.txt"):
        _write(w / skipped)
    _write(w / ".orchignore", "# what the job does not need\ndata/\n*.ckpt\n\nsub/only-here.txt\n")
    (w / "latest").symlink_to("sub/notes.txt")  # inside: kept as a link
    (w / "etc").symlink_to("/etc")  # outside: left out, and said so
    (w / "sub" / "up").symlink_to("../..")
    return w


def test_pack_sends_the_code_and_leaves_out_what_orch_never_sends(workdir, tmp_path):
    packed = pack(workdir, MiB)
    assert packed.files == 4 and packed.left_out == [
        "etc (a link to /etc, outside the workdir)", "sub/up (a link to ../.., outside the workdir)"]
    dest = tmp_path / "unpacked"
    with packed.file:
        stats = unpack(packed.file, dest, MiB)
    assert stats == {"files": 4, "bytes": packed.content}
    assert _tree(dest) == {".orchignore": (workdir / ".orchignore").read_text(), "empty": "dir",
                           "latest": "link:sub/notes.txt", "run.sh": "#!/bin/sh\necho run\n",
                           "sub": "dir", "sub/notes.txt": "kept", "train.py": "print('trained')\n"}
    # Readable by the server's user only; the executable bit kept for its owner.
    modes = {rel: stat.S_IMODE(os.lstat(dest / rel).st_mode) for rel in ("train.py", "run.sh", "sub", "empty")}
    assert modes == {"train.py": 0o600, "run.sh": 0o700, "sub": 0o700, "empty": 0o700}
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    assert (dest / "train.py").stat().st_mtime == int((workdir / "train.py").stat().st_mtime)


def test_the_archive_names_its_content(workdir):
    one, two = pack(workdir, MiB), pack(workdir, MiB)
    assert one.digest == two.digest and len(one.digest) == 64  # a resubmit finds it on the server
    _write(workdir / "data" / "more.bin", "ignored")  # left out: the same archive
    assert pack(workdir, MiB).digest == one.digest
    _write(workdir / "train.py", "print('changed')\n")
    assert pack(workdir, MiB).digest != one.digest
    for p in (one, two):
        p.close()


def test_a_workdir_over_the_limit_is_refused_with_its_size_and_how_to_shrink_it(tmp_path):
    w = tmp_path / "big"
    _write(w / "data" / "a.bin", "x" * (3 * MiB // 2))
    _write(w / "weights.pt", "y" * (MiB // 2))
    _write(w / "train.py")
    with pytest.raises(TooLarge) as e:
        pack(w, MiB)
    assert e.value.message == (f"the workdir {w} holds 2.0 MiB in 3 files; the upload limit is "
                               "1.0 MiB (largest: data/ 1.5 MiB, weights.pt 512.0 KiB, train.py 1 bytes)")
    assert f"{w}/.orchignore" in e.value.hint and "upload_max_mb (ORCH_UPLOAD_MAX_MB)" in e.value.hint
    _write(w / ".orchignore", "data/\n*.pt\n")
    assert pack(w, MiB).files == 2  # .orchignore and train.py


# -- archives the server refuses -------------------------------------------------------------

def _archive(*members) -> io.BytesIO:
    """A tar.gz of (name, kind, payload) members, written as an attacker would."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = payload.encode() if isinstance(payload, str) else payload
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "link": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
                         "fifo": tarfile.FIFOTYPE, "dev": tarfile.CHRTYPE}[kind]
            if kind in ("link", "hard"):
                info.linkname = payload
            tar.addfile(info)
    buf.seek(0)
    return buf


def _bomb(declared: int) -> io.BytesIO:
    """One member whose header claims `declared` bytes of zeros: a few KiB compressed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("zeros.bin")
        info.size = declared
        tar.addfile(info, io.BytesIO(bytes(declared)))
    buf.seek(0)
    return buf


REFUSED = {
    "absolute name": ([("/tmp/evil", "file", "x")], "is an absolute path"),
    "dot-dot": ([("a/../../evil", "file", "x")], "climbs out with '..'"),
    "absolute link": ([("pw", "link", "/etc/passwd")], "is a link to '/etc/passwd', outside"),
    "link out": ([("sub/out", "link", "../../x")], "is a link to '../../x', outside"),
    # Each link's text stays inside, but x -> y/.. with y -> . resolves above the top:
    # a file written through it is refused before anything is created.
    "link chain": ([("y", "link", "."), ("x", "link", "y/.."), ("x/evil", "file", "x")],
                   "would be written through a link to outside the upload"),
    "dangling chain": ([("y", "link", "."), ("x", "link", "y/..")],
                       "is a link that resolves outside the upload"),
    "hard link": ([("a", "file", "x"), ("b", "hard", "/etc/passwd")], "is a hard link"),
    "fifo": ([("p", "fifo", None)], "is a named pipe"),
    "device": ([("d", "dev", None)], "is a device"),
    "twice": ([("a", "file", "x"), ("a", "file", "y")], "is in the archive twice"),
    "file over a link": ([("l", "link", "a"), ("l", "file", "x")], "is in the archive twice"),
    "file then folder": ([("a", "file", "x"), ("a/b", "file", "y")], "cannot be unpacked"),
}


@pytest.mark.parametrize("case", REFUSED, ids=list(REFUSED))
def test_an_archive_that_reaches_outside_is_refused_and_leaves_nothing(tmp_path, case):
    members, problem = REFUSED[case]
    root = tmp_path / "uploads"
    root.mkdir()
    dest = root / "one"
    with pytest.raises(InputError) as e:
        unpack(_archive(*members), dest, MiB)
    assert problem in e.value.message and e.value.message.startswith("the upload is refused: ")
    assert "only files, folders and links" in e.value.hint or "inside its top folder" in e.value.hint
    assert not dest.exists() and os.listdir(root) == []  # all or nothing
    assert sorted(os.listdir(tmp_path)) == ["uploads"]  # nothing written beside it


def test_the_server_caps_size_and_count_before_writing_and_refuses_what_is_not_an_archive(tmp_path):
    with pytest.raises(TooLarge, match=r"the upload's files are over the limit of 1.0 MiB"):
        unpack(_bomb(2 * MiB), tmp_path / "bomb", MiB)
    many = _archive(*[(f"f{i}", "file", "") for i in range(30)])
    with pytest.raises(TooLarge, match="over 20 entries"):
        unpack(many, tmp_path / "many", MiB, max_files=20)
    for junk in (b"", b"not a tarball", _bomb(1000).getvalue()[:-20]):
        with pytest.raises(InputError, match="not a readable tar.gz archive"):
            unpack(io.BytesIO(junk), tmp_path / "junk", MiB)
    assert os.listdir(tmp_path) == []


# -- the job file and its workdir -----------------------------------------------------------

def test_the_workdir_in_the_job_text_is_replaced_and_nothing_else():
    text = "# nightly\nname: n   # the name\nworkdir: ./src  # the code\nrun: python t.py\n"
    assert set_workdir(text, "/srv/orch/uploads/ab") == (
        '# nightly\nname: n   # the name\nworkdir: "/srv/orch/uploads/ab"  # the code\nrun: python t.py\n')
    assert set_workdir("{workdir: ., run: x}", "/u") == '{workdir: "/u", run: x}'
    block = set_workdir("workdir: |\n  src\nrun: x\n", "/u")
    assert load_spec_text(block).workdir == "/u" and block.endswith("run: x\n")
    odd = set_workdir("workdir: 'it''s here'\nrun: x\n", '/u/"q"\\ é')
    assert load_spec_text(odd).workdir == '/u/"q"\\ é'
    # None given (it runs from its job file's folder, the upload): added as the last key.
    assert set_workdir("run: |\n  python t.py", "/u") == 'run: |\n  python t.py\nworkdir: "/u"\n'
    assert load_spec_text(set_workdir("run: |\n  python t.py\n", "/u")).run == "python t.py\n"
    with pytest.raises(ValueError):
        set_workdir("{run: x}", "/u")


def test_which_workdir_a_client_sends(tmp_path):
    _write(tmp_path / "code" / "t.py")
    job = _write(tmp_path / "jobs" / "j.yaml", "workdir: ../code\nrun: python t.py\n")
    assert local_workdir(load_spec(job)) == tmp_path / "code"  # from the job file's folder
    assert local_workdir(load_spec_text("run: x\n")) is None
    assert local_workdir(load_spec_text("workdir: /srv/shared/code\nrun: x\n")) is None  # the server's
    _write(job, "workdir: ./missing\nrun: x\n")
    with pytest.raises(InputError, match=r"j.yaml:1: workdir: .*/jobs/missing is not a directory"):
        local_workdir(load_spec(job))
    _write(job, "run: x\nworkdir: s3://bucket/code\n")
    with pytest.raises(InputError) as e:
        local_workdir(load_spec(job))
    assert e.value.message.endswith("j.yaml:2: workdir: 's3://bucket/code' is a URL; a workdir is a folder")
    assert "file_mounts" in e.value.hint


# -- the API in-process ------------------------------------------------------------------------

@pytest.fixture
def api(tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from orchestrator.server.app import create_app
    from orchestrator.server.scheduler import Scheduler
    from tests.conftest import serve_settings

    settings, token = serve_settings(tmp_path, monkeypatch, upload_max_mb=1)
    sched = Scheduler(settings)
    with TestClient(create_app(settings, sched, run_scheduler=False)) as client:
        def call(method, path, **kw):
            return client.request(method, path, headers={"Authorization": f"Bearer {token}",
                                                         **kw.pop("headers", {})}, **kw)
        call.settings, call.sched = settings, sched
        yield call


def _send(api, packed):
    data = packed.file.read()
    packed.close()
    return api("POST", "/v1/uploads", content=data, headers={"Content-Type": "application/octet-stream"})


def test_an_upload_is_taken_once_and_a_job_runs_from_it(api, workdir):
    from tests.conftest import store_at

    packed = pack(workdir, MiB)
    digest = packed.digest
    assert api("GET", f"/v1/uploads/{digest}").status_code == 404
    r = _send(api, packed)
    assert r.status_code == 201 and r.json() == {"upload": digest, "existing": False}
    assert _send(api, pack(workdir, MiB)).json() == {"upload": digest, "existing": True}
    assert api("GET", f"/v1/uploads/{digest}").json() == {"upload": digest, "existing": True}
    folder = uploads_root(api.settings.home) / digest
    assert (folder / "train.py").read_text() == "print('trained')\n"
    assert sorted(os.listdir(uploads_root(api.settings.home))) == [".owners", digest]  # no temporary left
    job = {"spec": "name: up\nworkdir: ../code\nrun: python train.py\n",
           "file": str(workdir.parent / "jobs" / "up.yaml"), "upload": digest}
    r = api("POST", "/v1/jobs", json=job)
    assert r.status_code == 201, r.text
    rec = r.json()
    assert rec["run"]["upload"] == digest
    store = store_at(api.settings.home)
    assert store.get(rec["id"]).spec["workdir"] == str(folder)
    store.close()
    plan = api("POST", "/v1/plan", json=job)
    assert plan.status_code == 200 and plan.json()["fingerprint"] == rec["fingerprint"]
    # Refusals: one {error, hint} each.
    r = api("POST", "/v1/jobs", json={**job, "upload": "0" * 64})
    assert r.status_code == 400 and r.json()["error"] == "upload 0000000000000000... is not on this server"
    r = api("POST", "/v1/jobs", json={**job, "spec": "train: {job: image-classification}\n"})
    assert r.status_code == 400 and "an upload came with this job, but it has no workdir" in r.json()["error"]
    # A run: job without workdir runs from its job file's folder: the client sent it (issue 48).
    r = api("POST", "/v1/jobs", json={**job, "spec": "run: echo\n"})
    assert r.status_code == 201 and r.json()["run"]["upload"] == digest, r.text
    r = api("POST", "/v1/uploads", content=bytes(2 * MiB), headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 413 and r.json() == {
        "error": "the upload is 2.0 MiB; this server takes at most 1.0 MiB",
        "hint": "leave files out of the workdir with a .orchignore, or raise upload_max_mb "
                "(ORCH_UPLOAD_MAX_MB) on the server"}
    r = api("POST", "/v1/uploads", content=b"junk")
    assert r.status_code == 400 and r.json()["error"].startswith("the upload is not a readable tar.gz")
    assert api("GET", "/v1/uploads/abc").status_code == 400
    assert sorted(os.listdir(uploads_root(api.settings.home))) == [".owners", digest]


def test_a_schedule_registered_with_an_upload_runs_its_slots_from_it(api, workdir):
    from tests.conftest import store_at

    digest = _send(api, pack(workdir, MiB)).json()["upload"]
    folder = uploads_root(api.settings.home) / digest
    text = "name: nightly\nworkdir: .  # the client's folder\nrun: python train.py\nschedule: {cron: '0 3 * * *'}\n"
    r = api("POST", "/v1/jobs", json={"spec": text, "file": str(workdir / "nightly.yaml"), "upload": digest})
    assert r.status_code == 201, r.text
    s = r.json()["schedule"]
    store = store_at(api.settings.home)
    try:
        stored = store.schedule(s["id"]).source_text
        assert stored == text.replace("workdir: .", f'workdir: "{folder}"')
        with api.sched.session() as orch:
            (job_id,) = api.sched.run_cron(orch, time.time() + 2 * 86_400)
        assert store.get(job_id).spec["workdir"] == str(folder)
    finally:
        store.close()
