"""Cron schedules of `orch serve`, and each one's log: what it ran for which slot, and why not."""

from __future__ import annotations

import json
import time
import uuid
from typing import Optional, Sequence

from orchestrator.records.schedule import ScheduleRow
from orchestrator.store.base import Row, StoreBase, iso

# One line of a schedule's log: its slot (epoch seconds; None: no slot), its job's id, the text.
Event = tuple[Optional[float], Optional[str], str]


class Schedules(StoreBase):
    def add_schedule(self, *, name: str, owner: Optional[str], cron: str, spec: dict,
                     source_text: str, source_file: Optional[str], next_at: float,
                     priority: int = 0) -> ScheduleRow:
        """Register a schedule; `spec` redacted, `source_text` free of secret values (the
        caller refuses any), `next_at` its first slot."""
        return self.keyed_schedule(name=name, owner=owner, cron=cron, spec=spec,
                                   source_text=source_text, source_file=source_file,
                                   next_at=next_at, priority=priority)[0]

    def keyed_schedule(self, *, name: str, owner: Optional[str], cron: str, spec: dict,
                       source_text: str, source_file: Optional[str], next_at: float,
                       priority: int = 0, idempotency_key: Optional[str] = None
                       ) -> tuple[ScheduleRow, bool]:
        """`add_schedule` under an idempotency key: (the schedule, whether it was there
        already, registered under the same key)."""
        sched_id, now = "sched-" + uuid.uuid4().hex[:8], time.time()
        with self._write() as db:
            if idempotency_key:
                found = db.execute("SELECT id FROM schedules WHERE idempotency_key = ?",
                                   (idempotency_key,)).fetchone()
                if found is not None:
                    return self.schedule(found["id"]), True
            db.execute("""INSERT INTO schedules (id, name, owner, cron, spec_json, source_text,
                          source_file, priority, created_at, next_at, idempotency_key) VALUES
                          (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                       (sched_id, name, owner, cron, json.dumps(spec), source_text, source_file,
                        int(priority), now, next_at, idempotency_key))
            db.execute("INSERT INTO schedule_events (schedule_id, ts, message) VALUES (?, ?, ?)",
                       (sched_id, now, f"registered: cron {cron!r}"))
        return self.schedule(sched_id), False

    def schedule(self, sched_id: str) -> ScheduleRow:
        """A schedule by id, or by a unique prefix of it."""
        return _schedule(self._one("schedules", sched_id, "schedule",
                                   "`orch schedule list` shows the schedules with their ids"))

    def schedules(self) -> list[ScheduleRow]:
        return [_schedule(r) for r in
                self._db.execute("SELECT * FROM schedules ORDER BY created_at, id")]

    def schedule_done(self, sched_id: str, *, last_slot: Optional[float], next_at: float,
                      events: Sequence[Event] = ()) -> Optional[ScheduleRow]:
        """Advance a schedule past a slot, with its log lines, in one write: the log never
        says a slot ran that the schedule has not moved past. None when the schedule was
        removed meanwhile (its slot's job, if any, stays)."""
        now = time.time()
        with self._write() as db:
            if db.execute("SELECT id FROM schedules WHERE id = ?", (sched_id,)).fetchone() is None:
                return None
            if last_slot is None:
                db.execute("UPDATE schedules SET next_at = ? WHERE id = ?", (next_at, sched_id))
            else:
                db.execute(f"UPDATE schedules SET next_at = ?, last_slot = {db.greatest}("
                           "COALESCE(last_slot, 0), ?) WHERE id = ?", (next_at, last_slot, sched_id))
            for slot, job_id, message in events:
                db.execute("INSERT INTO schedule_events (schedule_id, ts, slot, job_id, message) "
                           "VALUES (?, ?, ?, ?, ?)", (sched_id, now, slot, job_id, message))
        return self.schedule(sched_id)

    def pause_schedule(self, sched_id: str, paused: bool, next_at: float,
                       message: str) -> ScheduleRow:
        """Pause or resume a schedule; a resumed one starts again from `next_at`, so the
        slots it missed while paused are not caught up."""
        sched_id = self.schedule(sched_id).id  # NotFound; a prefix resolved
        with self._write() as db:
            db.execute("UPDATE schedules SET paused = ?, next_at = ? WHERE id = ?",
                       (int(paused), next_at, sched_id))
            db.execute("INSERT INTO schedule_events (schedule_id, ts, message) VALUES (?, ?, ?)",
                       (sched_id, time.time(), message))
        return self.schedule(sched_id)

    def schedule_events(self, sched_id: str, limit: int = 20) -> list[dict]:
        """The schedule's log, newest last."""
        rows = self._db.execute("SELECT * FROM (SELECT * FROM schedule_events WHERE schedule_id "
                                "= ? ORDER BY seq DESC LIMIT ?) AS recent ORDER BY seq",
                                (sched_id, limit)).fetchall()
        return [{"at": iso(r["ts"]), "slot": iso(r["slot"]), "job_id": r["job_id"],
                 "message": r["message"]} for r in rows]

    def remove_schedule(self, sched_id: str) -> None:
        """Delete a schedule and its log in one transaction; the jobs it ran are kept."""
        sched_id = self.schedule(sched_id).id  # NotFound; a prefix resolved
        with self._write() as db:
            db.execute("DELETE FROM schedule_events WHERE schedule_id = ?", (sched_id,))
            db.execute("DELETE FROM schedules WHERE id = ?", (sched_id,))


def _schedule(row: Row) -> ScheduleRow:
    rec = {k: row[k] for k in row.keys()}
    rec["spec"] = json.loads(rec.pop("spec_json") or "{}")
    rec["paused"] = bool(rec["paused"])
    rec.pop("idempotency_key", None)  # the store's own: a user sees the schedule
    return ScheduleRow.model_validate(rec)
