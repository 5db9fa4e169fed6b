"""`orch doctor`'s checks, as data: the store, local Ray, the on-prem cluster, SkyPilot, S3.

Each check returns `Check`s and never raises: a broken thing is what doctor is for. Nothing
here starts Ray or a SkyPilot API server, or prints a credential; `repair_store` is the
way out for a damaged store, and it keeps the damaged file.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import stat
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional
from urllib.parse import quote

from orchestrator.errors import NotFound, OrchError, StoreError
from orchestrator.redact import KEY_FILE
from orchestrator.settings import Settings

STORE = "orch.db"
REPAIR = ("`orch doctor --repair-store` moves it aside (keeping it) and salvages every readable "
          "job, API token and schedule into a new store")
LOST = "history lost with a damaged store; record salvaged by orch doctor"


@dataclass(frozen=True)
class Check:
    name: str
    ok: Optional[bool]  # None: skipped (not configured)
    detail: str
    fix: Optional[str] = None

    @property
    def state(self) -> str:
        return "skipped" if self.ok is None else "ok" if self.ok else "problem"

    def as_dict(self) -> dict:
        return {**asdict(self), "state": self.state}


def run_checks(settings: Settings, timeout: float = 5.0) -> list[Check]:
    checks: list[Check] = []
    for name, fn in (("store", lambda: store_checks(settings.home, settings)),
                     ("local Ray", lambda: [local_ray_check(settings)]),
                     ("on-prem cluster", lambda: [onprem_check(settings, timeout)]),
                     ("SkyPilot", lambda: skypilot_checks(settings)),
                     ("S3", lambda: s3_checks(settings))):
        checks.extend(_guarded(name, fn))
    return checks


def _guarded(name: str, fn: Callable[[], list[Check]]) -> list[Check]:
    try:
        return fn()
    except OrchError as e:
        return [Check(name, False, e.message, e.hint)]
    except Exception as e:  # doctor reports what it could not check instead of crashing
        return [Check(name, False, f"could not check: {type(e).__name__}: {e}",
                      "this is a bug in orch's doctor; please report it")]


# -- the store ----------------------------------------------------------------------------

def _job_logs(home: Path) -> list[Path]:
    logs = home / "logs"
    return sorted(logs.glob("orch-*.log")) if logs.is_dir() else []


def pg_store_check(url: str) -> Check:
    """A PostgreSQL store: it connects, its schema and its jobs, tokens and schedules."""
    from orchestrator.store import Store

    try:
        store = Store(url)
    except StoreError as e:
        return Check("store", False, e.message, e.hint)
    try:
        db = store._db
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
    logs = _job_logs(home)
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
        # Every row from the table itself, as `orch status` reads them, not from an index.
        rows = store._db.execute("SELECT id, status FROM jobs NOT INDEXED").fetchall()
        serve = store._db.execute(  # `orch serve`'s: a damaged page of theirs shows here too
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


def _n(n: int, thing: str) -> str:
    return f"{n} {thing}" + ("" if n == 1 else "s")


def _read_only(path: Path) -> sqlite3.Connection:
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
        db = _read_only(path)
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


def _mode(p: Path) -> Optional[int]:
    try:
        return stat.S_IMODE(p.stat().st_mode)
    except OSError:
        return None


def _loose(p: Path) -> Optional[str]:
    """`p is MODE` when group or others have any access; None when owner-only or absent."""
    mode = _mode(p)
    return f"{p} is {mode:04o}" if mode is not None and mode & 0o077 else None


def modes_check(home: Path) -> Check:
    """The store, its WAL, the secret key and the job logs readable by their owner only;
    the home 0700."""
    if not home.exists():
        return Check("file modes", True, f"{home}: not created yet")
    dirs = [p for p in (home, home / "logs") if _loose(p)]
    files = [p for p in (home / STORE, home / f"{STORE}-wal", home / f"{STORE}-shm",
                         home / KEY_FILE, *_job_logs(home)) if p.exists()]
    loose_files = [p for p in files if _loose(p)]
    if not dirs and not loose_files:
        return Check("file modes", True, f"{home} (0700) and its {len(files)} store and log "
                                         "files (0600): owner only")
    loose = [_loose(p) for p in dirs + loose_files]
    fix = [f"chmod 700 {' '.join(map(str, dirs))}"] if dirs else []
    if loose_files:
        many = len(loose_files) > 4
        fix.append("chmod 600 " + (f"{home / STORE}* {home / 'logs'}/*.log" if many
                                   else " ".join(map(str, loose_files))))
    more = f" (and {len(loose) - 3} more)" if len(loose) > 3 else ""
    return Check("file modes", False, "others can read: " + "; ".join(loose[:3]) + more,
                 " && ".join(fix))


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
        db = _read_only(path)
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


def _salvage(aside: Path, store) -> dict:
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


# -- backends -----------------------------------------------------------------------------

def local_ray_check(settings: Settings) -> Check:
    """Whether orch's own local Ray instance runs (read from its state file, never started)."""
    from providers.local_ray import LocalRay

    ray = LocalRay(settings.home)
    token = _loose(ray.token_file)
    fix_token = f"chmod 600 {ray.token_file}" if token else None
    state = ray.status()
    if state:
        detail = (f"running at {state['dashboard_url']}: {state['cpus']} CPUs, "
                  f"{state['processes']} processes")
    elif ray.state_file.exists():
        detail = ("not running (its last instance ended without `orch local down`; the next "
                  "local job starts a new one)")
    else:
        detail = "not running (the next local job starts it, or `orch local up`)"
    if token:
        return Check("local Ray", False, f"{detail}; its token file {token}, readable by others",
                     fix_token)
    return Check("local Ray", True, detail)


