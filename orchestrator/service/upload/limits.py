"""What both ends of an upload share: its limits, the refusal for size, the rule for links."""

from __future__ import annotations

import posixpath

from orchestrator.base.errors import InputError

MiB = 1 << 20
MAX_FILES = 100_000
# What the quota counts for each entry (file, folder, link) on top of its bytes: the disk an
# entry takes at least (a block and an inode). An upload of 100,000 empty folders took
# 393 MiB and 100,005 inodes of the server's disk, and counted as 0 bytes.
ENTRY_BYTES = 4096
IGNORE_FILE = ".orchignore"
DIGEST_PATTERN = r"^[0-9a-f]{64}$"


class TooLarge(InputError):
    """An upload over the size or file-count limit (HTTP 413)."""


def human(n: float) -> str:
    if n < 1024:
        return f"{int(n)} bytes"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"
    raise AssertionError("unreachable")


def link_inside(rel: str, target: str) -> bool:
    """Whether a link at `rel` (relative to the top) pointing at `target` stays inside, by
    its text alone."""
    if not target or target.startswith("/"):
        return False
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    return joined != ".." and not joined.startswith("../")
