"""What a job saved under its checkpoint storage: list it and download it, from S3 or a path.

S3 goes through boto3 (imported only here, only when needed) with credentials from boto3's
own chain; they never pass through orch, so no message here can contain them.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Optional

from orchestrator.base.errors import BackendError, InputError, NotFound

# (bytes done so far, bytes in all, the key being fetched)
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Artifact:
    key: str  # relative to the run's folder, '/'-separated
    size: int


def run_location(job_id: str, storage: Optional[str], run_name: Optional[str]) -> str:
    """Where Ray Train kept a job's run: its storage path joined with its run name (the
    job's id when it has none)."""
    if not storage:
        raise InputError(f"job {job_id} recorded no checkpoint storage",
                         "a job keeps its files where checkpoint.storage (or the target's "
                         "default) is a path; a train: job's checkpoints, without one, stay "
                         "in Ray's default folder on the cluster's nodes")
    return f"{storage.rstrip('/')}/{run_name or job_id}"


def checkpoint_dirs(items: list[Artifact]) -> list[str]:
    """The checkpoint folders among the keys, oldest first (Ray names them by time)."""
    return sorted({i.key.split("/", 1)[0] for i in items
                   if "/" in i.key and i.key.startswith("checkpoint_")})


def _split_s3(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri[len("s3://"):].partition("/")
    return bucket, prefix.strip("/") + "/"


def _safe_target(root: Path, key: str) -> Path:
    """The file a key is written to: never outside `root`, whatever the bucket holds."""
    parts = PurePosixPath(key).parts
    if not parts or ".." in parts or PurePosixPath(key).is_absolute():
        raise BackendError(f"refusing to download {key!r}: it would land outside {root}")
    return root.joinpath(*parts)


class LocalArtifacts:
    """A run folder on this machine's filesystem (local jobs, or a shared mount)."""

    def __init__(self, location: str):
        self.location = location
        self.root = Path(location).expanduser()

    def list(self, prefix: str = "") -> list[Artifact]:
        """The files under the folder; for a `run:` job's folder only those the job wrote
        or changed, not the copy of its workdir it was given (jobs/workspace.py)."""
        from jobs.workspace import copied_in

        if not self.root.is_dir():
            return []
        given = copied_in(self.root)
        out = []
        for dirpath, _, files in os.walk(self.root):
            for f in files:
                path = Path(dirpath) / f
                key = path.relative_to(self.root).as_posix()
                if not key.startswith(prefix):
                    continue
                if path.is_symlink():  # a link the job made may name any file of this machine
                    continue
                st = path.lstat()
                if given.get(key) != [st.st_size, st.st_mtime_ns]:
                    out.append(Artifact(key, st.st_size))
        return sorted(out, key=lambda a: a.key)

    def fetch(self, item: Artifact, dest: Path, progress: Callable[[int], None]) -> None:
        shutil.copyfile(self.root / item.key, dest)
        progress(item.size)


class S3Artifacts:
    """A run folder under an s3:// prefix, on AWS or an S3-compatible endpoint."""

    def __init__(self, location: str, endpoint_url: Optional[str] = None):
        self.location = location
        self.endpoint = endpoint_url
        self.bucket, self.prefix = _split_s3(location)
        self._client = None

    @property
    def where(self) -> str:
        return f"S3 endpoint {self.endpoint}" if self.endpoint else "AWS S3"

    def client(self):
        if self._client is None:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:
                raise BackendError("boto3 is not installed", "pip install boto3") from None
            # Short timeouts and few retries: an unreachable endpoint is reported in seconds.
            cfg = Config(connect_timeout=5, read_timeout=30, retries={"max_attempts": 2})
            # A session of its own: boto3's default one keeps the first credentials it found
            # for the life of the process (`orch serve`'s), whatever changed since.
            session = boto3.session.Session()
            self._client = session.client("s3", endpoint_url=self.endpoint, config=cfg)
        return self._client

    def list(self, prefix: str = "") -> list[Artifact]:
        out = []
        try:
            pages = self.client().get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self.prefix + prefix)
            for page in pages:
                for obj in page.get("Contents", []):
                    if not obj["Key"].endswith("/"):  # folder markers (pyarrow writes some)
                        out.append(Artifact(obj["Key"][len(self.prefix):], int(obj["Size"])))
        except Exception as e:
            raise self.error(e) from None
        return sorted(out, key=lambda a: a.key)

    def fetch(self, item: Artifact, dest: Path, progress: Callable[[int], None]) -> None:
        try:
            self.client().download_file(self.bucket, self.prefix + item.key, str(dest),
                                        Callback=progress)
        except Exception as e:
            raise self.error(e) from None

    def error(self, e: Exception) -> Exception:
        """One of orch's errors for a boto3 failure; built from the error's kind only, so
        nothing the SDK put in its message (a key id) reaches the user or a log."""
        from botocore import exceptions as bx

        where = f"s3://{self.bucket} on {self.where}"
        if isinstance(e, bx.NoCredentialsError):
            return BackendError(f"no AWS credentials for {where}",
                                "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE "
                                "(boto3's usual chain)")
        if isinstance(e, (bx.EndpointConnectionError, bx.ConnectTimeoutError)):
            return BackendError(f"cannot reach {self.where}",
                                "check ORCH_S3_ENDPOINT_URL and that the server is running"
                                if self.endpoint else "check the network")
        if isinstance(e, bx.ClientError):
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchBucket", "404"):
                return NotFound(f"no bucket {self.bucket!r} on {self.where}",
                                "check checkpoint.storage, and ORCH_S3_ENDPOINT_URL for "
                                "MinIO-like servers")
            if code in ("NoSuchKey",):
                return NotFound(f"an object under {self.location} went away while reading it")
            if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                        "ExpiredToken", "InvalidToken", "AllAccessDisabled"):
                return BackendError(f"access denied to {where} ({code})",
                                    "check the credentials in boto3's chain (AWS_PROFILE, "
                                    "AWS_ACCESS_KEY_ID, ...) and the bucket's policy")
            return BackendError(f"{where}: S3 error {code or 'unknown'}")
        if isinstance(e, bx.BotoCoreError):
            return BackendError(f"{where}: {type(e).__name__}")
        return e  # not the SDK's: a bug to see as it is


def open_location(location: str, endpoint_url: Optional[str] = None):
    if location.startswith("s3://"):
        return S3Artifacts(location, endpoint_url)
    if "://" in location:
        raise InputError(f"{location}: orch lists only local paths and s3:// storage")
    return LocalArtifacts(location)


def download(source, items: list[Artifact], dest: Path,
             progress: Optional[Progress] = None) -> list[Path]:
    """Fetch `items` into `dest`, keeping their folders; reports bytes as they arrive."""
    total, done, paths = sum(i.size for i in items), 0, []
    dest = Path(dest)
    for item in items:
        target = _safe_target(dest, item.key)
        target.parent.mkdir(parents=True, exist_ok=True)

        def advance(n: int, key: str = item.key) -> None:
            nonlocal done
            done += n
            if progress:
                progress(done, total, key)

        source.fetch(item, target, advance)
        paths.append(target)
    return paths
