"""Runs jobs on a Ray cluster through the Ray Jobs API: the local instance or an on-prem one."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets as _random
import shlex
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

from jobs import secret_env
from orchestrator.base.errors import BackendError
from orchestrator.base.preemption import job_of
from providers.base import Backend, BackendState, HasCapacity, Launch, ShipsSecrets
from providers.ray_package import plain_package

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

    from providers.ray_cluster import ClusterSnapshot

# How long a read of a job's state or log waits for Ray's dashboard.
_READ_TIMEOUT_S = 30.0
# How long a package upload or a job's submission waits for it.
_SEND_TIMEOUT_S = 120.0
_AGENT_WAIT_S = 30.0  # a Ray started just now: its job agent registers within seconds

# Ray's job states to orch's. STOPPED is what Ray calls a job stopped on request.
_STATES = {"PENDING": "PENDING", "RUNNING": "RUNNING", "SUCCEEDED": "SUCCEEDED",
           "FAILED": "FAILED", "STOPPED": "CANCELLED"}


class RayJobsProvider(Backend, HasCapacity, ShipsSecrets):
    """A Ray cluster's Jobs API at `address`; `hint` says what to check when it fails."""

    def __init__(self, name: str, address: str, headers: Optional[dict] = None,
                 hint: str = "check that the Ray cluster is running"):
        self.name = name
        self.address = address
        self.headers = headers or {}
        self.hint = hint
        self._client: Optional[JobSubmissionClient] = None

    def _connect(self) -> JobSubmissionClient:
        if self._client is None:
            from ray.job_submission import JobSubmissionClient

            try:
                self._client = JobSubmissionClient(self.address, headers=self.headers)
            except Exception as e:  # ConnectionError, AuthenticationError, version mismatch
                raise BackendError(f"cannot reach Ray at {self.address}: {_short(e)}", self.hint) from None
        return self._client

    def prepare(self) -> None:
        """Ray answers at `address`: its version read as plain HTTP. Ray's client (its import
        about 1.0-1.3 s of each submit on 2 cores) is made only for a job whose own
        working_dir it packs."""
        try:
            doc = self._read("/api/version", "its version")
        except BackendError as e:
            raise BackendError(f"cannot reach Ray at {self.address}: {e.message.split(': ', 1)[-1]}",
                               self.hint) from None
        if doc is None or "ray_version" not in doc:
            raise BackendError(f"cannot reach Ray at {self.address}: it answers, but not as a "
                               "Ray dashboard", self.hint)

    def submit(self, launch: Launch) -> str:
        # Ray logs a runtime_env and shows it on its dashboard: secrets go in a file instead.
        public, hidden = launch.split_env()
        runtime_env: dict = {"env_vars": {**public, **self.job_env(public)}, **self.extra_runtime_env()}
        entrypoint = launch.entrypoint
        with self._secret_file(launch, hidden) as (working_dir, name):
            if working_dir:
                runtime_env["working_dir"] = working_dir
                if launch.excludes and working_dir == launch.workdir:
                    runtime_env["excludes"] = list(launch.excludes)
            if name:
                runtime_env["env_vars"] = {**runtime_env["env_vars"], secret_env.FILE_VAR: name}
                # By default every node unpacks a job's working_dir when its driver starts;
                # this way only the nodes that run a part of the job do (and remove the file).
                runtime_env["config"] = {**runtime_env.get("config", {}), "eager_install": False}
                entrypoint = self.with_secrets(entrypoint)
            submission_id = launch.submission_id or launch.job_id
            package = None
            if working_dir and "py_modules" not in runtime_env:
                package = plain_package(Path(working_dir), runtime_env.get("excludes", ()))
            if package is not None or (not working_dir and "py_modules" not in runtime_env):
                # Packed as Ray's client would and posted as plain HTTP: no Ray import.
                if package is not None:
                    runtime_env["working_dir"] = self._upload(package, f"job {launch.job_id}'s workdir")
                    runtime_env.pop("excludes", None)
                return self._post_job(launch, entrypoint, submission_id, runtime_env)
            client = self._connect()
            try:
                # The client packs and uploads the working_dir here, file included, before
                # it returns: the local copy can go as soon as this call ends.
                return client.submit_job(entrypoint=entrypoint,
                                         submission_id=launch.submission_id or launch.job_id,
                                         runtime_env=runtime_env,
                                         metadata=launch.tags.as_strings())
            except Exception as e:
                if "already exists" in str(e):  # submitted before a crash: never launch twice
                    return launch.submission_id or launch.job_id
                raise BackendError(f"Ray at {self.address} rejected job {launch.job_id}: {_short(e)}",
                                   self.hint) from None

    def _upload(self, package: bytes, what: str) -> str:
        """A working_dir package into the cluster's GCS, as Ray's client uploads one (PUT
        /api/packages/gcs/NAME): its URI."""
        name = f"_ray_pkg_{hashlib.sha256(package).hexdigest()[:32]}.zip"
        try:
            # Asked first, as Ray's client asks: the question pins the package in Ray for a
            # while (Ray's temporary reference), so it outlives a job that ends at once until
            # orch has recorded that end; and one Ray holds already is not sent again.
            self._send("GET", f"/api/packages/gcs/{name}", None, "application/octet-stream", what)
            return f"gcs://{name}"
        except _Refused as e:
            if e.code != 404:
                raise BackendError(f"Ray at {self.address} rejected {what}: "
                                   f"{_short(RuntimeError(e.text)) or f'HTTP {e.code}'}",
                                   self.hint) from None
        try:
            self._send("PUT", f"/api/packages/gcs/{name}", package, "application/octet-stream", what)
        except _Refused as e:
            raise BackendError(f"Ray at {self.address} rejected {what}: "
                               f"{_short(RuntimeError(e.text)) or f'HTTP {e.code}'}", self.hint) from None
        return f"gcs://{name}"

    def _post_job(self, launch: Launch, entrypoint: str, submission_id: str,
                  runtime_env: dict) -> str:
        """The job submitted as Ray's client submits it (POST /api/jobs/), as plain HTTP."""
        body = {"entrypoint": entrypoint, "submission_id": submission_id,
                "runtime_env": runtime_env,
                "metadata": launch.tags.as_strings()}
        try:
            doc = self._post_until_an_agent_answers(body, f"job {launch.job_id}")
        except _Refused as e:
            if "already exists" in e.text:  # submitted before a crash: never launch twice
                return submission_id
            raise BackendError(f"Ray at {self.address} rejected job {launch.job_id}: "
                               f"{_short(RuntimeError(e.text)) or f'HTTP {e.code}'}",
                               self.hint) from None
        answer = doc.get("submission_id") if isinstance(doc, dict) else None
        return answer if isinstance(answer, str) and answer else submission_id

    def _post_until_an_agent_answers(self, body: dict, what: str):
        """POST the job; while Ray's dashboard says it has no job agent yet (a Ray started a
        moment ago: its agent registers a few seconds after the dashboard answers), again,
        for up to _AGENT_WAIT_S. Ray's own client waited that out in its connection check."""
        deadline = time.monotonic() + _AGENT_WAIT_S
        while True:
            try:
                return self._send("POST", "/api/jobs/", json.dumps(body).encode(),
                                  "application/json", what)
            except _Refused as e:
                if "No available agent" not in e.text or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _send(self, method: str, path: str, data: Optional[bytes], content_type: str, what: str):
        """`method` `path` with `data` to Ray's dashboard; its JSON answer (None when it is
        not JSON). A refusal (HTTP 4xx/5xx) raises _Refused with Ray's text."""
        req = urllib.request.Request(self.address.rstrip("/") + path, data=data, method=method,
                                     headers={**self.headers, "Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, timeout=_SEND_TIMEOUT_S) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise _Refused(e.code, e.read(20_000).decode(errors="replace")) from None
        except (urllib.error.URLError, OSError) as e:
            raise BackendError(f"cannot send {what} to Ray at {self.address}: "
                               f"{getattr(e, 'reason', e)}", self.hint) from None
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return None

    def job_env(self, public: dict) -> dict:
        """What the job's environment carries beside its own `public` values: nothing here."""
        return {}

    def extra_runtime_env(self) -> dict:
        """What every job's runtime_env carries beside its env and workdir: nothing here,
        where the runner is installed with orch (a local Ray)."""
        return {}

    def with_secrets(self, entrypoint: str) -> str:
        """`entrypoint` started through the runner's secret_env, which takes the values out
        of their file; here under this process's Python (a local Ray runs the same
        interpreter, with the runner on its path)."""
        from providers.runner_package import module

        return f"{shlex.quote(sys.executable)} -m {module('secret_env')} -- {entrypoint}"

    @contextlib.contextmanager
    def _secret_file(self, launch: Launch, hidden: dict) -> Iterator[tuple[Optional[str], Optional[str]]]:
        """(working_dir, file name) for the job: the values in a 0600 file inside its
        workdir, or inside a temporary working_dir of their own when it has none; the file
        (or that directory) is removed when the submit is done."""
        if not hidden:
            with _own_package(launch):
                yield launch.workdir, None
            return
        name = f".orch-env-{_random.token_hex(8)}"
        if launch.workdir:
            path = Path(launch.workdir) / name
            try:
                secret_env.write(path, hidden)
            except OSError as e:
                raise BackendError(f"cannot write job {launch.job_id}'s secret values into its "
                                   f"workdir {launch.workdir}: {e.strerror}",
                                   "the workdir must be writable by orch while it submits") from None
            try:
                yield launch.workdir, name
            finally:
                path.unlink(missing_ok=True)
            return
        tmp = Path(tempfile.mkdtemp(prefix="orch-env-"))  # mode 0700
        try:
            secret_env.write(tmp / name, hidden)
            yield str(tmp), name
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _read(self, path: str, what: str) -> Optional[dict]:
        """GET `path` of the Jobs API as plain HTTP (the reads `orch status` and `orch logs`
        make: Ray's client imports Ray first, about 1 s of each command on 2 cores); None
        when Ray answers 404 (it has no such job)."""
        req = urllib.request.Request(self.address.rstrip("/") + path, headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=_READ_TIMEOUT_S) as r:
                doc = json.loads(r.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise BackendError(f"cannot read {what} from Ray at {self.address}: HTTP {e.code}",
                               self.hint) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise BackendError(f"cannot read {what} from Ray at {self.address}: "
                               f"{getattr(e, 'reason', e)}", self.hint) from None
        if not isinstance(doc, dict):
            raise BackendError(f"cannot read {what} from Ray at {self.address}: not a job's JSON",
                               self.hint)
        return doc

    def state(self, backend_id: str, info: Optional[dict] = None) -> BackendState:
        job = self._read(f"/api/jobs/{urllib.parse.quote(backend_id, safe='')}", f"job {backend_id}")
        if job is None:
            return BackendState("FAILED", f"Ray at {self.address} has no job {backend_id}",
                                unknown=True)
        raw = job.get("message")
        raw = raw if isinstance(raw, str) else None
        exit_code = job.get("driver_exit_code")
        exit_code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
        status = _STATES.get(str(job.get("status")), "FAILED")
        message = _without_log_tail(raw)
        if status == "FAILED" and exit_code is not None and "exit code" not in (message or ""):
            message = f"{message} (exit code {exit_code})"
        if status == "FAILED" and message != raw:
            message = f"{message}; its output: `orch logs {job_of(backend_id)}`"
        # Ray's own clock for when the job held the cluster: what the ledger prices.
        times = {k: t / 1000.0 for k, t in (("backend_start", job.get("start_time")),
                                             ("backend_end", job.get("end_time")))
                 if isinstance(t, (int, float)) and not isinstance(t, bool) and t}
        return BackendState(status, message, times or None, exit_code=exit_code)

    def logs(self, backend_id: str) -> str:
        doc = self._read(f"/api/jobs/{urllib.parse.quote(backend_id, safe='')}/logs",
                         f"logs of {backend_id}")
        if doc is None:
            raise BackendError(f"cannot read logs of {backend_id} from Ray at {self.address}: "
                               "it has no such job", self.hint)
        text = doc.get("logs")
        return text if isinstance(text, str) else ""

    def capacity(self) -> ClusterSnapshot:
        """What the cluster holds and runs now, over its dashboard."""
        from providers.ray_cluster import snapshot

        return snapshot(self.address, self.headers)

    def forget_secrets(self, backend_id: str) -> None:
        """The job's working_dir package, which held its secret file, overwritten in the
        cluster's GCS by an empty one (the Jobs API's package upload replaces a key): the
        driver puts it back without the file when it starts (jobs/package_scrub.py), but a
        job stopped or failed before its driver ran left it whole."""
        with contextlib.suppress(Exception):
            job = self._read(f"/api/jobs/{urllib.parse.quote(backend_id, safe='')}", f"job {backend_id}")
            env = (job or {}).get("runtime_env") or {}
            uri = env.get("working_dir")
            if not (isinstance(uri, str) and uri.startswith("gcs://")
                    and secret_env.FILE_VAR in (env.get("env_vars") or {})):
                return
            protocol, name = uri.split("://", 1)
            req = urllib.request.Request(f"{self.address}/api/packages/{protocol}/{name}",
                                         data=_EMPTY_ZIP, method="PUT", headers=self.headers)
            urllib.request.urlopen(req, timeout=10).close()

    def cancel(self, backend_id: str) -> None:
        try:
            self._connect().stop_job(backend_id)
        except BackendError:
            raise
        except Exception as e:
            raise BackendError(f"cannot stop {backend_id} on Ray at {self.address}: {_short(e)}",
                               self.hint) from None


class _Refused(Exception):
    """Ray's dashboard answered a request with an HTTP error: its code and text."""

    def __init__(self, code: int, text: str):
        super().__init__(f"HTTP {code}: {text}")
        self.code = code
        self.text = text


# A zip archive with no entries: its end-of-central-directory record alone.
_EMPTY_ZIP = b"PK\x05\x06" + bytes(18)


def _short(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[-1] if text else type(e).__name__


def _without_log_tail(message: Optional[str]) -> Optional[str]:
    """Ray's message without the job's output it quotes when the entrypoint fails ("last
    available logs (truncated to 20,000 chars): ..."): that output is the job's log, which
    orch keeps and shows redacted; a copy in a status message would be kept and shown
    everywhere a message is."""
    if not message:
        return message
    cut = message.find(", last available logs")
    if cut < 0:
        cut = message.find("last available logs")
    return message[:cut].rstrip(" ,:\n") if cut >= 0 else message


@contextlib.contextmanager
def _own_package(launch: Launch) -> Iterator[None]:
    """A `run:` job's workdir made a package of its own while it is submitted (a file with
    its id in it, removed after): Ray unpacks one folder per package content and hands it to
    every job of that content, where a `train:` job's workers write (its snapshot.pt was
    copied into the next `run:` job's fresh folder, which resumed from it). Where the
    workdir is not writable the job shares its unpacked folder, as before."""
    from jobs.request import ENV_VAR

    if not launch.workdir or ENV_VAR in launch.env:
        yield
        return
    path = Path(launch.workdir) / f".orch-job-{launch.job_id}"
    try:  # a new file, never through a link: the folder may be a client's (a root's, an upload)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    except OSError:
        yield
        return
    with os.fdopen(fd, "w") as f:
        f.write(launch.job_id + "\n")
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
