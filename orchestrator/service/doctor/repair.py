"""`orch doctor --repair-store`: move a damaged SQLite store aside and salvage what it holds.

The damaged file is never changed or deleted: it is moved aside under a dated name (its WAL
with it) and read from a scratch copy; every readable row goes into a new store.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from orchestrator.base.errors import StoreError
from orchestrator.service.doctor.local import STORE
from orchestrator.service.doctor.store import integrity_check, read_only

if TYPE_CHECKING:
    from orchestrator.store import Store

LOST = "history lost with a damaged store; record salvaged by orch doctor"


def repair_store(home: Path) -> dict:
    """Move a damaged store aside (never deleting it) and salvage every readable job, with
    its history, and every readable API token and cron schedule, with its log, into a new
    store. Refuses a store that is healthy, unreadable for lack of permission (fix the mode
    instead) or written by a newer orch (upgrade instead)."""
    from orchestrator.store import SCHEMA_VERSION, Store, access_problem, stored_version

    path = home / STORE
    if not path.exists():
        return {"done": False, "reason": f"no store at {path}: nothing to repair"}
    problem = access_problem(path)
    if problem:
        raise StoreError(f"{path}: orch cannot open it, so it cannot repair it", problem)
    try:
        db = read_only(path)
        try:
            version = stored_version(db)
        finally:
            db.close()
    except sqlite3.Error:
        version = None  # unreadable or not orch's: it is moved aside
    if version is not None and version > SCHEMA_VERSION:
        raise StoreError(f"{path}: written by a newer orch (schema {version}, this orch knows "
                         f"{SCHEMA_VERSION}); repairing it here would lose what it added",
                         "upgrade orch; the store is left as it is")
    try:
        store = Store(path)
        healthy = integrity_check(path).ok
        store.close()
    except StoreError:
        healthy = False
    if healthy:
        return {"done": False, "reason": f"{path} is healthy: nothing to repair"}

    aside = _move_aside(path)
    store = Store(path)  # a new, empty store, created owner-only
    try:
        counts = _salvage(aside, store)
    finally:
        store.close()
    return {"done": True, "moved_to": str(aside), "store": str(path), **counts}


def _move_aside(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside, n = path.with_name(f"{path.name}.damaged-{stamp}"), 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.damaged-{stamp}-{n}")
    # The WAL moves with it under the matching name: it may hold the latest commits.
    for suffix in ("-wal", "-shm"):
        side = Path(f"{path}{suffix}")
        if side.exists():
            os.rename(side, f"{aside}{suffix}")
    os.rename(path, aside)
    return aside


# Salvaged in this order, so a row's parent is in before it (the foreign keys); a table a
# schema-1 store lacks reads as empty. Each child table: (its column, the parent table).
_TABLES = ("jobs", "job_events", "tokens", "schedules", "schedule_events")
_PARENT = {"job_events": ("job_id", "jobs"), "schedule_events": ("schedule_id", "schedules")}


def _salvage(aside: Path, store: Store) -> dict:
    """Copy readable rows of the damaged store into `store`, every column kept as it was (a
    schedule's next_at and last_slot, so no cron slot runs twice; a token's revoked_at).
    Works on a scratch copy, so SQLite's WAL recovery never changes the file kept aside."""
    scratch = Path(tempfile.mkdtemp(prefix=".salvage-", dir=aside.parent))
    try:
        copy = scratch / "old.db"
        shutil.copyfile(aside, copy)
        if Path(f"{aside}-wal").exists():
            shutil.copyfile(f"{aside}-wal", f"{copy}-wal")
        old = sqlite3.connect(copy, isolation_level=None)
        try:
            read = {table: _rows(old, table) for table in _TABLES}
        finally:
            old.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    db = store._db
    assert db is not None  # Store() connected, or it raised
    saved: dict[str, list[dict]] = {table: [] for table in _TABLES}
    with store._write():
        for table in _TABLES:
            new_cols = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
            link = _PARENT.get(table)
            parents = {r["id"] for r in saved[link[1]]} if link else set()
            for row in read[table][0]:
                if link and row.get(link[0]) not in parents:
                    continue  # what it belongs to was on a damaged page
                cols = [c for c in row if c in new_cols]
                cur = db.execute(f"INSERT OR IGNORE INTO {table} ({', '.join(cols)}) VALUES "
                                 f"({', '.join('?' * len(cols))})", [row[c] for c in cols])
                if cur.rowcount == 1:
                    saved[table].append(row)
        lost = {r[0] for r in db.execute("SELECT id FROM jobs WHERE id NOT IN "
                                         "(SELECT job_id FROM job_events)")}
        for row in saved["jobs"]:  # say in its history why a job's history is missing
            if row["id"] in lost:
                db.execute("INSERT INTO job_events (job_id, ts, status, message) "
                           "VALUES (?, ?, ?, ?)", (row["id"], time.time(), row["status"], LOST))
    tables = {table: {"salvaged": len(saved[table]), "unreadable": read[table][1],
                      # readable, but left out: what it belongs to was lost, or a duplicate
                      "dropped": len(read[table][0]) - len(saved[table]),
                      "more_may_be_lost": read[table][2]} for table in _TABLES}
    tables["tokens"]["revoked"] = sum(r.get("revoked_at") is not None for r in saved["tokens"])
    tables["schedules"]["paused"] = sum(bool(r.get("paused")) for r in saved["schedules"])
    return {"jobs": len(saved["jobs"]), "events": len(saved["job_events"]),
            "unreadable_jobs": read["jobs"][1], "unreadable_events": read["job_events"][1],
            "unreadable_tail": read["jobs"][2], "tables": tables,
            **_lost_names(read, saved)}


