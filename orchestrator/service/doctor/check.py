"""What every doctor check returns, and the guard that turns a crash into one more finding."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Optional

from orchestrator.base.errors import OrchError


@dataclass(frozen=True)
class Check:
    name: str
    ok: Optional[bool]  # None: skipped (not configured)
    detail: str
    fix: Optional[str] = None

    @property
    def state(self) -> str:
        return "skipped" if self.ok is None else "ok" if self.ok else "problem"

    def as_dict(self) -> dict:
        return {**asdict(self), "state": self.state}


def guarded(name: str, fn: Callable[[], list[Check]]) -> list[Check]:
    """`fn()`'s checks, or one problem saying why they could not be made."""
    try:
        return fn()
    except OrchError as e:
        return [Check(name, False, e.message, e.hint)]
    except Exception as e:  # doctor reports what it could not check instead of crashing
        return [Check(name, False, f"could not check: {type(e).__name__}: {e}",
                      "this is a bug in orch's doctor; please report it")]
