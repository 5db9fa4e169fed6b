"""The store survives: damaged files give one clear error (exit 1) and a working `orch doctor`,
the damaged file is never reset or deleted, repair salvages the readable jobs, a crashed
writer's WAL is recovered, and migrations run once and survive a crash between versions."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import signal
import sqlite3
import subprocess
import sys

import pytest

from orchestrator import store as store_mod
from orchestrator.base.errors import StoreError
from orchestrator.store import SCHEMA_VERSION, Store
from tests.conftest import ORCH, ROOT, orch_env

# The SQLite file itself (damage, modes, WAL); test_store_pg.py checks a PostgreSQL store.
pytestmark = pytest.mark.sqlite_only

# A spec this size fills most of a 4 KiB page, so each job row sits on a leaf page of its
# own and damaging one page loses exactly one job.
BIG = "x" * 3000


def orch(monkeypatch, capsys, home, *args, **env):
    """`orch ARGS` in this process (no interpreter start-up), with `env` as its only ORCH_
    variables beyond home, config and mode: (exit code, stdout, stderr)."""
    from orchestrator.cli import main

    for key in list(os.environ):
        if key.startswith(("ORCH_", "RAY_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("ORCH_HOME", str(home))
    monkeypatch.setenv("ORCH_CONFIG", str(home / "config.toml"))
    monkeypatch.setenv("ORCH_MODE", "local")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "argv", ["orch", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    got = capsys.readouterr()
    return exit_.value.code, got.out, got.err


def fill(path, n: int, status: str = "SUCCEEDED") -> list[str]:
    store = Store(path)
    ids = []
    for i in range(n):
        rec = store.create_job(name=f"job{i}", spec={"run": BIG, "marker": f"MARK{i:04d}"},
                               kind="exploratory", target="local", fingerprint="fp")
        store.set_status(rec.id, "RUNNING", "started")
        store.set_status(rec.id, status, "done")
        ids.append(rec.id)
    store.close()  # the last connection out checkpoints the WAL into the file
    return ids


def damage_page_of(path, marker: str) -> None:
    """Overwrite the page type byte of the leaf page that holds `marker`."""
    data = bytearray(path.read_bytes())
    page = data.index(marker.encode()) // 4096
    data[page * 4096] = 0xFF
    path.write_bytes(bytes(data))


def not_sqlite(path):
    path.write_bytes(b"this is not a database\n" * 200)
    os.chmod(path, 0o600)  # only the content is wrong


def truncated(path):
    fill(path, 20)
    os.truncate(path, path.stat().st_size // 2)


def foreign(path):
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    db.execute("INSERT INTO invoices (total) VALUES (12.5)")
    db.commit()
    db.close()
    os.chmod(path, 0o600)


def newer(path):
    fill(path, 2)
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    db.commit()
    db.close()


def bad_page(path):
    fill(path, 20)
    damage_page_of(path, "MARK0010")


# kind: (make it, words in the error, the doctor checks that are problems)
KINDS = {
    "not sqlite": (not_sqlite, "not a SQLite database", {"store", "store integrity"}),
    "truncated": (truncated, "the job store is damaged", {"store", "store integrity"}),
    "foreign": (foreign, "not orch's job store (tables invoices", {"store"}),
    "newer schema": (newer, f"written by a newer orch (schema 99, this orch knows {SCHEMA_VERSION})", {"store"}),
    "damaged page": (bad_page, "the job store is damaged", {"store", "store integrity"}),
}


@pytest.mark.parametrize("kind", KINDS)
def test_damaged_store_is_one_clear_error_and_doctor_still_works(kind, orch_home, monkeypatch,
                                                                 capsys):
    make, words, problems = KINDS[kind]
    path = orch_home / "orch.db"
    make(path)
    before = path.read_bytes()

    code, out, err = orch(monkeypatch, capsys, orch_home, "status")
    assert code == 1, err
    assert err.startswith(f"error: {path}: ") and words in err, err
    assert "orch doctor" in err and "Traceback" not in err

    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--json")
    assert code == 1, err
    report = json.loads(out)
    assert {c["name"] for c in report["checks"] if c["state"] == "problem"} == problems
    store_check = next(c for c in report["checks"] if c["name"] == "store")
    assert words in store_check["detail"] and store_check["fix"]
    # Never a silent reset: neither command changed a byte of the file.
    assert path.read_bytes() == before


def test_the_real_cli_prints_no_traceback(orch_home):
    not_sqlite(orch_home / "orch.db")
    for args in (["status"], ["doctor"]):
        proc = subprocess.run([ORCH, *args], env=orch_env(orch_home), capture_output=True,
                              text=True, timeout=60, cwd=str(ROOT))
        assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr
    assert "problem  store" in proc.stdout and "--repair-store" in proc.stdout


def _unprivileged() -> list[str]:
    """A command prefix under which file modes bind (root ignores them otherwise)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: file modes cannot be tested")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"]


