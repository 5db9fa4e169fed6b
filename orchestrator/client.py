"""What the CLI talks to: `Local` runs orch in this process, `Remote` asks an `orch serve`.

Both implement one small interface and return the `--json` shapes (`records.JobRecord`s,
the plan and cost reports), so every command renders the same output either way.
`connect()` picks `Remote` when ORCH_SERVER is set. No SDK is imported here.
"""

from __future__ import annotations

import calendar
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator, Optional, Protocol

from orchestrator.errors import BackendError, InputError, NotFound, OrchError
from orchestrator.store import TERMINAL, public_schedule, store_exists

MiB = 1 << 20


class Client(Protocol):
    """The operations the CLI's job commands need; each returns plain JSON data."""

    def submit(self, file: Path, key: Optional[str] = None, priority: int = 0) -> dict:
        """Record and start a job: its record, with "existing": True when `key` was seen
        before; a job file with `schedule.cron` sent to a server: {"schedule": {...}}."""

    def plan(self, file: Path) -> dict:
        """The `orch plan --json` shape."""

    def jobs(self, limit: int = 50) -> list[dict]:
        """The newest jobs, each checked with its backend first."""

    def job(self, job_id: str) -> dict:
        """One job with its history; its "warning" says why it may be stale (None when
        its backend answered)."""

    def logs(self, job_id: str) -> str:
        """The job's log so far, secrets redacted."""

    def stream(self, job_id: str) -> Iterator[str]:
        """The job's log lines as they come, until the job ends."""

    def cancel(self, job_id: str) -> dict:
        """Stop a job; its record ("already_ended": True when it had ended before)."""

    def cost(self, by: str = "target", since: Optional[str] = None) -> dict:
        """The `orch cost --json` report."""

    def schedules(self) -> list[dict]:
        """Every cron schedule, each with its recent log."""

    def schedule(self, sched_id: str) -> dict:
        """One schedule (an id or a unique prefix) with its recent log."""

    def pause_schedule(self, sched_id: str, paused: bool = True) -> dict:
        """Pause (or resume) a schedule; "unchanged": True when it already was."""

    def remove_schedule(self, sched_id: str) -> dict:
        """Delete a schedule and its log; the jobs it ran are kept. What it was."""


Note = Optional[Callable[[str], None]]


def connect(settings=None, on_ray_start: Optional[Callable[[], None]] = None,
            on_note: Note = None) -> Client:
    """`Remote` when settings.server (ORCH_SERVER) is set, else `Local`. `on_note` is told
    what a user should know while a command works (a workdir being sent, say)."""
    if settings is None:
        from orchestrator.settings import load_settings

        settings = load_settings()
    if settings.server:
        return Remote(settings.server, settings.token.get_secret_value() if settings.token else None,
                      upload_max_bytes=settings.upload_max_mb * MiB, on_note=on_note)
    return Local(settings, on_ray_start, on_note=on_note)


def _note(on_note: Note, text: str) -> None:
    if on_note is not None:
        on_note(text)


# -- embedded ----------------------------------------------------------------------------

