"""A first pass over an upload's tar headers, before `tarfile` reads anything.

`tarfile` reads a GNU long name or a pax header whole into memory, and the unpacker counts
entries and bytes only while it writes them; so this reads the decompressed stream itself,
512-byte header by header, in constant memory, skipping file data, and refuses an
oversized extended header, too many entries or too many bytes before a byte is written.
It finds each header where `tarfile` does (its `_proc_builtin`, `_proc_gnulong` and
`_proc_pax`, as in CPython 3.11): the same offsets for every header tarfile would read;
what it cannot follow the same way (a sparse file, a global header that sets a size, a
damaged header, a stream cut short) it refuses, so it never sees less than tarfile.
"""

from __future__ import annotations

import gzip
import re
import tarfile
from dataclasses import dataclass
from typing import BinaryIO, Optional

from orchestrator.base.errors import InputError
from orchestrator.service.upload.limits import MiB, TooLarge, human

BLOCK = 512
META_MAX = 64 * 1024  # one long name, long link or pax header: a real one is a few hundred bytes
META_TOTAL = 64 * MiB  # all of them together (100,000 long paths take about 20 MiB)
META_RUN = 8  # extended headers in a row before one entry (tarfile recurses through them)
_LONG = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
_PAX = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
_RECORD = re.compile(rb"(\d+) ([^=]+)=")  # a pax record's start, as tarfile matches it


@dataclass(frozen=True)
class Survey:
    entries: int
    bytes: int  # the data of the files (and of anything tarfile would skip as data)


def too_many(max_files: int) -> TooLarge:
    return TooLarge(f"the upload holds over {max_files:,} entries",
                    "leave files out of the workdir with a .orchignore")


def too_big(max_bytes: int) -> TooLarge:
    return TooLarge(f"the upload's files are over the limit of {human(max_bytes)}",
                    "leave files out of the workdir with a .orchignore, or raise "
                    "upload_max_mb on the server")


def _refused(what: str) -> InputError:
    return InputError(f"the upload is refused: {what}",
                      "an upload holds files, folders and links with ordinary names; "
                      "`orch submit` makes such archives")


def _number(field: bytes) -> int:
    """A numeric header field as tarfile reads it: octal text, or base-256 binary."""
    if field[:1] in (b"\x80", b"\xff"):
        n = int.from_bytes(field[1:], "big")
        return n - 256 ** (len(field) - 1) if field[0] == 0xFF else n
    try:
        return int(field.split(b"\0", 1)[0].decode("ascii").strip() or "0", 8)
    except ValueError:
        raise tarfile.ReadError("a header has a field that is not a number") from None


def _checksum_ok(buf: bytes) -> bool:
    rest = buf[:148] + buf[156:]
    unsigned = 256 + sum(rest)
    high = len(rest) - len(rest.translate(None, bytes(range(128))))  # bytes >= 128
    return _number(buf[148:156]) in (unsigned, unsigned - 256 * high)


def _read(stream: gzip.GzipFile, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise tarfile.ReadError("unexpected end of data")
    return data


def _skip(stream: gzip.GzipFile, n: int) -> None:
    while n > 0:
        n -= len(_read(stream, min(n, MiB)))


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _pax(buf: bytes) -> dict[str, str]:
    """A pax header's records, parsed as tarfile parses them (stopping where the regular
    expression stops matching)."""
    out, pos = {}, 0
    while (m := _RECORD.match(buf, pos)) is not None:
        length = int(m.group(1))
        if length == 0:
            raise tarfile.ReadError("a pax header is damaged")
        value = buf[m.end(2) + 1:m.start(1) + length - 1]
        out[m.group(2).decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return out


def _pax_size(records: dict[str, str]) -> Optional[int]:
    if any(k.startswith("GNU.sparse.") for k in records):
        raise _refused("it holds a sparse file; only files, folders and links are allowed")
    if "size" not in records:
        return None
    try:
        size = int(records["size"])
    except ValueError:
        return 0  # what tarfile makes of it
    if size < 0:
        raise tarfile.ReadError("a pax header gives a negative size")
    return size


def survey(archive: BinaryIO, max_bytes: int, max_files: int) -> Survey:
    """Read a tar.gz's headers from where `archive` stands (left there again after): its
    entries and bytes, or TooLarge / InputError / tarfile.ReadError (and gzip's errors)."""
    start = archive.tell()
    try:
        with gzip.GzipFile(fileobj=archive, mode="rb") as stream:
            return _walk(stream, max_bytes, max_files)
    finally:
        archive.seek(start)


def _walk(stream: gzip.GzipFile, max_bytes: int, max_files: int) -> Survey:
    entries = total = meta_total = run = 0
    size_override: Optional[int] = None  # from the first pax header before the entry
    while True:
        buf = stream.read(BLOCK)
        if len(buf) < BLOCK or buf.count(0) == BLOCK:
            if buf and buf.count(0) != BLOCK:
                raise tarfile.ReadError("unexpected end of data")
            return Survey(entries, total)  # the end (tarfile stops at the first empty block)
        if not _checksum_ok(buf):
            raise tarfile.ReadError("a header's checksum is wrong")
        kind, size = buf[156:157], _number(buf[124:136])
        if size < 0:
            raise tarfile.ReadError("a header gives a negative size")
        if kind in _LONG or kind in _PAX:
            run += 1
            if run > META_RUN:
                raise _refused(f"over {META_RUN} extended headers in a row")
            what = "long name" if kind in _LONG else "pax"
            if size > META_MAX:
                raise _refused(f"a {what} header of {human(size)}; at most {human(META_MAX)}")
            meta_total += size
            if meta_total > META_TOTAL:
                raise _refused(f"its extended headers are over {human(META_TOTAL)} in all")
            data = _read(stream, _padded(size))[:size]
            if kind in _PAX:
                found = _pax_size(_pax(data))
                if kind == tarfile.XGLTYPE and found is not None:
                    raise _refused("a global pax header sets a size")
                if size_override is None and kind != tarfile.XGLTYPE:
                    size_override = found  # the outermost one wins, as in tarfile
            continue
        if kind == tarfile.GNUTYPE_SPARSE:
            raise _refused("it holds a sparse file; only files, folders and links are allowed")
        entries += 1
        if entries > max_files:
            raise too_many(max_files)
        if size_override is not None:
            size = size_override
        name = buf[:100].split(b"\0", 1)[0]
        if kind == tarfile.AREGTYPE and name.endswith(b"/"):
            kind = tarfile.DIRTYPE  # an old-style folder: tarfile reads no data after it
        if kind in tarfile.REGULAR_TYPES or kind not in tarfile.SUPPORTED_TYPES:
            total += size
            if total > max_bytes:
                raise too_big(max_bytes)
            _skip(stream, _padded(size))
        run, size_override = 0, None
