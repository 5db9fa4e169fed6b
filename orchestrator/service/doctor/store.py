"""Doctor's checks of the job store: it opens, what it holds, SQLite's integrity check."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Optional
from urllib.parse import quote

from orchestrator.base.errors import StoreError
from orchestrator.service.doctor.check import Check
from orchestrator.service.doctor.local import STORE, job_logs, modes_check
from orchestrator.settings import Settings

REPAIR = ("`orch doctor --repair-store` moves it aside (keeping it) and salvages every readable "
          "job, API token and schedule into a new store")


def _n(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


def pg_store_check(url: str) -> Check:
    """A PostgreSQL store: it connects, its schema and its jobs, tokens and schedules."""
    from orchestrator.store import Store

    try:
        store = Store(url)
    except StoreError as e:
        return Check("store", False, e.message, e.hint)
    try:
        db = store._db
        assert db is not None  # Store() connected, or it raised
        server = db.execute("SHOW server_version").fetchone()["server_version"]
        counts = {r["status"]: r["n"] for r in db.execute(
            "SELECT status, count(*) AS n FROM jobs GROUP BY status ORDER BY status")}
        tokens = db.execute("SELECT count(*) AS n FROM tokens WHERE revoked_at IS NULL").fetchone()["n"]
        schedules = db.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"]
        version = store.schema_version
    finally:
        store.close()
    total = sum(counts.values())
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    return Check("store", True, f"{store.where}: PostgreSQL {server}, schema {version}, "
                 f"{_n(total, 'job')}" + (f": {summary}" if total else "")
                 + f"; {_n(tokens, 'live API token')}; {_n(schedules, 'schedule')}")


def store_checks(home: Path, settings: Optional[Settings] = None) -> list[Check]:
    """Opens, its schema and jobs, SQLite's integrity check, and owner-only file modes; a
    PostgreSQL store (database_url): it connects, and its contents."""
    from orchestrator.store import DOCTOR_HINT, Store, access_problem, database_url

    url = database_url(settings) if settings is not None else None
    if url:
        return [pg_store_check(url), modes_check(home)]
    path = home / STORE
    logs = job_logs(home)
    if not path.exists():
        if not logs:
            return [Check("store", True, f"{path}: none yet (a fresh home; the first job "
                                         "creates it)"), modes_check(home)]
        return [Check("store", False, f"no job store at {path}, but {home / 'logs'} holds "
                      f"{_n(len(logs), 'job log')}: those jobs' records are gone",
                      f"restore {path} from a backup if there is one; otherwise the next orch "
                      "command starts a new, empty store (the logs stay readable)"),
                modes_check(home)]
    store = None
    try:
        store = Store(path)
        db = store._db
        assert db is not None  # Store() connected, or it raised
        # Every row from the table itself, as `orch status` reads them, not from an index.
        rows = db.execute("SELECT id, status FROM jobs NOT INDEXED").fetchall()
        serve = db.execute(  # `orch serve`'s: a damaged page of theirs shows here too
            "SELECT (SELECT count(*) FROM tokens NOT INDEXED), (SELECT count(revoked_at) FROM "
            "tokens NOT INDEXED), (SELECT count(*) FROM schedules NOT INDEXED), (SELECT "
            "count(*) FROM schedules NOT INDEXED WHERE paused)").fetchone()
        version = store.schema_version
    except StoreError as e:
        if store is not None:
            store.close()
        integrity = (Check("store integrity", None, "not checked: orch cannot open the file")
                     if access_problem(path) else integrity_check(path))
        fix = REPAIR if e.hint == DOCTOR_HINT else e.hint  # not "run doctor", inside doctor
        return [Check("store", False, e.message, fix), integrity, modes_check(home)]
    integrity = integrity_check(path)  # while the store is open: its WAL is in use
    store.close()
    ids = {r[0] for r in rows}
    counts: dict[str, int] = {}
    for r in rows:
        counts[r[1]] = counts.get(r[1], 0) + 1
    total = len(rows)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    detail = f"{path}: schema {version}, {_n(total, 'job')}" + (f": {summary}" if total else "")
    tokens, revoked, schedules, paused = serve
    if tokens:  # only a store `orch serve` used has any: the rest read as before
        detail += f"; {_n(tokens, 'API token')}" + (f" ({revoked} revoked)" if revoked else "")
    if schedules:
        detail += f"; {_n(schedules, 'schedule')}" + (f" ({paused} paused)" if paused else "")
    orphans = [p.stem for p in logs if p.stem not in ids]
    if not orphans:
        return [Check("store", True, detail), integrity, modes_check(home)]
    first = ", ".join(orphans[:3]) + (", ..." if len(orphans) > 3 else "")
    return [Check("store", False, f"{detail}; but no record for {_n(len(orphans), 'job log')} in "
                  f"{home / 'logs'} ({first}): those records are gone",
                  f"restore {path} from a backup if there is one; the logs stay readable"),
            integrity, modes_check(home)]


def read_only(path: Path) -> sqlite3.Connection:
    """A connection that writes nothing. Not SQLite's mode=ro: a read-only connection
    cannot remove the WAL files it creates, and would leave them behind."""
    db = sqlite3.connect(f"file:{quote(str(path))}?mode=rw", uri=True, timeout=10)
    try:
        db.execute("PRAGMA query_only = ON")
    except sqlite3.Error:
        db.close()
        raise
    return db


def integrity_check(path: Path) -> Check:
    """SQLite's own page-by-page check (its first 10 findings), on a connection of its own."""
    start = time.perf_counter()
    db = None
    try:
        db = read_only(path)
        found = [r[0] for r in db.execute("PRAGMA integrity_check(10)").fetchall()]
    except sqlite3.Error as e:
        found = [str(e)]
    finally:
        if db is not None:
            db.close()
    took = time.perf_counter() - start
    if found == ["ok"]:
        return Check("store integrity", True, f"PRAGMA integrity_check: ok ({took:.2f} s)")
    return Check("store integrity", False, "PRAGMA integrity_check: " + "; ".join(found), REPAIR)
