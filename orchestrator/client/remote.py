"""The client of an `orch serve`: the `Client` interface over HTTP (stdlib urllib), a job's
workdir sent with it when the server does not have those files yet."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

from orchestrator import records
from orchestrator.base.errors import BackendError, InputError, NotFound, OrchError
from orchestrator.client import retry
from orchestrator.client.answers import read
from orchestrator.client.opener import no_redirects, redirected
from orchestrator.client.protocol import Note, Planned, Submitted, note
from orchestrator.records.cost import CostReport
from orchestrator.records.placement import PipelinePlan, Plan

if TYPE_CHECKING:
    from orchestrator.spec import Overrides

MiB = 1 << 20


class Remote:
    """An `orch serve` over HTTP (stdlib urllib): same answers, same errors as `Local`.

    `url` names one server (or a load balancer before several), or several replicas,
    comma-separated. A request that finds no server (refused, reset, timed out, a proxy's
    502/503/504) is tried again, on the next URL, for up to `retry_s` seconds; one the
    server may already have acted on is sent again only when that is safe (reads, a submit,
    which always carries an idempotency key, an upload, cancel, pause)."""

    def __init__(self, url: str | list[str], token: Optional[str], timeout_s: float = 300.0,
                 upload_max_bytes: int = 100 * MiB, on_note: Note = None,
                 retry_s: float = retry.RETRY_S):
        self.urls = retry.server_urls(url) if isinstance(url, str) else list(url)
        self.token, self.timeout_s, self.retry_s = token, timeout_s, retry_s
        self.upload_max_bytes, self.on_note = upload_max_bytes, on_note
        self._at = 0  # the URL that answered last: the next request starts there
        self.recovered = 0  # requests answered after a lost connection (a benchmark counts them)

    @property
    def url(self) -> str:
        """The server this client talks to now (the one that answered last)."""
        return self.urls[self._at]

    def _tries(self) -> retry.Tries:
        return retry.Tries(self.urls, self.retry_s, start=self._at)

    def _open(self, url: str, method: str, path: str, body: Optional[dict],
              timeout: Optional[float], upload):
        """One try at `url`: the response, an OrchError from the server, or retry.Lost."""
        import http.client
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
            upload.file.seek(0)
            data = upload.file
            headers.update({"Content-Type": "application/octet-stream", "Content-Length": str(upload.size)})
        req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
        try:
            return no_redirects().open(req, timeout=timeout or self.timeout_s)
        except urllib.error.HTTPError as e:
            if 300 <= e.code < 400:
                raise redirected(url, e.code, e.headers.get("Location")) from None
            try:
                raw = e.read()
            except (OSError, http.client.HTTPException):
                raw = b""
            if retry.proxy_failure(e.code, raw):
                said = self._error(e.code, raw, url) if retry.orch_shaped(raw) else None
                raise retry.Lost(url, f"HTTP {e.code}: {retry.brief(raw)}", sent=True,
                                 said=said) from None
            raise self._error(e.code, raw, url) from None
        except urllib.error.URLError as e:  # while connecting or sending: not acted on
            raise retry.Lost(url, retry.why(e), sent=False) from None
        except (OSError, http.client.HTTPException) as e:  # sent, and no answer came
            raise retry.Lost(url, retry.why(e), sent=True) from None

    def _opened(self, tries: retry.Tries, method: str, path: str, body: Optional[dict] = None,
                timeout: Optional[float] = None, upload=None, safe: bool = True,
                hint: Optional[str] = None):
        """The response of the first URL that answers, tried again as `tries` allow."""
        while True:
            try:
                return self._open(tries.url, method, path, body, timeout, upload)
            except retry.Lost as lost:
                self._lost(tries, lost, method, path, safe, hint)

    def _lost(self, tries: retry.Tries, lost: retry.Lost, method: str, path: str, safe: bool,
              hint: Optional[str] = None) -> None:
        """Wait for the next try; raise when there is none, or when the server may have
        acted on a request that is not safe to send twice."""
        if lost.sent and not safe:
            raise OrchError(f"lost the connection to the orch server at {lost.url} after "
                            f"sending {method} {path} ({lost.reason}): it may or may not have "
                            "been done, and it is not sent again, as doing it twice is not safe",
                            hint or "look before doing it again")
        wait = tries.failed(lost)
        if wait is None and lost.said is not None:  # the server itself said it cannot now
            raise type(lost.said)(f"{lost.said.message} (after {tries.spent()})",
                                  lost.said.hint) from None
        if wait is None:
            several = len(self.urls) > 1
            raise OrchError(
                f"cannot reach the orch server at {', '.join(self.urls)} (ORCH_SERVER): "
                f"{lost.reason if not several and tries.failures == 1 else tries.spent()}",
                hint or "start `orch serve` there, or fix ORCH_SERVER (several replicas: their "
                "URLs separated by commas); unset ORCH_SERVER to run orch alone on this "
                "machine") from None
        if tries.failures == 1:
            bound = min(self.retry_s, retry.REFUSED_S) if tries.refused_only else self.retry_s
            note(self.on_note, f"no answer from the orch server at {lost.url} ({lost.reason}): "
                 f"trying {tries.url} for up to {bound:g} s")
        time.sleep(wait)

    def _call(self, method: str, path: str, body: Optional[dict] = None, *,
              timeout: Optional[float] = None, upload=None, safe: bool = True,
              hint: Optional[str] = None) -> bytes:
        """The whole answer's body; a connection lost while reading it counts as lost."""
        import http.client

        tries = self._tries()
        while True:
            resp = self._opened(tries, method, path, body, timeout, upload, safe, hint)
            try:
                with resp:
                    raw = resp.read()
            except (OSError, http.client.HTTPException) as e:
                self._lost(tries, retry.Lost(tries.url, retry.why(e), sent=True), method, path,
                           safe, hint)
                continue
            self._at = tries.index
            if tries.failures:
                self.recovered += 1
            return raw

    def _error(self, status: int, raw: bytes, url: Optional[str] = None) -> OrchError:
        url = url or self.url
        try:
            body = json.loads(raw)
            message, hint = body.get("error") or raw.decode(), body.get("hint")
        except (ValueError, AttributeError):
            message, hint = raw.decode(errors="replace")[:500] or f"HTTP {status}", None
        if status == 401 and not self.token:
            return InputError(f"the orch server at {url} needs a token, and ORCH_TOKEN is "
                              "not set", "set ORCH_TOKEN (or give it in the URL, "
                              "http://TOKEN@host:port); `orch token create NAME` on the server "
                              "makes one")
        if status == 401:
            return InputError(f"the orch server at {url} refused the token: {message}",
                              hint or "set ORCH_TOKEN to a token from `orch token create NAME` "
                              "run on the server")
        if status in (400, 403, 408, 413, 422):
            return InputError(message, hint)
        if status == 429:  # the server is busy with this user's other requests: not a failure
            return InputError(f"the orch server at {url} is busy: {message}",
                              hint or "wait for your other requests to finish, then try again")
        if status == 404:
            return NotFound(message, hint)
        if status in (502, 503, 504):
            return BackendError(message, hint)
        return OrchError(f"the orch server at {url} failed (HTTP {status}): {message}",
                         hint or "its log (journalctl -u orch-serve) says more")

    def _json(self, method: str, path: str, body: Optional[dict] = None, safe: bool = True,
              hint: Optional[str] = None):
        return json.loads(self._call(method, path, body, safe=safe, hint=hint))

    @staticmethod
    def _id(job_id: str) -> str:
        from urllib.parse import quote

        return quote(job_id, safe="")

    def submit(self, file: Path, key: Optional[str] = None, priority: int = 0,
               given: Optional[Overrides] = None) -> Submitted:
        from orchestrator.spec import load_spec

        spec = load_spec(file, given)  # bad input: the same message and exit code as alone
        # Every submit carries a key, so that one resent after a lost connection returns
        # the job the first one recorded rather than a second job.
        ours = key is None
        key = key or f"client-{uuid.uuid4().hex}"
        # A schedule is keyed as a job is: a resend returns the one the first try registered.
        hint = (f"when the server is back, `orch submit {file} --idempotency-key {key}` returns "
                f"the {'schedule' if spec.schedule.cron else 'job'} if one of these tries "
                "recorded it, and submits it if none did")
        answer = self._with_workdir(spec, "/v1/jobs", {
            "spec": Path(file).read_text(encoding="utf-8"), "file": str(Path(file).resolve()),
            "idempotency_key": key, "priority": priority, **_given(given)},
            hint=hint)
        if "schedule" in answer:
            registered = read(records.Registered, answer)
            if ours and registered.schedule.existing:  # our own earlier try got through
                registered.schedule.existing = False
            return registered
        if "stages" in answer:
            return read(records.SubmittedPipeline, answer)
        job = read(records.SubmittedJob, answer)
        if ours and job.existing:  # our own try that got through before its answer was lost
            job = job.model_copy(update={"existing": False})
        return job

    def plan(self, file: Path, given: Optional[Overrides] = None) -> Planned:
        # The workdir is sent for a plan too: the fingerprint that history is matched on
        # is computed from its files (and the submit that follows sends nothing).
        from orchestrator.spec import load_spec

        spec = load_spec(file, given)
        answer = self._with_workdir(spec, "/v1/plan", {
            "spec": Path(file).read_text(encoding="utf-8"), "file": str(Path(file).resolve()),
            **_given(given)})
        return read(PipelinePlan, answer) if "stages" in answer else read(Plan, answer)

    def _with_workdir(self, spec, path: str, body: dict, hint: Optional[str] = None) -> dict:
        """POST `body` with the job's workdir as {"upload": digest}, sent first unless the
        server has the same files. The server removes uploads nobody used for a while, so
        one it had a moment ago may be gone by the POST: then it is sent again, once."""
        from orchestrator.service import upload as up

        where = self._workdir(spec)
        if where is None:
            return self._json("POST", path, body, hint=hint)
        from orchestrator.base.redact import looks_secret
        from orchestrator.service.launch_spec import left_out

        # Not the job file (the server gets its text), nor a file with one of its secrets.
        hidden = [v for k, v in spec.env_strings().items() if looks_secret(k)]
        hidden += [v for v in spec.secrets.values() if v is not None]
        packed = up.pack(where, self.upload_max_bytes, left_out(where, spec.source_file, hidden))
        try:
            for item in packed.left_out:
                note(self.on_note, f"not sent: {item}")
            self._offer(packed, where)
            body = {**body, "upload": packed.digest}
            try:
                return self._json("POST", path, body, hint=hint)
            except InputError as e:
                if e.message != up.missing(packed.digest).message:
                    raise
            note(self.on_note, "the server removed its copy of the workdir meanwhile (unused "
                  "for upload_keep_hours): sending it again")
            self._send(packed)
            return self._json("POST", path, body, hint=hint)
        finally:
            packed.close()

    def _workdir(self, spec) -> Optional[Path]:
        """The job's workdir on this machine, to send; None for no workdir, for a path only
        the server has, or with upload_max_mb 0."""
        from orchestrator.service import upload as up

        if self.upload_max_bytes == 0:
            return None
        where = up.local_workdir(spec)
        if where is None:
            if isinstance(spec.workdir, str):
                note(self.on_note, f"workdir {spec.workdir} is not on this machine: sent as a "
                      "path on the server, which takes it only inside its serve_workdir_roots")
        return where

    def _offer(self, packed, where) -> None:
        """Send the packed workdir unless the server has the same files already."""
        from orchestrator.service import upload as up

        what = f"{packed.files} files, {up.human(packed.content)}"
        try:
            self._json("GET", f"/v1/uploads/{packed.digest}")
            note(self.on_note, f"workdir {where}: the server has these files already "
                  f"({what}); nothing sent")
        except NotFound:
            note(self.on_note, f"sending the workdir {where} to the server: {what} "
                  f"({up.human(packed.size)} packed)")
            self._send(packed)

    def _send(self, packed) -> None:
        json.loads(self._call("POST", "/v1/uploads", upload=packed))  # content-addressed: safe again

    def jobs(self, limit: int = 50) -> list[records.JobRecord]:
        return [read(records.JobRecord, j) for j in self._json("GET", f"/v1/jobs?limit={int(limit)}")]

    def job(self, job_id: str) -> records.JobDetail:
        return read(records.JobDetail, self._json("GET", f"/v1/jobs/{self._id(job_id)}"))

    def logs(self, job_id: str) -> str:
        return self._call("GET", f"/v1/jobs/{self._id(job_id)}/logs").decode("utf-8", errors="replace")

    def stream(self, job_id: str) -> Iterator[str]:
        # The server sends lines as the job prints them and ends the response when the
        # job ends; a quiet epoch may be long, hence the long read timeout. A lost
        # connection re-attaches (the next replica, as any request): the server sends the
        # log from its start again, and the lines already yielded are skipped.
        import http.client

        path = f"/v1/jobs/{self._id(job_id)}/logs?follow=true"
        hint = f"the job keeps running there; `orch logs {job_id} --follow` re-attaches"
        tries, printed = self._tries(), 0
        while True:
            resp = self._opened(tries, "GET", path, timeout=3600, hint=hint)
            self._at, seen = tries.index, 0
            try:
                with resp:
                    for raw in _lines(resp):
                        seen += 1
                        if seen > printed:
                            printed = seen
                            if tries.failures:
                                self.recovered += 1
                            tries.ok()
                            yield raw.decode("utf-8", errors="replace").rstrip("\n")
                return
            except (OSError, http.client.HTTPException) as e:
                lost = retry.Lost(tries.url, f"lost while following {job_id}: "
                                  f"{retry.why(e)}", sent=True)
                self._lost(tries, lost, "GET", path, True, hint)

    def cancel(self, job_id: str) -> records.CancelledJob:
        return read(records.CancelledJob, self._json("POST", f"/v1/jobs/{self._id(job_id)}/cancel"))

    def cancel_sweep(self, sweep_id: str) -> list[records.CancelledJob]:
        raise InputError(f"{sweep_id}: sweeps run from `orch submit` without ORCH_SERVER, so "
                         "this server has none", "unset ORCH_SERVER to reach the sweep's runs")

    def cost(self, by: str = "target", since: Optional[str] = None) -> CostReport:
        from urllib.parse import urlencode

        query = {"by": by, **({"since": since} if since is not None else {})}
        return CostReport.read(self._json("GET", "/v1/cost?" + urlencode(query)))

    def schedules(self) -> list[records.Schedule]:
        return [read(records.Schedule, s) for s in self._json("GET", "/v1/schedules")]

    def schedule(self, sched_id: str) -> records.Schedule:
        return read(records.Schedule, self._json("GET", f"/v1/schedules/{self._id(sched_id)}"))

    def pause_schedule(self, sched_id: str, paused: bool = True) -> records.Schedule:
        return read(records.Schedule, self._json("POST", f"/v1/schedules/{self._id(sched_id)}/"
                                                  f"{'pause' if paused else 'resume'}"))

    def remove_schedule(self, sched_id: str) -> records.Schedule:
        # Sent again after a lost answer, it would say "no schedule": not resent then.
        return read(records.Schedule, self._json(
            "DELETE", f"/v1/schedules/{self._id(sched_id)}", safe=False,
            hint="`orch schedule list` shows whether it is gone"))


def _lines(resp) -> Iterator[bytes]:
    """A streamed answer's lines. Read with read1, which raises when a chunked answer is
    cut off before its last chunk (iterating the response ends quietly there)."""
    buf = b""
    while True:
        piece = resp.read1(65536)
        if not piece:
            if buf:
                yield buf
            return
        buf += piece
        *whole, buf = buf.split(b"\n")
        for line in whole:
            yield line + b"\n"


def _given(given: Optional[Overrides]) -> dict:
    """The command line's --env / --secret values for the request body (none: no keys)."""
    if not given:
        return {}
    return {k: v for k, v in (("env", given.envs), ("secrets", given.secrets)) if v}
