"""What `orch doctor --repair-store` did (`service.doctor.repair_store`), typed for the CLI
that says it. `--json` prints the service's answer as it is."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow")


class TableSalvage(_Answer):
    """One table of the damaged store: rows saved, unreadable and left out."""
    salvaged: int = 0
    unreadable: int = 0
    dropped: int = 0  # readable, but what it belongs to was lost, or a duplicate
    more_may_be_lost: bool = False  # unreadable at the end, so not counted
    revoked: int = 0  # tokens only
    paused: int = 0  # schedules only

    @property
    def gone(self) -> bool:
        """Whether any of its rows were lost."""
        return self.unreadable > 0 or self.more_may_be_lost


class LostSchedule(_Answer):
    id: str
    name: Optional[str] = None


class StoreRepair(_Answer):
    """The repair: refused (`done` False, `reason`), or where the store went and what came
    back of each table."""
    done: bool
    reason: str = ""
    moved_to: str = ""
    new_store: str = Field("", alias="store")  # where the salvaged store is
    jobs: int = 0
    events: int = 0
    tables: dict[str, TableSalvage] = {}
    lost_token_names: list[str] = []
    lost_schedules: list[LostSchedule] = []

    def table(self, name: str) -> TableSalvage:
        return self.tables.get(name) or TableSalvage()