class Local:
    """orch in this process: the `Orch` service on this machine's store and backends."""

    def __init__(self, settings, on_ray_start: Optional[Callable[[], None]] = None, orch=None,
                 on_note: Note = None):
        from orchestrator.service import Orch

        self.settings = settings
        self.orch = orch or Orch(settings, on_ray_start=on_ray_start)
        self.on_note = on_note

    def close(self) -> None:
        store = self.orch.__dict__.get("store")  # opened only if it was used
        if store is not None:
            store.close()

    def submit(self, file: Path, key: Optional[str] = None, priority: int = 0) -> dict:
        from orchestrator.records import SubmittedJob
        from orchestrator.spec import load_spec

        spec = load_spec(file)
        if spec.schedule.cron:  # schedules are kept and run by `orch serve` only
            _note(self.on_note, f"schedule.cron {spec.schedule.cron!r} is run by `orch serve`: "
                  "alone, this job runs once, now. Submit it with ORCH_SERVER set to register "
                  "its schedule with a server")
        rec = self.orch.submit(spec, idempotency_key=key)
        return SubmittedJob.from_row(rec, existing=bool(rec.get("existing"))).to_json()

    def plan(self, file: Path) -> dict:
        from orchestrator.spec import load_spec

        return self.plan_spec(load_spec(file))

    def plan_spec(self, spec) -> dict:
        from orchestrator import fingerprint as fp_mod
        from orchestrator import planning
        from orchestrator.checks import check_runnable

        # What a submit would refuse before recording, a plan refuses too.
        check_runnable(spec)
        self.orch.resume_point(spec)
        fp, dirty = fp_mod.fingerprint(spec)
        history = planning.history_for(fp, self.settings)
        decision = planning.plan_job(spec, self.settings, fingerprint=fp, history=history,
                                     code_dirty=dirty)
        return {**decision.to_dict(), "fingerprint": fp}

    def jobs(self, limit: int = 50) -> list[dict]:
        from orchestrator.records import JobRecord

        return [JobRecord.from_row(r).to_json() for r in self.orch.list(limit)]

    def job(self, job_id: str) -> dict:
        from orchestrator.records import JobDetail

        rec, warning = self.orch.get(job_id), None
        try:
            rec = self.orch.refresh(rec)
        except BackendError as e:  # show what is known, and why it may be stale
            warning = f"last known state: {e.message}" + (f"\n  -> {e.hint}" if e.hint else "")
        return JobDetail.from_history(rec, self.orch.store.history(rec["id"]), warning).to_json()

    def logs(self, job_id: str) -> str:
        return self.orch.logs(self.orch.refresh(self.orch.get(job_id)))

    def poll(self, job_id: str) -> tuple[dict, str]:
        """The job's record, checked with its backend, and its whole log so far."""
        rec = self.orch.refresh(self.orch.get(job_id))
        try:
            text = self.orch.logs(rec)
        except Exception:  # a log read that fails mid-run is retried on the next poll
            text = ""
        return rec, text

    def stream(self, job_id: str, poll_s: float = 1.0) -> Iterator[str]:
        rec, printed = self.orch.get(job_id), 0
        while True:
            rec, text = self.poll(rec["id"])
            lines = text.splitlines()
            yield from lines[printed:]
            # A log that got shorter was replaced by the saved copy; keep our place.
            printed = max(printed, len(lines))
            if rec["status"] in TERMINAL:
                return
            time.sleep(poll_s)

    def cancel(self, job_id: str) -> dict:
        from orchestrator.records import CancelledJob

        rec = self.orch.get(job_id)
        if rec["status"] in TERMINAL:
            return CancelledJob.from_row(rec, already_ended=True).to_json()
        return CancelledJob.from_row(self.orch.cancel(rec["id"])).to_json()

    def cost(self, by: str = "target", since: Optional[str] = None) -> dict:
        return cost_report(self.settings, by, since, self.orch)

    # Schedules on this machine's store: the ones an `orch serve` using it runs. The store's
    # user may change any of them, as with `orch token`.

    def schedules(self) -> list[dict]:
        if not store_exists(self.settings):  # never create the store just to say it is empty
            return []
        store = self.orch.store
        return [public_schedule(s, store.schedule_events(s["id"])) for s in store.schedules()]

    def _store_with_schedules(self, sched_id: str):
        if not store_exists(self.settings):
            raise NotFound(f"no schedule {sched_id!r}: there is no job store at "
                           f"{self.settings.home} yet", "`orch schedule list` shows the schedules")
        return self.orch.store

    def schedule(self, sched_id: str) -> dict:
        store = self._store_with_schedules(sched_id)
        s = store.schedule(sched_id)
        return public_schedule(s, store.schedule_events(s["id"]))

    def pause_schedule(self, sched_id: str, paused: bool = True) -> dict:
        from orchestrator.server.schedules import set_paused

        return set_paused(self._store_with_schedules(sched_id), sched_id, paused)

    def remove_schedule(self, sched_id: str) -> dict:
        from orchestrator.server.schedules import remove

        return remove(self._store_with_schedules(sched_id), sched_id)


