"""Jobs and their status history: each status change is one transaction that updates the job
and appends to its history, so a reader never sees one without the other.

A job is a `records.JobRow`: its columns, the JSON ones (spec, decision, metrics, info) as
Python values; `records.JobRecord.from_row` is what a user sees of it.
"""

from __future__ import annotations

import builtins
import json
import time
import uuid
from typing import Any, NamedTuple, Optional

from orchestrator.base.errors import NotFound
from orchestrator.records import JobInfo, JobRow
from orchestrator.records.metrics import learned_part
from orchestrator.records.placement import Placement
from orchestrator.store.base import Row, StoreBase, iso
from orchestrator.store.job_pages import JobQuery, encode_cursor, page_sql

STATUSES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})

_JSON_COLUMNS = {"spec_json": "spec", "decision_json": "decision", "metrics_json": "metrics",
                 "info_json": "info"}


class JobCount(NamedTuple):
    """How many jobs the store holds in one state, on one target, of one kind."""
    status: str
    target: Optional[str]
    kind: Optional[str]
    n: int


def new_job_id() -> str:
    return "orch-" + uuid.uuid4().hex[:8]


def _assignments(fields: dict[str, Any]) -> tuple[list[str], list[Any]]:
    """`column = ?` for each field, and its value: a JSON column's as JSON."""
    cols, values = [], []
    for key, value in fields.items():
        column = next((c for c, k in _JSON_COLUMNS.items() if k == key), key)
        cols.append(f"{column} = ?")
        if column == "decision_json":  # a Placement (or an old row's dict, read leniently)
            values.append(_decision_json(value))
        elif column == "metrics_json":  # and what planning reads of them, noted beside
            text = json.dumps(value)
            values.append(text)
            cols.append("learned_json = ?")
            values.append(json.dumps({"of": len(text), "metrics": learned_part(value)}))
        else:
            values.append(json.dumps(value) if column in _JSON_COLUMNS else value)
    return cols, values


def _decision_json(decision: Optional[Placement]) -> Optional[str]:
    placed = Placement.read(decision)  # a test's dict, too
    return None if placed is None else json.dumps(placed.to_json())


