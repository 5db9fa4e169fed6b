"""The client of an `orch serve`: the `Client` interface over HTTP (stdlib urllib), a job's
workdir sent with it when the server does not have those files yet."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional, TypeVar

from pydantic import BaseModel

from orchestrator import records
from orchestrator.base.errors import BackendError, InputError, NotFound, OrchError
from orchestrator.client.protocol import Note, Planned, Submitted, note
from orchestrator.records.cost import CostReport
from orchestrator.records.placement import PipelinePlan, Plan

if TYPE_CHECKING:
    from orchestrator.spec import Overrides

MiB = 1 << 20
M = TypeVar("M", bound=BaseModel)


def read(cls: type[M], answer: Any) -> M:
    """A server's answer as this client's record. A newer `orch serve` may add fields: they
    are left out (at every level) rather than refused, so an older client still reads it."""
    return cls.model_validate(known(cls, answer))


def known(ann: Any, data: Any) -> Any:
    """`data` without the keys that the annotation's models forbid and do not know."""
    if isinstance(data, list):
        args = typing.get_args(ann)
        return [known(args[0] if args else Any, x) for x in data]
    if not isinstance(data, dict):
        return data
    models = [a for a in (ann, *typing.get_args(ann)) if isinstance(a, type) and issubclass(a, BaseModel)]
    if not models:
        return data
    cls = models[0]
    fields = cls.model_fields
    strict = cls.model_config.get("extra") == "forbid"
    return {k: known(fields[k].annotation, v) if k in fields else v for k, v in data.items()
            if k in fields or not strict}


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
        if status in (400, 403, 408, 413, 422):
            return InputError(message, hint)
        if status == 429:  # the server is busy with this user's other requests: not a failure
            return InputError(f"the orch server at {self.url} is busy: {message}",
                              hint or "wait for your other requests to finish, then try again")
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

    def submit(self, file: Path, key: Optional[str] = None, priority: int = 0,
               given: Optional[Overrides] = None) -> Submitted:
        from orchestrator.spec import load_spec

        spec = load_spec(file, given)  # bad input: the same message and exit code as alone
        answer = self._with_workdir(spec, "/v1/jobs", {
            "spec": Path(file).read_text(encoding="utf-8"), "file": str(Path(file).resolve()),
            "idempotency_key": key, "priority": priority, **_given(given)})
        if "schedule" in answer:
            return read(records.Registered, answer)
        if "stages" in answer:
            return read(records.SubmittedPipeline, answer)
        return read(records.SubmittedJob, answer)

    def plan(self, file: Path, given: Optional[Overrides] = None) -> Planned:
        # The workdir is sent for a plan too: the fingerprint that history is matched on
        # is computed from its files (and the submit that follows sends nothing).
        from orchestrator.spec import load_spec

        spec = load_spec(file, given)
        answer = self._with_workdir(spec, "/v1/plan", {
            "spec": Path(file).read_text(encoding="utf-8"), "file": str(Path(file).resolve()),
            **_given(given)})
        return read(PipelinePlan, answer) if "stages" in answer else read(Plan, answer)

    def _with_workdir(self, spec, path: str, body: dict) -> dict:
        """POST `body` with the job's workdir as {"upload": digest}, sent first unless the
        server has the same files. The server removes uploads nobody used for a while, so
        one it had a moment ago may be gone by the POST: then it is sent again, once."""
        from orchestrator.service import upload as up

        where = self._workdir(spec)
        if where is None:
            return self._json("POST", path, body)
        packed = up.pack(where, self.upload_max_bytes)
        try:
            for item in packed.left_out:
                note(self.on_note, f"not sent: {item}")
            self._offer(packed, where)
            body = {**body, "upload": packed.digest}
            try:
                return self._json("POST", path, body)
            except InputError as e:
                if e.message != up.missing(packed.digest).message:
                    raise
            note(self.on_note, "the server removed its copy of the workdir meanwhile (unused "
                  "for upload_keep_hours): sending it again")
            self._send(packed)
            return self._json("POST", path, body)
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
        packed.file.seek(0)
        with self._request("POST", "/v1/uploads", upload=packed) as resp:
            json.loads(resp.read())

    def jobs(self, limit: int = 50) -> list[records.JobRecord]:
        return [read(records.JobRecord, j) for j in self._json("GET", f"/v1/jobs?limit={int(limit)}")]

    def job(self, job_id: str) -> records.JobDetail:
        return read(records.JobDetail, self._json("GET", f"/v1/jobs/{self._id(job_id)}"))

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

    def cancel(self, job_id: str) -> records.CancelledJob:
        return read(records.CancelledJob, self._json("POST", f"/v1/jobs/{self._id(job_id)}/cancel"))

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
        return read(records.Schedule, self._json("DELETE", f"/v1/schedules/{self._id(sched_id)}"))


def _given(given: Optional[Overrides]) -> dict:
    """The command line's --env / --secret values for the request body (none: no keys)."""
    if not given:
        return {}
    return {k: v for k, v in (("env", given.envs), ("secrets", given.secrets)) if v}
