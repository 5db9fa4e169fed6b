"""API tokens of `orch serve`, each kept only as the sha256 of its text: the store never holds a
usable one."""

from __future__ import annotations

import time
from typing import Optional

from orchestrator.base.errors import InputError, NotFound
from orchestrator.store.base import Row, StoreBase, iso


class NameTaken(InputError):
    """A name that must be unique (a token's) is in use."""


class Tokens(StoreBase):
    def add_token(self, name: str, token_hash: str, admin: bool = False) -> dict:
        """Record a token by its hash. A revoked token's name may be given a new token; a
        live one's may not (NameTaken)."""
        now = time.time()
        with self._write() as db:
            row = db.execute("SELECT revoked_at FROM tokens WHERE name = ?", (name,)).fetchone()
            if row is not None and row["revoked_at"] is None:
                raise NameTaken(f"a token named {name!r} exists",
                                f"`orch token revoke {name}` first to replace it, or choose "
                                "another name")
            if row is not None:
                db.execute("UPDATE tokens SET hash = ?, admin = ?, created_at = ?, revoked_at = "
                           "NULL WHERE name = ?", (token_hash, int(admin), now, name))
            else:
                db.execute("INSERT INTO tokens (name, hash, admin, created_at) VALUES (?, ?, ?, ?)",
                           (name, token_hash, int(admin), now))
        return self.token(name)

    def token(self, name: str) -> dict:
        row = self._db.execute("SELECT * FROM tokens WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFound(f"no token named {name!r}", "`orch token list` shows the tokens")
        return _token(row)

    def token_by_hash(self, token_hash: str) -> Optional[dict]:
        """The live token with this hash; None for an unknown or revoked one."""
        row = self._db.execute("SELECT * FROM tokens WHERE hash = ? AND revoked_at IS NULL",
                               (token_hash,)).fetchone()
        return _token(row) if row else None

    def tokens(self) -> list[dict]:
        return [_token(r) for r in self._db.execute("SELECT * FROM tokens ORDER BY name")]

    def revoke_token(self, name: str) -> dict:
        self.token(name)  # NotFound for a name never given
        with self._write() as db:
            db.execute("UPDATE tokens SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL",
                       (time.time(), name))
        return self.token(name)


def _token(row: Row) -> dict:
    return {"name": row["name"], "admin": bool(row["admin"]), "created_at": iso(row["created_at"]),
            "revoked_at": iso(row["revoked_at"])}
