"""API tokens: made, hashed and checked here, as pure functions the server and tests share.

A token is 32 random bytes, URL-safe, shown once; the store keeps only its sha256, so a
copy of the store grants nothing.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from typing import Optional

from orchestrator.base.errors import OrchError

PREFIX = "orch_"  # tells a reader (or a secret scanner) what the string is
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,62}$")


class Unauthorized(OrchError):
    """No token, or one the store does not know (HTTP 401)."""

    exit_code = 2


class Forbidden(OrchError):
    """Another user's job or schedule (HTTP 403)."""

    exit_code = 2


@dataclass(frozen=True)
class Caller:
    """Who made a request: the token's name, and whether it is an admin's."""

    name: str
    admin: bool = False


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


def may_cancel(caller: Caller, owner: Optional[str]) -> bool:
    """A user cancels the jobs they submitted; an admin any job. A job submitted embedded
    (no owner) belongs to whoever runs the server: admins only."""
    return caller.admin or (owner is not None and owner == caller.name)