def test_permission_problem_names_mode_owner_and_fix(orch_home):
    path = orch_home / "orch.db"
    fill(path, 1)
    os.chmod(path, 0)
    prefix = _unprivileged()
    try:
        status = subprocess.run([*prefix, ORCH, "status"], env=orch_env(orch_home),
                                capture_output=True, text=True, timeout=60, cwd=str(ROOT))
        doctor = subprocess.run([*prefix, ORCH, "doctor", "--json"], env=orch_env(orch_home),
                                capture_output=True, text=True, timeout=60, cwd=str(ROOT))
    finally:
        os.chmod(path, 0o600)
    assert status.returncode == 1 and "Traceback" not in status.stderr
    assert status.stderr.startswith(f"error: {path}: orch cannot open the job store")
    assert f"{path} is mode 0000, owner uid {os.getuid()}" in status.stderr
    assert f"chmod 600 {path}" in status.stderr
    assert doctor.returncode == 1, doctor.stderr
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["store"]["state"] == "problem" and "mode 0000" in checks["store"]["fix"]
    assert checks["store integrity"]["state"] == "skipped"


CRASHING_WRITER = """
import os, signal, sys
from orchestrator.store import Store
store = Store(sys.argv[1])
for i in range(20):
    store.create_job(name=f"j{i}", spec={"run": "echo"}, kind="exploratory", target="local",
                     fingerprint="fp")
os.kill(os.getpid(), signal.SIGKILL)  # no close: the commits are still only in the WAL
"""


def test_a_crashed_writers_wal_is_recovered_not_reported(orch_home, monkeypatch, capsys):
    path = orch_home / "orch.db"
    proc = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(path)], cwd=str(ROOT),
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL
    wal = orch_home / "orch.db-wal"
    assert wal.stat().st_size > 0
    with open(wal, "ab") as f:  # and a frame torn in the middle of its write
        f.write(os.urandom(1000))
    code, out, err = orch(monkeypatch, capsys, orch_home, "status", "--json")
    assert code == 0, err
    assert sorted(r["name"] for r in json.loads(out)) == sorted(f"j{i}" for i in range(20))
    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor")
    assert code == 0, out
    assert "ok       store            " in out and "20 jobs: 20 PENDING" in out


def test_missing_store_with_job_logs_is_a_doctor_problem(orch_home, monkeypatch, capsys):
    logs = orch_home / "logs"
    logs.mkdir(mode=0o700)
    for job in ("orch-aaaa1111", "orch-bbbb2222"):
        (logs / f"{job}.log").write_text("epoch 1\n")
        os.chmod(logs / f"{job}.log", 0o600)
    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--json")
    assert code == 1
    store_check = json.loads(out)["checks"][0]
    assert store_check["detail"] == (f"no job store at {orch_home / 'orch.db'}, but {logs} holds "
                                     "2 job logs: those jobs' records are gone")
    assert not (orch_home / "orch.db").exists(), "doctor must not create the store"
    # Any other command starts a new store as before; doctor keeps reporting the lost records.
    code, out, err = orch(monkeypatch, capsys, orch_home, "status")
    assert code == 0 and "no jobs yet" in out
    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--json")
    assert code == 1
    assert "but no record for 2 job logs" in json.loads(out)["checks"][0]["detail"]


# -- repair -------------------------------------------------------------------------------

def test_repair_salvages_every_readable_job_and_keeps_the_damaged_file(orch_home, monkeypatch,
                                                                       capsys):
    path = orch_home / "orch.db"
    ids = fill(path, 40)
    damage_page_of(path, "MARK0017")
    damaged = path.read_bytes()

    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--repair-store")
    assert code == 0, out + err
    aside = [p for p in orch_home.iterdir() if p.name.startswith("orch.db.damaged-")]
    assert len(aside) == 1 and aside[0].read_bytes() == damaged  # kept, byte for byte
    assert f"moved the damaged store to {aside[0]}" in out
    assert "salvaged 39 jobs and 117 history events" in out and "unreadable: 1 job rows\n" in out
    assert "no problems" in out

    code, out, err = orch(monkeypatch, capsys, orch_home, "status", "--json", "-n", "100")
    assert code == 0, err
    assert sorted(r["id"] for r in json.loads(out)) == sorted(set(ids) - {ids[17]})
    code, out, err = orch(monkeypatch, capsys, orch_home, "status", ids[3], "--json")
    assert [h["status"] for h in json.loads(out)["history"]] == ["PENDING", "RUNNING", "SUCCEEDED"]


def test_repair_of_a_file_that_is_not_a_database_starts_an_empty_store(orch_home, monkeypatch,
                                                                      capsys):
    not_sqlite(orch_home / "orch.db")
    original = (orch_home / "orch.db").read_bytes()
    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--repair-store", "--json")
    assert code == 0, out
    repair = json.loads(out)["repair"]
    assert repair["done"] and repair["jobs"] == 0 and repair["events"] == 0
    assert (orch_home / repair["moved_to"]).read_bytes() == original
    assert Store(orch_home / "orch.db").list() == []


