"""`orch serve` removing uploads nobody needs: the decision as a table of cases, then the
collector on a real home and store (which folders remain, crash leftovers, a folder named
while it is being removed), the scheduler's step, and a client that resends an upload
removed between its check and its submit (a real server on a loopback port)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from orchestrator.base.errors import InputError
from orchestrator.service import upload, upload_gc
from orchestrator.service.upload_gc import Folder, Use, collect, decide, job_uses, schedule_uses
from orchestrator.store import iso
from tests.conftest import job_row, serve_settings, store_at

HOUR = 3600.0
NOW = 1_800_000_000.0


def D(c: str) -> str:
    """A digest made of one repeated hex character."""
    return c * 64


def _verdicts(folders, uses, keep_hours=24.0, now=NOW) -> dict:
    return {v.name: (v.remove, v.reason) for v in decide(folders, uses, now, keep_hours)}


# -- the decision -----------------------------------------------------------------------------

def test_an_upload_is_removed_only_when_unreferenced_and_unused_for_keep_hours():
    old, fresh = NOW - 48 * HOUR, NOW - 2 * HOUR
    folders = [Folder(D(c), old) for c in "abcdef9"] + [Folder(D("8"), fresh)]
    uses = [
        Use(D("a"), "schedule sched-1 (nightly)", True),                     # rule 1
        Use(D("b"), "job orch-b (RUNNING)", True, old),                      # rule 2
        Use(D("c"), "job orch-c (PENDING)", True, NOW - 100 * HOUR),         # rule 2, however old
        Use(D("d"), "job orch-d (SUCCEEDED)", False, NOW - 3 * HOUR),        # rule 3: a job's time
        Use(D("e"), "job orch-e (FAILED)", False, NOW - 30 * HOUR),          # all rules hold
        Use(D("f"), "job orch-f (CANCELLED)", False, NOW - 24 * HOUR),       # exactly keep_hours
    ]
    got = _verdicts(folders, uses)
    assert got == {
        D("a"): (False, "schedule sched-1 (nightly) needs it"),
        D("b"): (False, "job orch-b (RUNNING) needs it"),
        D("c"): (False, "job orch-c (PENDING) needs it"),
        D("d"): (False, "last used 2027-01-15T05:00:00Z, within upload_keep_hours (24)"),
        D("e"): (True, "last used 2027-01-14T02:00:00Z, no job or schedule needs it"),
        D("f"): (False, "last used 2027-01-14T08:00:00Z, within upload_keep_hours (24)"),
        D("9"): (True, "last used 2027-01-13T08:00:00Z, no job or schedule needs it"),
        D("8"): (False, "last used 2027-01-15T06:00:00Z, within upload_keep_hours (24)"),
    }
    # The folder's own time counts as a use: a fresh folder outlives an old job.
    assert _verdicts([Folder(D("e"), fresh)], uses[4:5])[D("e")][0] is False
    assert _verdicts(folders, uses, keep_hours=0.5)[D("8")][0] is True


def test_keep_hours_0_removes_no_upload_but_crash_leftovers_still_go():
    folders = [Folder(D("a"), 0.0), Folder(".unpacking-1", NOW - 2 * HOUR),
               Folder(".removing-2", NOW - 2 * HOUR)]
    gone = (True, "left by a server that stopped, unchanged since 2027-01-15T06:00:00Z")
    assert _verdicts(folders, [], keep_hours=0) == {
        D("a"): (False, "upload_keep_hours is 0: uploads are kept"),
        ".removing-2": gone, ".unpacking-1": gone}


def test_temporary_folders_go_after_an_hour_and_other_names_are_never_touched():
    folders = [Folder(".unpacking-new", NOW - 59 * 60), Folder(".unpacking-old", NOW - 61 * 60),
               Folder("notes", 0.0), Folder(D("a")[:63], 0.0), Folder(D("A"), 0.0),
               Folder(".removing-x", NOW - 61 * 60)]
    assert _verdicts(folders, []) == {".unpacking-new": (False, "in progress"),
                                      ".unpacking-old": (True, "left by a server that stopped, "
                                                         "unchanged since 2027-01-15T06:59:00Z"),
                                      ".removing-x": (True, "left by a server that stopped, "
                                                      "unchanged since 2027-01-15T06:59:00Z")}


def test_what_jobs_and_schedules_refer_to():
    home = "/srv/orch"
    folder = f"{home}/uploads/{D('a')}"
    jobs = [
        {"id": "orch-1", "status": "RUNNING", "created_at": 10.0, "finished_at": None,
         "spec": {"workdir": folder}, "info": {"upload": D("a")}, "source_file": None},
        # A schedule's slot: no info.upload, the workdir (a subfolder, spelled oddly) says it.
        {"id": "orch-2", "status": "PENDING", "created_at": 20.0, "finished_at": None,
         "spec": {"workdir": f"{home}/uploads//./{D('b')}/src"}, "info": {"schedule": "s"},
         "source_file": None},
        {"id": "orch-3", "status": "SUCCEEDED", "created_at": 30.0, "finished_at": 90.0,
         "spec": {"workdir": "../uploads/" + D("c")}, "info": {}, "source_file": f"{home}/jobs/x.yaml"},
        {"id": "orch-4", "status": "FAILED", "created_at": 40.0, "finished_at": 50.0,
         "spec": {"workdir": "/home/me/code"}, "info": {}, "source_file": None},
        {"id": "orch-5", "status": "SUCCEEDED", "created_at": 60.0, "finished_at": 70.0,
         "spec": {"workdir": "."}, "info": {}, "source_file": f"{folder}/job.yaml"},
    ]
    rows = [job_row({"name": "j", **j}) for j in jobs]  # the table has no names: job_uses reads none
    assert job_uses(rows) == [Use(D("a"), "job orch-1 (RUNNING)", True, 10.0),
                              Use(D("b"), "job orch-2 (PENDING)", True, 20.0),
                              Use(D("c"), "job orch-3 (SUCCEEDED)", False, 90.0),
                              Use(D("a"), "job orch-5 (SUCCEEDED)", False, 70.0)]
    text = f'name: nightly\nworkdir: "{folder}"  # the client\'s folder\nrun: python t.py\n'
    from orchestrator.records.schedule import ScheduleRow

    schedules = [ScheduleRow(id="sched-1", name="nightly", cron="0 3 * * *", source_text=text,
                             spec={"workdir": folder}, source_file="/home/me/nightly.yaml"),
                 ScheduleRow(id="sched-2", name="plain", cron="0 3 * * *",
                             source_text="workdir: /srv/code\nrun: x\n",
                             spec={"workdir": "/srv/code"}, source_file=None)]
    assert schedule_uses(schedules) == [Use(D("a"), "schedule sched-1 (nightly)", True)]


# -- the collector on a real home and store ----------------------------------------------------

def _upload(home: Path, name: str, age_h: float, now: float, files: int = 1) -> Path:
    path = upload.uploads_root(home) / name
    path.mkdir(parents=True)
    for i in range(files):
        (path / f"f{i}.py").write_text("x" * (i + 1))
    upload.owners.claim(upload.uploads_root(home), name, "alice", files, quota=0)
    t = now - age_h * HOUR
    os.utime(path, (t, t))
    return path


def _job(store, name: str, status: str, created_h: float, now: float, finished_h=None, **kw) -> str:
    rec = store.create_job(name=name, spec=kw.pop("spec", {"run": "x"}), kind="exploratory",
                           target="local", fingerprint=None, **kw)
    if status != "PENDING":
        store.set_status(rec.id, status)
    store.update(rec.id, created_at=now - created_h * HOUR,
                 finished_at=None if finished_h is None else now - finished_h * HOUR)
    return rec.id


def test_the_collector_removes_exactly_the_uploads_nobody_needs(tmp_path, caplog):
    home, now = tmp_path / "home", time.time()
    root = upload.uploads_root(home)
    store = store_at(home)
    try:
        for c in "abcdef9":
            _upload(home, D(c), 48, now, files=3)
        _upload(home, D("8"), 2, now)  # sent two hours ago, never used
        (root / "notes").mkdir()  # not orch's: left alone
        text = f'name: nightly\nworkdir: "{root / D("a")}"\nrun: python t.py\n'
        store.add_schedule(name="nightly", owner="alice", cron="0 3 * * *",
                           spec={"workdir": str(root / D("a"))}, source_text=text,
                           source_file=None, next_at=now + HOUR)
        _job(store, "b", "RUNNING", 48, now, info={"upload": D("b")})
        _job(store, "c", "PENDING", 100, now, spec={"workdir": str(root / D("c"))},
             info={"schedule": "sched-x"})
        _job(store, "d", "SUCCEEDED", 5, now, finished_h=3, info={"upload": D("d")})
        _job(store, "e", "FAILED", 50, now, finished_h=30, info={"upload": D("e")})
        _job(store, "old", "SUCCEEDED", 500, now, finished_h=499, info={"upload": D("9")})
        with caplog.at_level(logging.INFO, logger="orch.serve"):
            removed = collect(home, store, 24, now)
        assert removed == [D("9"), D("e"), D("f")]  # in name order
        assert sorted(os.listdir(root)) == sorted([D(c) for c in "abcd8"] + ["notes", ".owners"])
        assert sorted(os.listdir(root / ".owners")) == [f"{D(c)}.json" for c in "8abcd"]  # with them
        # Each logged with its size and its last use: the folder's time, or a job's if newer
        # (e's job finished 30 hours ago, after its folder was unpacked).
        assert [r.getMessage() for r in caplog.records] == [
            f"removed upload {D(c)[:16]}... (3 files, 6 bytes): last used {iso(now - h * HOUR)}, "
            "no job or schedule needs it" for c, h in (("9", 48), ("e", 30), ("f", 48))]
        # With upload_keep_hours 0 nothing more goes, however old.
        assert collect(home, store, 0, now + 1000 * HOUR) == []
        # The schedule removed and the jobs finished long ago: all of orch's go.
        store.remove_schedule(store.schedules()[0].id)
        for rec in store.list(limit=100, statuses=("PENDING", "RUNNING")):
            store.set_status(rec.id, "CANCELLED")
        assert collect(home, store, 24, time.time() + 48 * HOUR) == [D(c) for c in "8abcd"]
        assert sorted(os.listdir(root)) == [".owners", "notes"] and os.listdir(root / ".owners") == []
    finally:
        store.close()


def test_leftovers_of_a_crash_go_after_an_hour(tmp_path):
    home = tmp_path / "home"
    root = upload.uploads_root(home)
    for name in (".unpacking-0f0f", ".removing-abcd-1234"):
        (root / name / "sub").mkdir(parents=True)
        (root / name / "sub" / "half.bin").write_bytes(b"x" * 10)
    _upload(home, D("a"), 0, time.time())
    (root / ".unpacking-file").write_text("a file: not a folder orch made")
    upload.owners.claim(root, D("b"), "bob", 1, quota=0)  # the server stopped before its rename
    (root / ".owners" / ".tmp-1234").write_text("{")  # or while writing a record
    store = store_at(home)
    try:
        assert collect(home, store, 24, time.time()) == []  # an unpack may be in progress
        # A rename sets the ctime: a folder moved aside a moment ago counts as new, however
        # old its mtime, so an hour passes before it is taken for a leftover.
        os.utime(root / ".removing-abcd-1234", (0, 0))
        assert collect(home, store, 24, time.time()) == []
        later = time.time() + 2 * HOUR
        assert sorted(collect(home, store, 24, later)) == [".removing-abcd-1234", ".unpacking-0f0f"]
        assert sorted(os.listdir(root)) == [".owners", ".unpacking-file", D("a")]
        assert os.listdir(root / ".owners") == [f"{D('a')}.json"]
    finally:
        store.close()


def test_a_folder_named_while_it_is_being_removed_is_put_back(tmp_path):
    home, now = tmp_path / "home", time.time()
    path = _upload(home, D("a"), 48, now)
    root = upload.uploads_root(home)
    scanned = upload_gc.scan(root)
    (verdict,) = decide([f for f, _ in scanned.values()], [], now, 24)
    assert verdict.remove
    assert upload.folder(home, D("a"), "alice") == path  # a job names it: "used now"
    assert upload_gc._remove(root, verdict, scanned[D("a")][1]) is None
    assert sorted(os.listdir(root)) == [".owners", D("a")] and (path / "f0.py").read_text() == "x"
    # And once it is gone, naming it is the error a client answers by sending it again.
    assert upload_gc._remove(root, verdict, os.stat(path).st_mtime_ns).startswith("removed upload")
    with pytest.raises(InputError) as e:
        upload.folder(home, D("a"), "alice")
    assert e.value.message == upload.missing(D("a")).message
    assert e.value.message == f"upload {D('a')[:16]}... is not on this server"
    assert os.listdir(root) == [".owners"] and os.listdir(root / ".owners") == []


def test_the_scheduler_collects_at_most_every_ten_minutes(tmp_path, monkeypatch, caplog):
    from orchestrator.server.scheduler import Scheduler
    from orchestrator.settings import Settings

    for k in list(os.environ):
        if k.startswith("ORCH_") and k != "ORCH_DATABASE_URL":
            monkeypatch.delenv(k)
    settings = Settings(home=tmp_path / "home", mode="local", upload_keep_hours=1)
    sched = Scheduler(settings)
    _upload(settings.home, D("a"), 2, time.time())
    with sched.session() as orch, caplog.at_level(logging.INFO, logger="orch.serve"):
        assert sched.collect_uploads(orch) == [D("a")]
        _upload(settings.home, D("b"), 2, time.time())
        assert sched.collect_uploads(orch) == []  # not yet ten minutes
        assert sched.collect_uploads(orch, force=True) == [D("b")]
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        f"removed upload {D('a')[:16]}...", f"removed upload {D('b')[:16]}..."]


# -- a client whose upload is removed between its check and its submit -------------------------

@pytest.fixture
def server(tmp_path, monkeypatch):
    """`orch serve`'s app on a loopback port (no scheduler thread): (url, token, settings)."""
    import uvicorn

    from orchestrator.server.app import create_app
    from orchestrator.server.scheduler import Scheduler

    settings, token = serve_settings(tmp_path, monkeypatch, upload_max_mb=1)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = create_app(settings, Scheduler(settings), run_scheduler=False)
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", ws="none"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not srv.started and time.time() < deadline:
        time.sleep(0.01)
    assert srv.started
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", token, settings
    finally:
        srv.should_exit = True
        thread.join(10)
        sock.close()