def _lost_names(read: dict, saved: dict) -> dict:
    """Tokens and schedules that readable rows name but that were not salvaged: the ones
    to give out or register again. A token is never deleted (revoking keeps its row), so a
    job's or schedule's owner without one lost it; a schedule is named by its jobs and log."""
    tokens = {r.get("name") for r in saved["tokens"]}
    owners = {r.get("owner") for r in saved["jobs"] + saved["schedules"]} - tokens - {None}
    schedules = {r.get("id") for r in saved["schedules"]}
    named: dict[str, Optional[str]] = {}
    for row in saved["jobs"]:
        try:
            sched = (json.loads(row.get("info_json") or "{}") or {}).get("schedule")
        except (ValueError, AttributeError):
            continue
        if isinstance(sched, str) and sched not in schedules:
            named[sched] = row.get("name")
    for row in read["schedule_events"][0]:
        sched = row.get("schedule_id")
        if isinstance(sched, str) and sched not in schedules:
            named.setdefault(sched, None)
    return {"lost_token_names": sorted(owners),
            "lost_schedules": [{"id": k, "name": named[k]} for k in sorted(named)]}


def _rows(db: sqlite3.Connection, table: str) -> tuple[list[dict], int, bool]:
    """Every row of `table` SQLite can still read; how many rowids it could not read; and
    whether an unreadable stretch at the end may hide more (when max(rowid) is unreadable).

    A whole scan first; when a damaged page breaks it, row by row: a lookup by rowid
    descends the b-tree anew, so a bad leaf costs only the rows on it."""
    cols: list[str] = []
    try:
        cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        if not cols:
            return [], 0, False
        q = f"SELECT rowid, {', '.join(cols)} FROM {table}"
        return [dict(zip(cols, r[1:])) for r in db.execute(q + " ORDER BY rowid")], 0, False
    except sqlite3.Error:
        if not cols:  # not even the schema is readable
            return [], 0, False
    try:
        top = db.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0
    except sqlite3.Error:
        top = None
    rows, bad, rowid, misses, bad_since_last = [], 0, 0, 0, 0
    # Without max(rowid), stop 1000 rowids after the last readable row.
    while (rowid < top) if top is not None else (misses < 1000):
        rowid += 1
        try:
            r = db.execute(q + " WHERE rowid = ?", (rowid,)).fetchone()
        except sqlite3.Error:
            bad, misses, bad_since_last = bad + 1, misses + 1, bad_since_last + 1
            continue
        if r is None:
            misses += 1
        else:
            rows.append(dict(zip(cols, r[1:])))
            misses = bad_since_last = 0
    if top is None:  # past the last readable row, damage and the table's end look alike
        return rows, bad - bad_since_last, bad_since_last > 0
    return rows, bad, False
