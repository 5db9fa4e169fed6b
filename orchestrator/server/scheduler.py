"""`orch serve`'s scheduler: due cron slots in, queued jobs launched in order, every job
kept in step with its backend. All of its state is in the store, so a restart loses nothing.
Several replicas may serve one PostgreSQL store: each answers the API, and the duties below
run in the one that holds the store's lease (orchestrator/store/lease.py); a standby looks
for the lease every few seconds and takes over when its holder dies or stops.

One thread runs `tick()` every `serve_period_s` seconds, and at once when the API queues a
job. Each tick opens its own `Orch`, the service (SQLite connections belong to one
thread), and:
1. records a job for every due cron slot (see `cron` for which slot is due), under the
   idempotency key `cron:<schedule id>:<slot>`, so no slot ever runs twice;
2. reconciles every job that is not finished with its backend (`Orch.refresh`, which
   also stops a job that reached its budget);
3. places again the queued exploratory jobs whose expected start passed (service/replacing),
   launches the queued jobs whose target has room now, one at a time, by priority then age;
   the others stay queued, saying what they wait for (`orchestrator.decision.queue` decides);
4. at most every 10 minutes, removes the uploaded workdirs no schedule and no unfinished
   job needs and none used them for `upload_keep_hours` (`orchestrator.service.upload_gc`).
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

from orchestrator.base.errors import BackendError, OrchError, StoreError
from orchestrator.base.targets import ONPREM
from orchestrator.decision import cron_slots as cron
from orchestrator.records import JobRow, ScheduleRow
from orchestrator.server import reconciling
from orchestrator.server.client_policy import check_launch
from orchestrator.server.replicas import Heartbeat, launcher_alive, launcher_id
from orchestrator.service.orch import Orch
from orchestrator.service.respec import spec_from_record
from orchestrator.service.upload.sharing import owners_upload
from orchestrator.spec import JobSpec
from orchestrator.store import TERMINAL, iso
from orchestrator.store.lease import LOOK_S, Lease, Sole, lease_for

log = logging.getLogger("orch.serve")

UPLOAD_GC_EVERY_S = 600.0


class Scheduler:
    def __init__(self, settings, clock: Callable[[], float] = time.time,
                 period_s: Optional[float] = None):
        self.settings = settings
        self.clock = clock
        self.period_s = period_s or settings.serve_period_s
        self.me = launcher_id()
        # Job specs as submitted, secret values included, until launched: this process only.
        self.pending: dict[str, JobSpec] = {}
        # Launched jobs' secret values, until each ends: every session redacts its text by
        # value, in any context (after a restart only the record's digests remain).
        self.held: dict[str, dict] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._uploads_checked: Optional[float] = None  # time.monotonic() of the last step 4
        self.lease: Lease = Sole()  # start() takes the store's own
        self.leading = False  # whether this replica ran the duties at its last look
        self._problem: Optional[str] = None  # why its last look could not ask the store
        self.heartbeat: Optional[Heartbeat] = None  # start() starts it
        self.url: Optional[str] = None  # where this replica answers, as `orch serve` listens

    @contextmanager
    def session(self) -> Iterator[Orch]:
        """The service for this thread (its own store connection), closed after use."""
        orch = Orch(self.settings, held=self.held, on_ray_start=lambda: log.info(
            "starting the local Ray instance (it outlives the server; `orch local down` stops it)"))
        orch.values_elsewhere(lambda rec: self.values_elsewhere(orch, rec))
        try:
            yield orch
        finally:
            orch.close()

    # -- the loop -------------------------------------------------------------------------

    def start(self) -> None:
        self.lease = lease_for(self.settings)
        self.heartbeat = Heartbeat(self.settings, self.me, self.role, self.url)
        self.heartbeat.start()
        self._thread = threading.Thread(target=self._loop, name="orch-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Finish the pass under way, then give the lease up: a standby takes it at its next
        look (a rolling restart hands the duties over in seconds)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.lease.close()
        if self.heartbeat is not None:
            self.heartbeat.stop()

    def role(self) -> str:
        return "leading" if self.leading else "standby"

    def wake(self) -> None:
        """A job was queued: this replica looks at once, and tells the lease holder."""
        self._wake.set()
        if not self.leading:
            self.lease.poke()

    def values_elsewhere(self, orch: Orch, rec: JobRow) -> bool:
        return reconciling.values_elsewhere(self.me, self.held, orch, rec)

    def hold(self, job_id: str, spec) -> None:
        """Keep a queued job's spec (with its secret values) until it is launched."""
        with self._lock:
            self.pending[job_id] = spec

    def forget(self, job_id: str) -> None:
        with self._lock:
            self.pending.pop(job_id, None)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            leading = self.lease.held()
            problem = self.lease.problem
            if leading != self.leading or problem != self._problem:
                if leading:
                    log.info("took on the scheduler's duties (this replica holds the store's lease)")
                elif problem:  # not another replica's doing: the database does not answer
                    log.warning("%s the scheduler's duties: cannot reach the store to hold its "
                                "lease (%s); looking again every %g s",
                                "left" if self.leading else "without", problem, LOOK_S)
                else:
                    log.info("left the scheduler's duties (another replica holds the store's "
                             "lease; this one answers the API)")
                self.leading, self._problem = leading, problem
            try:
                if leading:
                    self.tick()
                else:  # what only this replica can do: its disk, the secrets it holds
                    with self.session() as orch:
                        self.launch_held(orch)
                        self.reconcile_held(orch)
                        self.collect_uploads(orch)
            except StoreError as e:  # the database away mid-pass: one line, no traceback
                log.warning("scheduler pass stopped: %s; trying again in %g s", e.message,
                            self.period_s)
            except Exception:  # a bug: logged whole, and tried again next period
                log.exception("scheduler tick failed; trying again in %g s", self.period_s)
            if not self._stop.is_set():
                self.lease.wait(self.period_s if leading else min(LOOK_S, self.period_s), self._wake)

    def tick(self) -> None:
        with self.session() as orch:
            self.run_cron(orch, self.clock())
            self.reconcile(orch)
            self.launch_queue(orch)
            self.collect_uploads(orch)
            orch.stop_idle()  # the per-user mode's idle instances

    # -- 1. cron --------------------------------------------------------------------------

    def run_cron(self, orch: Orch, now: float) -> list[str]:
        """Record a job for each schedule's due slot; the ids recorded."""
        recorded = []
        for s in orch.schedule_rows():
            if s.paused or s.next_at is None:
                continue
            d = cron.due(s.cron, s.next_at, now)
            if d is None:
                continue
            events: list[tuple[Optional[float], Optional[str], str]] = []  # slot, job, message
            if d.skipped:
                events.append((d.last_skipped, None, f"skipped {d.skipped} slot(s), "
                               f"{iso(d.first_skipped)} to {iso(d.last_skipped)}: missed while "
                               "the server was down or busy (only the latest missed slot runs)"))
            if d.slot is not None:
                job_id, message = self._submit_slot(orch, s, d.slot)
                events.append((d.slot, job_id, message))
                if job_id:
                    recorded.append(job_id)
            orch.schedule_done(s.id, last_slot=d.slot, next_at=d.next_at, events=events)
            for _, _, message in events:
                log.info("schedule %s (%s): %s", s.id, s.name, message)
        if recorded:
            self.wake()
        return recorded

    def _submit_slot(self, orch: Orch, s: ScheduleRow, slot: float) -> tuple[Optional[str], str]:
        from orchestrator.spec import load_spec_text

        key = f"cron:{s.id}:{iso(slot)}"
        try:
            spec = load_spec_text(s.source_text, s.source_file or "<job>")
            rec, _, existing = orch.record(spec, key, owner=s.owner, priority=s.priority,
                                                 info=queue_info(spec, schedule=s.id, slot=iso(slot)))
        except OrchError as e:  # the slot is used up: a job that cannot run now never will
            return None, f"slot {iso(slot)} not run: {e.message}"
        if existing:
            return rec.id, f"slot {iso(slot)}: {rec.id} was recorded for it before; not run again"
        orch.set_status(rec.id, "PENDING", f"queued by schedule {s.id} "
                                    f"({s.name}) for its slot {iso(slot)}")
        return rec.id, f"slot {iso(slot)}: queued {rec.id}"

    # -- 2. reconcile ---------------------------------------------------------------------

    def reconcile(self, orch: Orch) -> None:
        reconciling.reconcile(orch)

    def reconcile_held(self, orch: Orch) -> None:
        """A standby's share of step 2: the jobs whose secret values it holds (it launched
        them), which the lease holder leaves to it (`values_elsewhere`)."""
        if self.held:
            reconciling.reconcile(orch, only=set(self.held))

    # -- 3. the queue ---------------------------------------------------------------------

    def launch_queue(self, orch: Orch) -> list[str]:
        """Launch the queued jobs their target has room for, in order, one at a time; tell
        the others what they wait for; fail those that could never fit. The ids launched."""
        from orchestrator.decision.queue import plan_queue

        orch.replace_late(self.clock(), self.pending)  # first: late exploratory jobs placed again
        launched: list[str] = []
        mine, elsewhere = [], []
        for rec in orch.queued():
            other = rec.info.launcher
            if other and other != self.me and launcher_alive(other, orch):
                elsewhere.append(rec)  # another server is launching it: it holds its room
            else:
                mine.append(rec)
        if not mine:
            return launched
        rooms = self.rooms(orch, {r.target for r in mine}, elsewhere)
        by_id = {r.id: r for r in mine}
        for v in plan_queue([queued_job(r) for r in mine], rooms).verdicts:
            if self._stop.is_set():
                break
            rec = by_id[v.id]
            if v.action == "wait":
                if rec.message != v.message:  # once per change: the history stays readable
                    orch.set_status(rec.id, "PENDING", v.message)
                    log.info("%s: %s", rec.id, v.message)
                continue
            if v.action == "launch" and self._hand_over(orch, rec):
                continue
            if not orch.claim(rec.id, self.me, expect=rec.info.launcher):
                continue  # cancelled, or taken by another server, meanwhile
            if v.action == "never":
                self.forget(rec.id)
                orch.set_status(rec.id, "FAILED", v.message)
                log.warning("%s: %s", rec.id, v.message)
            elif self._launch(orch, orch.get(rec.id)):
                launched.append(rec.id)
        return launched

    def _hand_over(self, orch: Orch, rec: JobRow) -> bool:
        """A job whose given secret values another live replica holds (it was sent there):
        claimed for that replica, which launches it at its next look (`launch_held`).
        False where this replica launches it: its own, or its holder is gone (the launch
        then fails, saying the values are lost)."""
        holder = rec.info.held_by
        if not holder or holder == self.me or rec.id in self.pending or \
                not launcher_alive(holder, orch):
            return False
        if orch.claim(rec.id, holder, expect=rec.info.launcher):
            log.info("%s: its launch is handed to the replica that holds its secret values (%s)",
                     rec.id, holder)
        return True

    def launch_held(self, orch: Orch) -> list[str]:
        """Launch the queued jobs the lease holder handed to this replica (`_hand_over`)."""
        with self._lock:
            if not self.pending:
                return []
            held = set(self.pending)
        launched = []
        for rec in orch.queued():
            if rec.id in held and rec.info.launcher == self.me and self._launch(orch, rec):
                launched.append(rec.id)
        return launched

    def rooms(self, orch: Orch, targets: set, elsewhere: list[JobRow]) -> dict:
        """The room of each target that has one (a provider with `capacity`); None for the
        rest. Held there: what the backend reports used, or what orch's unfinished jobs on
        it ask for (launched, or being launched by another server), whichever is more. Only
        orch's own records count: a Ray job's metadata is whatever its submitter wrote (any
        job on the cluster can submit one with `orch_job` and `cpus: 64`), so a job this
        store does not know holds what Ray reports used, nothing more."""
        from orchestrator.decision.queue import Demand, Room

        active = [r for r in orch.unfinished() if r.backend_id] + elsewhere
        rooms: dict = {}
        for target in sorted(t for t in targets if t):
            try:
                snap = orch.capacity(target)
            except BackendError as e:
                rooms[target] = Room(Demand(), problem=f"cannot read its capacity: {e.message}")
                continue
            except OrchError:
                snap = None  # not available here: the launch says so
            if snap is None:
                rooms[target] = None
                continue
            reserved = sum((queued_job(r).demand for r in active if r.target == target), Demand())
            total, used = snap.demands()
            rooms[target] = Room(total, used, reserved, most=self._most(target, total))
        return rooms

    def _most(self, target: str, live):
        """The most a target can ever hold: what it has now, or for on-prem what the
        settings say it owns when that is more (a node may be down for a while)."""
        from orchestrator.decision.queue import Demand

        if target != ONPREM:
            return live
        gpus = sum(inv.count for inv in self.settings.onprem if not inv.cpu_pool)
        cpus = sum(inv.cpus or 0 for inv in self.settings.onprem)
        return live.most(Demand(cpus, gpus))

    def _launch(self, orch: Orch, rec: JobRow) -> bool:
        job_id = rec.id
        try:
            with self._lock:
                spec = self.pending.get(job_id)
            spec = spec or self._from_record(rec)
            # its owner's names and target still allowed, its server paths as they are now
            check_launch(spec, rec.owner, self.settings, rec.target, upload=bool(rec.info.upload)
                         or owners_upload(self.settings, spec.workdir, rec.owner))
            rec = orch.launch(rec, spec)
        except Exception as e:  # BackendError: launch() marked it FAILED already
            message = e.message if isinstance(e, OrchError) else f"{type(e).__name__}: {e}"
            if orch.get(job_id).status not in TERMINAL:
                orch.set_status(job_id, "FAILED", f"launch failed: {message}")
            (log.warning if isinstance(e, OrchError) else log.exception)(
                "%s: launch failed: %s", job_id, message)
            return False
        finally:
            self.forget(job_id)
        if orch.get(job_id).cancel_requested:  # cancelled while it was being launched
            assert rec.backend_id is not None  # launch() stored it
            try:
                orch.provider(rec.placed_on).cancel(rec.backend_id)
            except OrchError as e:
                log.warning("%s: cancelled during its launch, and stopping it failed: %s",
                            job_id, e.message)
        log.info("%s (%s, owner %s): launched on %s", job_id, rec.name, rec.owner,
                 rec.target)
        return True

    def _from_record(self, rec: JobRow) -> JobSpec:
        """A job's spec from its record, its upload (taken by another replica, maybe)
        run from this replica's own folder of it."""
        from orchestrator.service.upload.sharing import relocate

        spec = spec_from_record(rec)
        upload = rec.info.upload if isinstance(rec.info.upload, str) else None
        workdir = relocate(self.settings, spec.workdir, upload, rec.owner)
        return spec if workdir == spec.workdir else spec.model_copy(update={"workdir": workdir})

    # -- 4. uploads nobody needs --------------------------------------------------------

    def collect_uploads(self, orch: Orch, force: bool = False) -> list[str]:
        """Remove unneeded uploads, once per UPLOAD_GC_EVERY_S (the first tick included);
        the names removed. Real time, not the scheduler's clock: folder times are real."""
        from orchestrator.service.upload.sharing import shared

        mono = time.monotonic()
        if not force and self._uploads_checked is not None and \
                mono - self._uploads_checked < UPLOAD_GC_EVERY_S:
            return []
        self._uploads_checked = mono  # a failing step is not retried every tick
        keep_hours, now = self.settings.upload_keep_hours, time.time()
        removed = []
        try:
            removed = orch.collect_uploads(keep_hours, now)
        except OSError as e:  # the uploads folder unreadable: the rest of the server works
            log.warning("cannot check the uploads for removal: %s", e)
        if self.leading and shared(self.settings):  # the archives replicas share: once
            orch.collect_uploads(keep_hours, now, shared=True)
        return removed


def queued_job(rec: JobRow):
    """A job record as the queue policy sees it."""
    from orchestrator.decision.queue import Queued, job_demand

    return Queued(rec.id, rec.placed_on, job_demand(rec.spec, rec.choice or None),
                  rec.priority, rec.created_at)


def queue_info(spec, **extra) -> dict:
    """What a queued job's record keeps for the scheduler: that it is queued, and which of
    its secrets come from the server's environment (the only ones a restart can restore)."""
    return {"queued": True, "env_secrets": sorted(k for k, v in spec.secrets.items() if v is None),
            **extra}
