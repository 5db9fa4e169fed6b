"""API tokens: made, hashed and checked here, as pure functions the server and tests share.
Who a token names is a `records.caller.Caller`; what they may change, `may_change` there.

A token is 32 random bytes, URL-safe, shown once; the store keeps only its sha256, so a
copy of the store grants nothing.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from typing import Optional

from orchestrator.base.errors import OrchError

PREFIX = "orch_"  # tells a reader (or a secret scanner) what the string is
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,62}$")


class Unauthorized(OrchError):
    """No token, or one the store does not know (HTTP 401)."""

    exit_code = 2


def new_token() -> tuple[str, str]:
    """(token, its hash): the token for the user, once; the hash for the store."""
    token = PREFIX + secrets.token_urlsafe(32)
    return token, hash_token(token)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def check_name(name: str) -> Optional[str]:
    """Why `name` cannot name a token (it becomes the owner of every job it submits)."""
    if not _NAME.match(name):
        return ("use letters, digits, '.', '_', '@' or '-', starting with a letter or digit, "
                "at most 63 characters")
    return None


def bearer(header: Optional[str]) -> Optional[str]:
    """The token in an `Authorization: Bearer <token>` header; None when there is none."""
    if not header:
        return None
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() != "bearer" or not value or " " in value:
        return None
    return value
