"""Uploads on the server: where they live, one arriving, and a job file pointed at one.

Each is unpacked in HOME/uploads/<sha256 of the archive>, until no job or schedule needs
it and it has not been used for `upload_keep_hours` (`orchestrator.upload_gc` removes it
then).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path

from orchestrator.errors import InputError
from orchestrator.upload.limits import DIGEST_PATTERN, TooLarge, human
from orchestrator.upload.unpacking import unpack


def uploads_root(home: Path) -> Path:
    return Path(home) / "uploads"


def missing(digest: str) -> InputError:
    """The error for an upload this server does not have (never had, or removed as unused):
    a client that gets it sends the workdir again (`Remote` does, once)."""
    return InputError(f"upload {digest[:16]}... is not on this server",
                      "send the workdir first: POST /v1/uploads (orch submit does)")


def touch(path: Path) -> bool:
    """Mark an upload as used now (its mtime is its "last used" for the collector, see
    `upload_gc`); False when it is not there (removed this instant)."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    except OSError:
        pass  # not ours to touch (another user's folder): it is there all the same
    return path.is_dir()


def folder(home: Path, digest: str) -> Path:
    """Where the upload `digest` is unpacked, marked as used now; InputError when this
    server does not have it."""
    import re

    path = uploads_root(home) / digest
    if not re.match(DIGEST_PATTERN, digest) or not touch(path):
        raise missing(digest)
    return path


class Receiver:
    """An upload arriving in pieces: hashed and written to a private temporary file as it
    comes, refused as soon as it is over the limit, then unpacked under HOME/uploads."""

    def __init__(self, home: Path, max_bytes: int):
        self.root = uploads_root(home)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.max_bytes = max_bytes
        self.file = tempfile.TemporaryFile(dir=self.root)
        self.sha = hashlib.sha256()
        self.size = 0

    def refuse(self, size: int) -> TooLarge:
        return TooLarge(f"the upload is {human(size)}; this server takes at most "
                        f"{human(self.max_bytes)}", "leave files out of the workdir with a "
                        ".orchignore, or raise upload_max_mb (ORCH_UPLOAD_MAX_MB) on the server")

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise self.refuse(self.size)
        self.sha.update(chunk)
        self.file.write(chunk)

    def finish(self) -> dict:
        """{"upload": digest, "existing": bool}: unpacked into HOME/uploads/<digest>, or
        already there (the same bytes were sent before)."""
        digest = self.sha.hexdigest()
        final = self.root / digest
        if touch(final):  # False: never here, or removed this instant (unpacked again below)
            return {"upload": digest, "existing": True}
        if self.size == 0:
            raise InputError("the upload is empty", "send a tar.gz of the workdir as the body")
        self.file.seek(0)
        unpacking = self.root / f".unpacking-{uuid.uuid4().hex}"
        unpack(self.file, unpacking, self.max_bytes)
        os.utime(unpacking)  # unpacked now: the collector's "last used" starts here
        try:
            os.rename(unpacking, final)
        except OSError:
            shutil.rmtree(unpacking, ignore_errors=True)
            if not final.is_dir():
                raise
            return {"upload": digest, "existing": True}  # the same bytes, sent meanwhile
        return {"upload": digest, "existing": False}

    def close(self) -> None:
        self.file.close()


# -- the job file: its workdir pointed at the upload ------------------------------------

def set_workdir(text: str, path: str) -> str:
    """The job file's text with its top-level `workdir:` value replaced by `path`, every
    other byte (comments, line numbers) kept; ValueError when it has no workdir."""
    import json

    import yaml

    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == "workdir":
                start, end = value.start_mark.index, value.end_mark.index
                tail = "\n" if text[start:end].endswith("\n") else ""  # a block scalar's end
                return text[:start] + json.dumps(path) + tail + text[end:]
    raise ValueError("the job file has no workdir")


def with_upload(text: str, spec, home: Path, digest: str) -> str:
    """The job file's text run from the upload `digest` on this server."""
    path = folder(home, digest)
    if not isinstance(spec.workdir, str):
        raise spec.error("workdir", "an upload came with this job, but it has no workdir folder: "
                         "nothing would use it", "give workdir: in the job file, or send no upload")
    return set_workdir(text, str(path))
