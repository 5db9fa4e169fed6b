"""Uploads on the server: where they live, one arriving, and a job file pointed at one.

Each is unpacked in HOME/uploads/<sha256 of the archive>, until no job or schedule needs
it and it has not been used for `upload_keep_hours` (`orchestrator.service.upload_gc` removes it
then). It belongs to the users who sent it (`orchestrator.service.upload.owners`): to anyone else
it is not there, with the very error of an upload the server never had.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Callable, Optional

from orchestrator.base.errors import InputError
from orchestrator.service.upload import owners
from orchestrator.service.upload.headers import survey
from orchestrator.service.upload.limits import (
    DIGEST_PATTERN,
    ENTRY_BYTES,
    MAX_FILES,
    TooLarge,
    human,
)
from orchestrator.service.upload.unpacking import UNREADABLE, unpack, unreadable


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


def has(home: Path, digest: str, user: str, admin: bool = False) -> bool:
    """Whether the upload `digest` is here for `user` (its owner, or an admin)."""
    import re

    if not re.match(DIGEST_PATTERN, digest):
        return False
    root = uploads_root(home)
    return (root / digest).is_dir() and (admin or owners.owns(root, digest, user))


def folder(home: Path, digest: str, user: str, admin: bool = False) -> Path:
    """Where the upload `digest` is unpacked, marked as used now; InputError when this
    server does not have it for `user` (not there, or not theirs: the same error, so
    that nobody learns what others sent)."""
    path = uploads_root(home) / digest
    if not has(home, digest, user, admin) or not touch(path):
        raise missing(digest)
    return path


class Receiver:
    """An upload arriving in pieces: hashed and written to a private temporary file as it
    comes, refused as soon as it is over the limit, then unpacked under HOME/uploads and
    made `user`'s (within their quota: `quota` bytes, 0 for none)."""

    def __init__(self, home: Path, max_bytes: int, user: str, quota: int = 0,
                 keep_hours: float = 24.0, elsewhere: Optional[Callable[[str], int]] = None):
        self.root = uploads_root(home)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.max_bytes, self.user, self.quota, self.keep_hours = max_bytes, user, quota, keep_hours
        # What the user's uploads hold on every replica (the store's count, but the upload
        # given), where replicas share a store: the quota is the user's, not a replica's.
        self.elsewhere = elsewhere
        self.file = tempfile.TemporaryFile(dir=self.root)
        self.sha = hashlib.sha256()
        self.size = 0
        self.unpacked = 0  # what the quota counts of it (`counted`), once `finish` read it

    def refuse(self, size: int) -> TooLarge:
        return too_large(size, self.max_bytes)

    def write(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise self.refuse(self.size)
        self.sha.update(chunk)
        self.file.write(chunk)

    def finish(self) -> dict:
        """{"upload": digest, "existing": bool}: unpacked into HOME/uploads/<digest>, or
        already there ("existing": this user sent the same bytes before; from another
        user's, they are made an owner). The quota is checked on the archive's headers,
        before anything is unpacked."""
        digest = self.sha.hexdigest()
        final = self.root / digest
        if self.size == 0:
            raise InputError("the upload is empty", "send a tar.gz of the workdir as the body")
        if owners.owns(self.root, digest, self.user) and touch(final):
            record = owners.read(self.root, digest)
            self.unpacked = record.bytes if record else 0
            return {"upload": digest, "existing": True}
        self.file.seek(0)
        try:
            size = self.unpacked = counted(survey(self.file, self.max_bytes, MAX_FILES))
        except UNREADABLE as e:
            raise unreadable(e) from None
        if touch(final):  # sent by someone else: the sender owns it too, from now
            owners.claim(self.root, digest, self.user, size, self.quota, self.keep_hours,
                         self._elsewhere(digest))
            return {"upload": digest, "existing": False}
        # Over the quota: refused before unpacking (and checked again when claimed, after).
        owners.check(self.root, digest, self.user, size, self.quota, self.keep_hours,
                     self._elsewhere(digest))
        unpacking = self.root / f".unpacking-{uuid.uuid4().hex}"
        unpack(self.file, unpacking, self.max_bytes)
        os.utime(unpacking)  # unpacked now: the collector's "last used" starts here
        try:
            claimed = owners.claim(self.root, digest, self.user, size, self.quota, self.keep_hours,
                         self._elsewhere(digest))
        except BaseException:
            shutil.rmtree(unpacking, ignore_errors=True)
            raise
        try:
            os.rename(unpacking, final)
        except OSError:
            shutil.rmtree(unpacking, ignore_errors=True)
            if not final.is_dir():
                if claimed:
                    owners.release(self.root, digest, self.user)
                raise
        return {"upload": digest, "existing": False}

    def _elsewhere(self, digest: str) -> int:
        return self.elsewhere(digest) if self.elsewhere is not None and self.quota > 0 else 0

    def archive(self) -> bytes:
        """The bytes received, whole (to keep them where every replica reads them)."""
        self.file.seek(0)
        return self.file.read()

    def close(self) -> None:
        self.file.close()


def counted(survey) -> int:
    """What the quota counts of an upload: its files' bytes, and ENTRY_BYTES for each entry."""
    return survey.bytes + survey.entries * ENTRY_BYTES


def too_large(size: Optional[int], max_bytes: int) -> TooLarge:
    """An upload of `size` bytes (None: not known, over the limit) over `max_bytes`."""
    shown = human(size) if size else "over the limit"
    return TooLarge(f"the upload is {shown}; this server takes at most {human(max_bytes)}",
                    "leave files out of the workdir with a .orchignore, or raise "
                    "upload_max_mb (ORCH_UPLOAD_MAX_MB) on the server")


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
        if not node.flow_style:  # none: added as the last key, every other line where it was
            return text + ("" if text.endswith("\n") else "\n") + f"workdir: {json.dumps(path)}\n"
    raise ValueError("the job file has no workdir")


def with_upload(text: str, spec, home: Path, digest: str, user: str, admin: bool = False) -> str:
    """The job file's text run from the upload `digest` on this server, sent by `user`
    (or any, for an admin)."""
    path = folder(home, digest, user, admin)
    # A job file whose own code runs and that names no workdir runs from its folder, which
    # the client sends as the upload (spec.load.beside_its_file).
    own_code = spec.run is not None or (spec.train is not None and spec.train.entrypoint)
    if not isinstance(spec.workdir, str) and not (spec.workdir is None and own_code):
        raise spec.error("workdir", "an upload came with this job, but it has no workdir folder: "
                         "nothing would use it", "give workdir: in the job file, or send no upload")
    return set_workdir(text, str(path))