def test_a_client_sends_the_upload_again_when_the_collector_removed_it_meanwhile(server, tmp_path):
    from orchestrator.client import Remote
    from orchestrator.service.upload import MiB

    url, token, settings = server
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('trained')\n")
    job = tmp_path / "job.yaml"
    job.write_text("name: up\nworkdir: code\nrun: python train.py\n")
    notes: list[str] = []
    client = Remote(url, token, upload_max_bytes=MiB, on_note=notes.append)
    first = client.submit(job)
    root = upload.uploads_root(settings.home)
    (digest,) = set(os.listdir(root)) - {".owners"}
    assert first.run.upload == digest and notes[-1].startswith("sending the workdir")

    def collector_runs_now(text: str):
        notes.append(text)
        if "the server has these files already" in text:  # between the check and the submit
            store = store_at(settings.home)
            try:
                store.set_status(first.id, "SUCCEEDED")
                assert collect(settings.home, store, 1, time.time() + 3 * HOUR) == [digest]
            finally:
                store.close()

    notes.clear()
    client.on_note = collector_runs_now
    second = client.submit(job)
    assert second.run.upload == digest and second.id != first.id
    assert notes == [f"workdir {code}: the server has these files already (1 files, 17 bytes); "
                     "nothing sent",
                     "the server removed its copy of the workdir meanwhile (unused for "
                     "upload_keep_hours): sending it again"]
    assert (root / digest / "train.py").read_text() == "print('trained')\n"
    # Any other refusal is not retried: it is the user's to fix.
    job.write_text("name: up\nworkdir: code\nrun: python train.py\nsecrets: {ORCH_GC_UNSET: null}\n")
    notes.clear()
    client.on_note = notes.append
    with pytest.raises(InputError, match="secrets.ORCH_GC_UNSET: "):
        client.submit(job)
    assert not any("sending it again" in n for n in notes)
