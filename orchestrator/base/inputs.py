"""Checks shared by the job file and the settings: which files orch reads, storage URIs,
and how a bad value is quoted in a message."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any, Optional

# S3's (and MinIO's) bucket characters; their 3-character minimum is left to S3 to say.
_S3_BUCKET_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$")


def clip(value: Any, limit: int = 80, quote: bool = True) -> str:
    """A value as shown in a message (repr'd unless `quote` is False), cut to `limit`
    characters: a pasted megabyte must not become the message."""
    text = repr(value) if quote else str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def file_kind(mode: int) -> Optional[str]:
    """What a non-regular file is, in words; None for a regular file."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


class NotRegularFile(Exception):
    """The path is a FIFO, a device, a directory or a socket; the message says which."""


def read_regular(path: Path, limit: int) -> bytes:
    """Up to `limit` bytes of a regular file. Anything else raises NotRegularFile before
    it is opened (a FIFO without a writer blocks, a device may never end or may act on
    being opened); the open never blocks, and what was opened is checked again, in case
    the path was swapped in between."""
    kind = file_kind(os.stat(path).st_mode)
    if kind is None:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            kind = file_kind(os.fstat(fd).st_mode)
            if kind is None:
                return f.read(limit)
    raise NotRegularFile(kind)


def storage_problem(v: str, *, local: bool = True) -> Optional[str]:
    """Why `v` is not a checkpoint storage orch's runner can write and `orch artifacts`
    can read (an absolute local path, or s3://bucket/prefix), or None. `local` False: only
    s3:// (a cloud VM's own disk is gone with the VM)."""
    forms = "an absolute path (/mnt/ckpt, ~/ckpt) or s3://bucket/prefix" if local else \
        "s3://bucket/prefix"
    if "\x00" in v:
        return "contains a NUL character (\\0)"
    if "://" in v:
        scheme, _, rest = v.partition("://")
        if scheme != "s3":
            return (f"{clip(v)}: orch writes checkpoints to {forms}, not to {scheme[:20]}:// "
                    "(orch artifacts and resume read only those)")
        bucket = rest.split("/", 1)[0]
        if not _S3_BUCKET_RE.match(bucket) or ".." in bucket:
            return (f"{clip(v)}: {clip(bucket)} is not an S3 bucket name (lowercase "
                    "letters, digits, '.' or '-', at most 63); write s3://bucket/prefix")
        return None
    if not local:
        return f"{clip(v)} is a path on this machine; a cloud job needs {forms}"
    if not v.startswith(("/", "~")):
        return (f"{clip(v)} is a relative path, which Ray Train cannot store to; write "
                f"{forms}")
    return None