def onprem_check(settings: Settings, timeout: float = 5.0) -> Check:
    if not settings.ray_address:
        return Check("on-prem cluster", None, "not configured (ORCH_RAY_ADDRESS)")
    from providers.onprem import HINT, token_for
    from providers.ray_cluster import get_json, snapshot

    token = token_for(settings.ray_token_file)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    version = get_json(settings.ray_address, "/api/version", headers, timeout, hint=HINT)
    snap = snapshot(settings.ray_address, headers, timeout)
    alive = sum(n.alive for n in snap.nodes)
    gpus = ", ".join(f"{m} x{n:g}" for m, n in snap.gpu_models.items())
    return Check("on-prem cluster", True,
                 f"Ray {version.get('ray_version', '?')} at {settings.ray_address}: {alive} nodes "
                 f"alive, GPUs {snap.free('GPU'):g}/{snap.total.get('GPU', 0):g} free"
                 + (f" ({gpus})" if gpus else "") + f", {len(snap.jobs)} jobs active")


def skypilot_checks(settings: Settings) -> list[Check]:
    if not settings.clouds:
        return [Check("SkyPilot", None, "no clouds configured (ORCH_CLOUDS)")]
    from providers.catalog import cloud_offers
    from providers.cloud import enabled_clouds

    ok, why = enabled_clouds(settings.clouds)
    if why:
        clouds = Check("SkyPilot", False, (f"enabled: {', '.join(ok)}; " if ok else "")
                       + "; ".join(f"{c}: {r}" for c, r in why.items()),
                       f"`sky check {next(iter(why))}` says how to set up its credentials; or "
                       "remove it from ORCH_CLOUDS")
    else:
        clouds = Check("SkyPilot", True, f"enabled: {', '.join(ok)}")
    try:
        offers = cloud_offers(settings.clouds, settings.catalog_dir)
    except OrchError as e:
        return [clouds, Check("price catalogs", False, e.message, e.hint)]
    per = {c: sum(o.cloud == c for o in offers) for c in settings.clouds}
    return [clouds, Check("price catalogs", True, "readable: " + ", ".join(
        f"{c} ({n} offers)" for c, n in per.items()))]


def _s3_locations(settings: Settings) -> Iterable[tuple[str, str]]:
    seen = set()
    for key in ("cloud_storage", "onprem_checkpoint_storage"):
        loc = getattr(settings, key)
        if loc and loc.startswith("s3://") and loc not in seen:
            seen.add(loc)
            yield key, loc


def s3_checks(settings: Settings) -> list[Check]:
    locations = list(_s3_locations(settings))
    if not locations:
        return [Check("S3", None, "no s3:// storage configured (ORCH_CLOUD_STORAGE, "
                                  "ORCH_ONPREM_CHECKPOINT_STORAGE)")]
    return [_guarded(f"S3 {key}", lambda k=key, where=loc: [_s3_check(settings, k, where)])[0]
            for key, loc in locations]


def _s3_check(settings: Settings, key: str, location: str) -> Check:
    """Whether the bucket can be listed, with credentials from boto3's own chain; only the
    chain's kind (env, shared file, role) is named, never a key."""
    from providers.artifacts import S3Artifacts

    s3 = S3Artifacts(location, settings.s3_endpoint_url or None)  # "" is unset too
    name = f"S3 {key}"
    try:
        client = s3.client()
        client.list_objects_v2(Bucket=s3.bucket, Prefix=s3.prefix, MaxKeys=1)
    except OrchError as e:
        return Check(name, False, e.message, e.hint)
    except Exception as e:
        err = s3.error(e)
        if not isinstance(err, OrchError):
            raise
        if isinstance(err, NotFound):  # the setting names it: say which one to change
            return Check(name, False, err.message, f"create the bucket, or point "
                         f"ORCH_{key.upper()} at one that exists")
        return Check(name, False, err.message, err.hint)
    import boto3

    creds = boto3.Session().get_credentials()  # which link of the chain, never the keys
    source = getattr(creds, "method", None) or "boto3's chain"
    return Check(name, True, f"{location} on {s3.where}: listable (credentials from {source})")
