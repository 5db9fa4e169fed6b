"""Who asks the service to change a job or a schedule, and the one rule for who may."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Caller:
    """Who made a request: the token's name, and whether it is an admin's."""

    name: str
    admin: bool = False


def may_change(caller: Caller, owner: Optional[str]) -> bool:
    """A user cancels the jobs and changes the schedules they submitted; an admin any. One
    submitted embedded (no owner) belongs to whoever runs the server: admins only."""
    return caller.admin or (owner is not None and owner == caller.name)
