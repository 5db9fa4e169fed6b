"""One page of jobs, filtered and sorted, with keyset paging: a page costs the same at the
100,000th job as at the first, because each page starts from where the last one ended (its
cursor: the sort key of its last row), read through an index, never past an OFFSET."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Optional

from orchestrator.base.errors import InputError

# sort name -> the columns it orders by, each descending or not; `id` last breaks ties.
SORTS: dict[str, tuple[tuple[str, bool], ...]] = {
    "created": (("created_at", True), ("id", True)),  # newest first
    "-created": (("created_at", False), ("id", False)),  # oldest first
    "name": (("name", False), ("id", False)),
}
FILTERS = ("status", "owner", "kind", "target")


@dataclass(frozen=True)
class JobQuery:
    """Which jobs, in which order, from where. Each filter is exact; `search` is a
    case-insensitive part of the name; `cursor` is the `next` of the page before."""
    limit: int = 50
    status: Optional[str] = None
    owner: Optional[str] = None
    kind: Optional[str] = None
    target: Optional[str] = None
    search: Optional[str] = None
    sort: str = "created"
    cursor: Optional[str] = None


def _bad_cursor() -> InputError:
    return InputError("cursor: not one this server handed out",
                      "start again without it; each page's X-Next-Cursor is the next one's")


def encode_cursor(sort: str, row: Any) -> str:
    key = [row[col] for col, _ in SORTS[sort]]
    return base64.urlsafe_b64encode(json.dumps([sort, key]).encode()).decode().rstrip("=")


def decode_cursor(sort: str, cursor: str) -> list:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        made_for, key = json.loads(raw)
    except (ValueError, TypeError):
        raise _bad_cursor() from None
    if made_for != sort or not isinstance(key, list) or len(key) != len(SORTS[sort]):
        raise InputError(f"cursor: made for sort {made_for!r}, not {sort!r}" if made_for != sort
                         else "cursor: not one this server handed out",
                         "start again without it when the sort changes")
    return key


def page_sql(q: JobQuery) -> tuple[str, list[Any]]:
    """The SELECT for one page (one row more than `limit`: whether there is a next page)."""
    if q.sort not in SORTS:
        raise InputError(f"sort {q.sort!r}: not a sort", f"use one of: {', '.join(SORTS)}")
    where: list[str] = []
    args: list[Any] = []
    for col in FILTERS:
        value = getattr(q, col)
        if value is not None:
            where.append(f"{col} = ?")
            args.append(value)
    if q.search:
        # A part of the name, literally: '_' and '%' match only themselves.
        escaped = q.search.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        where.append("lower(name) LIKE ? ESCAPE '\\'")
        args.append(f"%{escaped}%")
    cols = SORTS[q.sort]
    if q.cursor:
        key = decode_cursor(q.sort, q.cursor)
        # (a, b) after (x, y) in this order: a beyond x, or a = x and b beyond y. Both sort
        # columns of a sort go the same way, so this is a row comparison an index serves.
        (c1, desc), (c2, _) = cols
        op = "<" if desc else ">"
        where.append(f"({c1} {op} ? OR ({c1} = ? AND {c2} {op} ?))")
        args.extend((key[0], key[0], key[1]))
    sql = "SELECT * FROM jobs"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY " + ", ".join(f"{c} {'DESC' if d else 'ASC'}" for c, d in cols) + " LIMIT ?"
    args.append(q.limit + 1)
    return sql, args
