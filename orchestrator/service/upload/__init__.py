"""A job's workdir sent by a client to `orch serve`: packed here, unpacked there, safely.

`packing` is the client's side (which files go, as a reproducible tar.gz whose sha256 names
its content); `unpacking` the server's, which trusts nothing in an archive, after `headers`
has read its tar headers first; `receive` where the server keeps uploads and points a job
file at one; `owners` whose each upload is, and each user's quota; `limits` what both ends
share.
"""

from __future__ import annotations

from orchestrator.service.upload.limits import (
    DIGEST_PATTERN,
    IGNORE_FILE,
    MAX_FILES,
    MiB,
    TooLarge,
    human,
    link_inside,
)
from orchestrator.service.upload.packing import (
    SKIP_DIRS,
    Entry,
    Packed,
    ignored,
    local_workdir,
    pack,
    read_ignore,
    scan,
)
from orchestrator.service.upload.receive import (
    Receiver,
    folder,
    has,
    missing,
    set_workdir,
    too_large,
    touch,
    uploads_root,
    with_upload,
)
from orchestrator.service.upload.unpacking import safe_name, unpack

__all__ = ["DIGEST_PATTERN", "IGNORE_FILE", "MAX_FILES", "SKIP_DIRS", "Entry", "MiB", "Packed",
           "Receiver", "TooLarge", "folder", "has", "human", "ignored", "link_inside",
           "local_workdir", "missing", "pack", "read_ignore", "safe_name", "scan", "set_workdir",
           "too_large", "touch", "unpack", "uploads_root", "with_upload"]