class Jobs(StoreBase):
    """The store's jobs. (`builtins.list` in the signatures: `list` in the class is a method.)"""

    def create_job(self, *, name: str, spec: dict, kind: Optional[str], target: Optional[str],
                   fingerprint: Optional[str], decision: Optional[Placement] = None,
                   source_file: Optional[str] = None, address: Optional[str] = None,
                   idempotency_key: Optional[str] = None, job_id: Optional[str] = None,
                   message: str = "recorded", info: Optional[dict] = None,
                   owner: Optional[str] = None, priority: int = 0) -> JobRow:
        """Record a job as PENDING before anything is launched for it. `owner` is the API
        token's name that submitted it (None: submitted embedded)."""
        now = time.time()
        job_id = job_id or new_job_id()
        row = {"id": job_id, "name": name, "status": "PENDING", "kind": kind, "target": target,
               "fingerprint": fingerprint, "spec_json": json.dumps(spec),
               "source_file": source_file,
               "decision_json": _decision_json(decision),
               "address": address, "idempotency_key": idempotency_key,
               "info_json": json.dumps(info or {}), "created_at": now, "updated_at": now}
        if owner is not None or priority:  # columns of schema 2; left to their defaults else
            row.update(owner=owner, priority=int(priority))
        with self._write() as db:
            if idempotency_key:
                found = db.execute("SELECT id FROM jobs WHERE idempotency_key = ?",
                                   (idempotency_key,)).fetchone()
                if found:
                    return self.get(found["id"])
            db.execute(f"INSERT INTO jobs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                       tuple(row.values()))
            db.execute("INSERT INTO job_events (job_id, ts, status, message) VALUES (?, ?, ?, ?)",
                       (job_id, now, "PENDING", message))
        return self.get(job_id)

    def update(self, job_id: str, **fields: Any) -> JobRow:
        """Change columns other than status; JSON columns take Python values."""
        if not fields:
            return self.get(job_id)
        cols, values = _assignments(fields)
        with self._write() as db:
            db.execute(f"UPDATE jobs SET {', '.join(cols)}, updated_at = ? WHERE id = ?",
                       (*values, time.time(), job_id))
        return self.get(job_id)

    def set_status(self, job_id: str, status: str, message: Optional[str] = None,
                   **fields: Any) -> JobRow:
        """Move a job to `status` and append to its history; a finished job stays finished."""
        if status not in STATUSES:
            raise ValueError(f"unknown status {status}")
        now = time.time()
        with self._write() as db:
            row = db.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise NotFound(f"no job {job_id}")
            if row["status"] in TERMINAL:
                changed = False
            elif row["status"] == status:
                # Same state, new news (a cloud job recovering): note it in the history too.
                changed = False
                if message and message != db.execute("SELECT message FROM jobs WHERE id = ?",
                                                      (job_id,)).fetchone()["message"]:
                    db.execute("UPDATE jobs SET message = ?, updated_at = ? WHERE id = ?",
                               (message, now, job_id))
                    db.execute("INSERT INTO job_events (job_id, ts, status, message) "
                               "VALUES (?, ?, ?, ?)", (job_id, now, status, message))
            else:
                changed = True
                extra: dict[str, Any] = {"status": status, "message": message}
                if status == "RUNNING":
                    extra["started_at"] = now
                if status in TERMINAL:
                    extra["finished_at"] = now
                extra.update(fields)
                cols, values = _assignments(extra)
                db.execute(f"UPDATE jobs SET {', '.join(cols)}, updated_at = ? WHERE id = ?",
                           (*values, now, job_id))
                db.execute("INSERT INTO job_events (job_id, ts, status, message) VALUES (?, ?, ?, ?)",
                           (job_id, now, status, message))
        if not changed and fields:
            return self.update(job_id, **fields)
        return self.get(job_id)

    def get(self, job_id: str) -> JobRow:
        """A job by id, or by a unique prefix of it."""
        return _record(self._one("jobs", job_id, "job",
                                 "`orch status` lists the jobs with their ids"))

    def list(self, limit: int = 50, statuses: Optional[tuple] = None,
             since: Optional[float] = None) -> builtins.list[JobRow]:
        """Newest first; `since`: created at or after (epoch seconds), or not yet finished."""
        return [_record(r) for r in self._newest("*", limit, statuses, since)]

    def _newest(self, columns: str, limit: int, statuses: Optional[tuple],
                since: Optional[float]) -> builtins.list[Row]:
        q, where = f"SELECT {columns} FROM jobs", []
        args: list[Any] = []
        if statuses:
            where.append(f"status IN ({','.join('?' * len(statuses))})")
            args.extend(statuses)
        if since is not None:
            where.append("(created_at >= ? OR finished_at >= ? OR finished_at IS NULL)")
            args.extend((since, since))
        if where:
            q += " WHERE " + " AND ".join(where)
        q += " ORDER BY created_at DESC, id DESC LIMIT ?"  # as a page (job_pages.py)
        args.append(limit)
        return self._db.execute(q, args).fetchall()

    def counts(self) -> builtins.list[JobCount]:
        """Every job counted by state, target and kind: one grouped query, however many
        jobs the store holds (nothing of theirs is read but those three columns)."""
        rows = self._db.execute("SELECT status, target, kind, COUNT(*) AS n FROM jobs "
                                "GROUP BY status, target, kind ORDER BY status, target, kind")
        return [JobCount(r["status"], r["target"], r["kind"], int(r["n"])) for r in rows.fetchall()]

    def page(self, query: JobQuery) -> tuple[builtins.list[JobRow], Optional[str]]:
        """One page of jobs (store/job_pages.py), and the cursor of the next; None at the end."""
        sql, args = page_sql(query)
        rows = self._db.execute(sql, args).fetchall()
        more = len(rows) > query.limit
        rows = rows[:query.limit]
        return [_record(r) for r in rows], encode_cursor(query.sort, rows[-1]) if more else None

    def state_counts(self, since: float) -> dict[str, dict[str, int]]:
        """How many jobs are in each state: in all, and those that ended in it since `since`
        (epoch seconds). One pass over the state index."""
        rows = self._db.execute("SELECT status, count(*) AS n, sum(CASE WHEN finished_at >= ? THEN 1 ELSE 0 "
                                "END) AS recent FROM jobs GROUP BY status", (since,)).fetchall()
        out = {s: {"all": 0, "recent": 0} for s in STATUSES}
        for r in rows:
            out[r["status"]] = {"all": int(r["n"]), "recent": int(r["recent"] or 0)}
        return out

    def history(self, job_id: str) -> builtins.list[dict]:
        rows = self._db.execute("SELECT ts, status, message FROM job_events WHERE job_id = ? "
                                "ORDER BY seq", (job_id,)).fetchall()
        return [{"at": iso(r["ts"]), "ts": r["ts"], "status": r["status"], "message": r["message"]}
                for r in rows]

    def runs_for_fingerprint(self, fingerprint: str, since: float = 0.0) -> builtins.list[JobRow]:
        return [_record(r) for r in self._of_fingerprint("*", fingerprint, since)]

    def _of_fingerprint(self, columns: str, fingerprint: str, since: float = 0.0) -> builtins.list[Row]:
        return self._db.execute(
            f"SELECT {columns} FROM jobs WHERE fingerprint = ? AND created_at >= ? ORDER BY created_at",
            (fingerprint, since)).fetchall()

    def learning_runs(self, fingerprint: str, team_limit: int,
                      team_since: float) -> tuple[builtins.list[JobRow], builtins.list[JobRow]]:
        """What a plan learns from (service/planning.py): every run of `fingerprint`, oldest
        first, and the team's newest `team_limit` successful runs since `team_since` (as
        `list` gives them). Each row's metrics hold only what planning reads
        (records.metrics.learned_part), not its telemetry: 2,000 runs' metrics read whole
        took 0.7 CPU-s a plan here. Not for showing: the rest of their metrics is left out."""
        mine = self._of_fingerprint(_LEARNING_COLUMNS, fingerprint)
        team = self._newest(_LEARNING_COLUMNS, team_limit, ("SUCCEEDED",), team_since)
        learned = {r["id"]: _learned(r) for r in [*mine, *team]}
        whole = [job_id for job_id, m in learned.items() if m is None]
        for start in range(0, len(whole), 500):  # rows written before the column, or since by an older orch
            chunk = whole[start:start + 500]
            for r in self._db.execute(f"SELECT id, metrics_json FROM jobs WHERE id IN "
                                      f"({', '.join('?' * len(chunk))})", chunk).fetchall():
                learned[r["id"]] = learned_part(_loads(r["metrics_json"]))
        return ([_record(r, learned[r["id"]]) for r in mine],
                [_record(r, learned[r["id"]]) for r in team])

    def queued(self) -> builtins.list[JobRow]:
        """Jobs an `orch serve` recorded and has not launched yet, in launch order:
        priority first (highest), then submission time."""
        rows = self._db.execute(
            "SELECT * FROM jobs WHERE status = 'PENDING' AND backend_id IS NULL "
            "ORDER BY priority DESC, created_at, id").fetchall()
        return [rec for rec in map(_record, rows) if rec.info.queued]

    def claim(self, job_id: str, launcher: str, expect: Optional[str] = None) -> bool:
        """Take a queued job (or a pipeline's stage that waits for the one before it) for
        launching, as `launcher`: only while it is still unlaunched and not cancelled, and
        only from `expect` (None: nobody had it; else a launcher that died). Two servers, or
        two orch processes, on one store never both launch a job."""
        with self._write() as db:
            row = db.execute("SELECT status, backend_id, cancel_requested, info_json FROM jobs "
                             "WHERE id = ?", (job_id,)).fetchone()
            if row is None or row["status"] != "PENDING" or row["backend_id"] is not None \
                    or row["cancel_requested"]:
                return False
            info = json.loads(row["info_json"] or "{}")
            held = JobInfo.model_validate(info)
            if not (held.queued or held.after) or held.launcher != expect:
                return False
            info["launcher"] = launcher
            db.execute("UPDATE jobs SET info_json = ?, updated_at = ? WHERE id = ?",
                       (json.dumps(info), time.time(), job_id))
            return True

    def replace_queued(self, job_id: str, decision: Placement, expect_target: Optional[str],
                       message: Optional[str] = None) -> bool:
        """Give a queued job a new placement (its target, kind and decision, and `placed_at`
        now) in one transaction: only while it is queued, unclaimed (no launcher has it),
        not cancelled and still on `expect_target`, so a job being launched, or re-placed
        by another server meanwhile, is left as it is. `message`: its new status line, in
        its history too (None: neither changes). Whether it was changed."""
        now = time.time()
        with self._write() as db:
            row = db.execute("SELECT status, backend_id, cancel_requested, target, info_json "
                             "FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or row["status"] != "PENDING" or row["backend_id"] is not None \
                    or row["cancel_requested"] or row["target"] != expect_target:
                return False
            info = json.loads(row["info_json"] or "{}")
            held = JobInfo.model_validate(info)
            if not held.queued or held.launcher is not None:
                return False
            info["placed_at"] = now
            fields: dict[str, Any] = {"target": decision.target, "kind": decision.kind,
                                      "decision": decision, "info": info}
            if message is not None:
                fields["message"] = message
            cols, values = _assignments(fields)
            db.execute(f"UPDATE jobs SET {', '.join(cols)}, updated_at = ? WHERE id = ?",
                       (*values, now, job_id))
            if message is not None:
                db.execute("INSERT INTO job_events (job_id, ts, status, message) "
                           "VALUES (?, ?, ?, ?)", (job_id, now, "PENDING", message))
            return True


# Every column of a job but its whole metrics: their length and what planning reads instead.
_LEARNING_COLUMNS = ("id, name, status, kind, target, fingerprint, spec_json, source_file, "
                     "decision_json, backend_id, address, log_path, info_json, message, "
                     "cancel_requested, idempotency_key, created_at, updated_at, started_at, "
                     "finished_at, owner, priority, LENGTH(metrics_json) AS metrics_len, learned_json")


def _loads(raw: Optional[str]) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _learned(row: Row) -> Optional[dict]:
    """What planning reads of a row's metrics, from the note beside them; None when there is
    none, or the metrics were rewritten since (their length is not the one noted)."""
    note = _loads(row["learned_json"])
    if isinstance(note, dict) and note.get("of") == row["metrics_len"] and isinstance(note.get("metrics"), dict):
        return note["metrics"]
    return None


def _record(row: Row, metrics: Optional[dict] = None) -> JobRow:
    """A row as a JobRow; `metrics`: those instead of the row's (a `learning_runs` row)."""
    rec = {k: row[k] for k in row.keys() if k not in ("metrics_len", "learned_json")}
    for column, key in _JSON_COLUMNS.items():
        raw = rec.pop(column, None)  # a learning_runs row has no metrics_json
        rec[key] = json.loads(raw) if raw else None
    if metrics is not None:
        rec["metrics"] = metrics
    rec["cancel_requested"] = bool(rec["cancel_requested"])
    rec["metrics"] = rec["metrics"] or {}
    rec["spec"] = rec["spec"] or {}
    rec["info"] = rec["info"] or {}
    return JobRow.model_validate(rec)
