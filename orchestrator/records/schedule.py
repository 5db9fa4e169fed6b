"""A cron schedule as the store keeps it: `ScheduleRow`, read leniently from its row.

What a user sees of one is `records.Schedule.from_row(row, ...)` (no job file text); the
server's cron loop, the upload collector and the rules that pause or remove one read this.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field


class ScheduleRow(BaseModel):
    """A schedule's columns, its job file as the store keeps it (`spec` redacted,
    `source_text` free of secret values). Columns a newer orch adds are left out."""
    model_config = ConfigDict(extra="ignore")
    id: str
    name: str
    owner: Optional[str] = None
    cron: str
    spec: dict[str, Any] = Field(default_factory=dict)
    source_text: str = ""
    source_file: Optional[str] = None
    priority: int = 0
    created_at: Optional[float] = None
    next_at: Optional[float] = None  # its next slot (epoch seconds, UTC)
    last_slot: Optional[float] = None
    paused: bool = False