def parse_since(text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    try:
        d = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InputError(f"--since {text!r}: not a date", "give a date as YYYY-MM-DD (UTC)") from None
    return float(calendar.timegm(d.utctimetuple()))


def cost_report(settings, by: str = "target", since: Optional[str] = None, orch=None) -> dict:
    """What jobs really cost, grouped `by`, against their best alternatives: the
    `orch cost --json` shape. Money in settings.currency, with the USD figures beside; full
    cost and cash side by side, the month's spend on the monthly budget's basis."""
    from orchestrator import ledger
    from orchestrator.decision.cluster_offers import ran_unpriced

    if by not in ledger.GROUPS:
        raise InputError(f"--by {by!r}: not a grouping", f"use one of: {', '.join(ledger.GROUPS)}")
    start = parse_since(since)
    rate = settings.currency_rate
    entries: list[dict] = []
    now = time.time()
    if store_exists(settings):  # never create the store just to say it is empty
        if orch is None:
            from orchestrator.service import Orch

            orch = Orch(settings)
        for rec in orch.store.list(limit=1_000_000, since=start):
            try:
                rec = orch.refresh(rec)  # a job that ended meanwhile is priced as ended
            except OrchError:
                pass  # priced as last known
            saved = (rec["info"] or {}).get("cost")
            e = saved if saved and rec["status"] in TERMINAL else ledger.entry(rec, now)
            entries.append({**e, "cash_usd": ledger.cash(e)})  # also one saved without it
            # Owned hardware priced at power only (a cluster with no [[onprem]] inventory).
            entries[-1]["full_cost_known"] = not ran_unpriced(rec)
    if start is not None:
        entries = [e for e in entries if (e["finished_at"] or now) >= start]
    groups = ledger.group(entries, by)
    total = ledger.group(entries, "kind")
    total_usd = sum(g["cost_usd"] for g in total)
    cash_usd = sum(g["cash_usd"] for g in total)
    alt_usd = sum(g["alternative_usd"] for g in total)
    month = None
    if settings.monthly_budget:
        basis = settings.budget_basis
        month = {"spent": ledger.month_spend(entries, now, basis) * rate,
                 "budget": settings.monthly_budget, "basis": basis,
                 "month": time.strftime("%Y-%m", time.gmtime(now))}
    conv = lambda r: {**r, **{k[:-4]: r[k] * rate for k in list(r)  # noqa: E731
                              if k.endswith("_usd") and isinstance(r[k], (int, float))}}
    return {"currency": settings.currency, "rate": rate, "by": by, "since": since,
            "groups": [conv(g) for g in groups],
            "total": {"jobs": len(entries), "cost": total_usd * rate, "cost_usd": total_usd,
                      "cash": cash_usd * rate, "cash_usd": cash_usd,
                      "alternative": alt_usd * rate, "alternative_usd": alt_usd,
                      "saved": (alt_usd - total_usd) * rate},
            "month": month, "jobs": entries}


# -- client of `orch serve` --------------------------------------------------------------

class Remote:
    """An `orch serve` over HTTP (stdlib urllib): same answers, same errors as `Local`."""

    def __init__(self, url: str, token: Optional[str], timeout_s: float = 300.0,
                 upload_max_bytes: int = 100 * MiB, on_note: Note = None):
        self.url, self.token, self.timeout_s = url.rstrip("/"), token, timeout_s
        self.upload_max_bytes, self.on_note = upload_max_bytes, on_note

    def _request(self, method: str, path: str, body: Optional[dict] = None,
                 timeout: Optional[float] = None, upload=None):
        import urllib.error
        import urllib.request

        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if upload is not None:  # a packed workdir: its file, read as it is sent
            data = upload.file
            headers.update({"Content-Type": "application/octet-stream", "Content-Length": str(upload.size)})
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout_s)
        except urllib.error.HTTPError as e:
            raise self._error(e.code, e.read()) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise OrchError(f"cannot reach the orch server at {self.url} (ORCH_SERVER): {reason}",
                            "start it there with `orch serve`, fix ORCH_SERVER, or unset "
                            "ORCH_SERVER to run orch alone on this machine") from None

    def _error(self, status: int, raw: bytes) -> OrchError:
        try:
            body = json.loads(raw)
            message, hint = body.get("error") or raw.decode(), body.get("hint")
        except (ValueError, AttributeError):
            message, hint = raw.decode(errors="replace")[:500] or f"HTTP {status}", None
        if status == 401 and not self.token:
            return InputError(f"the orch server at {self.url} needs a token, and ORCH_TOKEN is "
                              "not set", "set ORCH_TOKEN (or give it in the URL, "
                              "http://TOKEN@host:port); `orch token create NAME` on the server "
                              "makes one")
        if status == 401:
            return InputError(f"the orch server at {self.url} refused the token: {message}",
                              hint or "set ORCH_TOKEN to a token from `orch token create NAME` "
                              "run on the server")
        if status in (400, 403, 413, 422):
            return InputError(message, hint)
        if status == 404:
            return NotFound(message, hint)
        if status in (502, 503, 504):
            return BackendError(message, hint)
        return OrchError(f"the orch server at {self.url} failed (HTTP {status}): {message}",
                         hint or "its log (journalctl -u orch-serve) says more")

    def _json(self, method: str, path: str, body: Optional[dict] = None):
        with self._request(method, path, body) as resp:
            return json.loads(resp.read())

    @staticmethod
    def _id(job_id: str) -> str:
        from urllib.parse import quote

        return quote(job_id, safe="")

    def submit(self, file: Path, key: Optional[str] = None, priority: int = 0) -> dict:
        from orchestrator.spec import load_spec

        spec = load_spec(file)  # bad input: the same message and exit code as without a server
        return self._with_workdir(spec, "/v1/jobs", {
            "spec": Path(file).read_text(encoding="utf-8"), "file": str(Path(file).resolve()),
            "idempotency_key": key, "priority": priority})

    def plan(self, file: Path) -> dict:
        # The workdir is sent for a plan too: the fingerprint that history is matched on
        # is computed from its files (and the submit that follows sends nothing).
        from orchestrator.spec import load_spec

        spec = load_spec(file)
        return self._with_workdir(spec, "/v1/plan", {"spec": Path(file).read_text(encoding="utf-8"),
                                                     "file": str(Path(file).resolve())})

    def _with_workdir(self, spec, path: str, body: dict) -> dict:
        """POST `body` with the job's workdir as {"upload": digest}, sent first unless the
        server has the same files. The server removes uploads nobody used for a while, so
        one it had a moment ago may be gone by the POST: then it is sent again, once."""
        from orchestrator import upload as up

        where = self._workdir(spec)
        if where is None:
            return self._json("POST", path, body)
        packed = up.pack(where, self.upload_max_bytes)
        try:
            for item in packed.left_out:
                _note(self.on_note, f"not sent: {item}")
            self._offer(packed, where)
            body = {**body, "upload": packed.digest}
            try:
                return self._json("POST", path, body)
            except InputError as e:
                if e.message != up.missing(packed.digest).message:
                    raise
            _note(self.on_note, "the server removed its copy of the workdir meanwhile (unused "
                  "for upload_keep_hours): sending it again")
            self._send(packed)
            return self._json("POST", path, body)
        finally:
            packed.close()

    def _workdir(self, spec) -> Optional[Path]:
        """The job's workdir on this machine, to send; None for no workdir, for a path only
        the server has, or with upload_max_mb 0."""
        from orchestrator import upload as up

        if self.upload_max_bytes == 0:
            return None
        where = up.local_workdir(spec)
        if where is None:
            if spec.workdir is not None:
                _note(self.on_note, f"workdir {spec.workdir} is not on this machine: the server "
                      "runs the job from its own folder of that name")
        return where

    def _offer(self, packed, where) -> None:
        """Send the packed workdir unless the server has the same files already."""
        from orchestrator import upload as up

        what = f"{packed.files} files, {up.human(packed.content)}"
        try:
            self._json("GET", f"/v1/uploads/{packed.digest}")
            _note(self.on_note, f"workdir {where}: the server has these files already "
                  f"({what}); nothing sent")
        except NotFound:
            _note(self.on_note, f"sending the workdir {where} to the server: {what} "
                  f"({up.human(packed.size)} packed)")
            self._send(packed)

    def _send(self, packed) -> None:
        packed.file.seek(0)
        with self._request("POST", "/v1/uploads", upload=packed) as resp:
            json.loads(resp.read())

    def jobs(self, limit: int = 50) -> list[dict]:
        return self._json("GET", f"/v1/jobs?limit={int(limit)}")

    def job(self, job_id: str) -> dict:
        return self._json("GET", f"/v1/jobs/{self._id(job_id)}")

    def logs(self, job_id: str) -> str:
        with self._request("GET", f"/v1/jobs/{self._id(job_id)}/logs") as resp:
            return resp.read().decode("utf-8", errors="replace")

    def stream(self, job_id: str) -> Iterator[str]:
        # The server sends lines as the job prints them and ends the response when the
        # job ends; a quiet epoch may be long, hence the long read timeout.
        import http.client

        with self._request("GET", f"/v1/jobs/{self._id(job_id)}/logs?follow=true",
                           timeout=3600) as resp:
            try:
                for raw in resp:
                    yield raw.decode("utf-8", errors="replace").rstrip("\n")
            except (OSError, http.client.HTTPException) as e:
                raise OrchError(f"lost the connection to the orch server at {self.url} while "
                                f"following {job_id}: {e or type(e).__name__}",
                                f"the job keeps running there; `orch logs {job_id} --follow` "
                                "re-attaches") from None

    def cancel(self, job_id: str) -> dict:
        return self._json("POST", f"/v1/jobs/{self._id(job_id)}/cancel")

    def cost(self, by: str = "target", since: Optional[str] = None) -> dict:
        from urllib.parse import urlencode

        query = {"by": by, **({"since": since} if since is not None else {})}
        return self._json("GET", "/v1/cost?" + urlencode(query))

    def schedules(self) -> list[dict]:
        return self._json("GET", "/v1/schedules")

    def schedule(self, sched_id: str) -> dict:
        return self._json("GET", f"/v1/schedules/{self._id(sched_id)}")

    def pause_schedule(self, sched_id: str, paused: bool = True) -> dict:
        return self._json("POST", f"/v1/schedules/{self._id(sched_id)}/"
                          f"{'pause' if paused else 'resume'}")

    def remove_schedule(self, sched_id: str) -> dict:
        return self._json("DELETE", f"/v1/schedules/{self._id(sched_id)}")