def test_repair_notes_a_lost_history(orch_home, monkeypatch, capsys):
    path = orch_home / "orch.db"
    ids = fill(path, 3, status="FAILED")
    db = sqlite3.connect(path)
    db.execute("DROP TABLE job_events")
    db.commit()
    db.close()
    code, out, err = orch(monkeypatch, capsys, orch_home, "status")
    assert code == 1 and "table job_events is missing" in err
    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--repair-store")
    assert code == 0 and "salvaged 3 jobs and 0 history events" in out, out
    store = Store(path)
    for job in ids:
        assert [(h["status"], h["message"]) for h in store.history(job)] == [
            ("FAILED", "history lost with a damaged store; record salvaged by orch doctor")]


def test_repair_leaves_a_healthy_or_newer_store_alone(orch_home, monkeypatch, capsys):
    path = orch_home / "orch.db"
    fill(path, 2)
    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--repair-store")
    assert code == 0 and f"{path} is healthy: nothing to repair" in out
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    before = path.read_bytes()
    code, out, err = orch(monkeypatch, capsys, orch_home, "doctor", "--repair-store")
    assert code == 1 and "newer orch (schema 7" in err and "upgrade orch" in err
    assert path.read_bytes() == before
    assert sorted(p.name for p in orch_home.iterdir()) == ["orch.db"]


# -- migrations ---------------------------------------------------------------------------

@pytest.fixture
def three_versions(monkeypatch):
    """Schema 3: the real schema 1, then two more; `ran` counts each version's runs."""
    ran = {2: 0, 3: 0}

    def count(version):
        def step(db):
            ran[version] += 1
        return step

    migrations = {1: store_mod._MIGRATIONS[1],
                  2: [count(2), "CREATE TABLE spent (month TEXT PRIMARY KEY, usd REAL NOT NULL)"],
                  3: [count(3), "CREATE INDEX jobs_created ON jobs(created_at)"]}
    monkeypatch.setattr(store_mod, "_MIGRATIONS", migrations)
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", 3)
    return migrations, ran


def _raw(path, sql):
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def _version(path) -> int:
    return int(_raw(path, "SELECT value FROM meta WHERE key = 'schema_version'")[0][0])


def _tables(path) -> set:
    return {r[0] for r in _raw(path, "SELECT name FROM sqlite_master")}


def test_each_migration_runs_once(tmp_path, monkeypatch, three_versions):
    _, ran = three_versions
    path = tmp_path / "orch.db"
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", 1)
    ids = fill(path, 2)  # a store from before the upgrade
    assert _version(path) == 1
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", 3)
    for _ in range(3):
        Store(path).close()
    assert ran == {2: 1, 3: 1}
    assert _version(path) == 3 and {"spent", "jobs_created"} <= _tables(path)
    assert sorted(r.id for r in Store(path).list()) == sorted(ids)  # the jobs came along


def _migrate_and_crash(path: str) -> None:
    Store(path)


def test_a_crash_between_versions_is_finished_by_the_next_open(tmp_path, three_versions):
    migrations, _ = three_versions
    path = tmp_path / "orch.db"
    # Version 3 dies half-way, after its first statement, as a killed process would.
    migrations[3] = ["CREATE TABLE half (x)", lambda db: os._exit(9)]
    child = mp.get_context("fork").Process(target=_migrate_and_crash, args=(str(path),))
    child.start()
    child.join(30)
    assert child.exitcode == 9
    assert _version(path) == 2  # 1 and 2 committed, each on its own
    assert "spent" in _tables(path) and "half" not in _tables(path)  # 3 rolled back whole
    migrations[3] = ["CREATE TABLE half (x)"]
    store = Store(path)
    assert store.schema_version == 3 and "half" in _tables(path)


def test_a_failing_migration_names_it_and_leaves_the_store_as_it_was(tmp_path, three_versions):
    migrations, _ = three_versions
    path = tmp_path / "orch.db"
    migrations[3] = ["CREATE TABLE never (x)", "INSERT INTO nowhere VALUES (1)"]
    with pytest.raises(StoreError) as e:
        Store(path)
    assert e.value.message == (f"{path}: migrating the job store to schema 3 failed: "
                               "no such table: nowhere")
    assert "stays at schema 2" in e.value.hint
    assert _version(path) == 2 and "never" not in _tables(path)


def _open(path: str) -> None:
    Store(path).create_job(name="x", spec={}, kind=None, target=None, fingerprint=None)


def test_many_first_opens_at_once_migrate_once(tmp_path, three_versions):
    # Versions 2 and 3 create a table and an index without IF NOT EXISTS: a second run fails.
    path = tmp_path / "orch.db"
    procs = [mp.get_context("fork").Process(target=_open, args=(str(path),)) for _ in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 6
    assert _version(path) == 3 and len(Store(path).list()) == 6
