"""A replica of `orch serve` as the store's `replicas` table keeps it (`Store.replicas`)."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict


class ReplicaRow(BaseModel):
    """One live replica: its id (host/pid/start), internal URL, role and times (epoch s).
    What a caller sees of it is `records.page.Replica`. Columns a newer orch adds are left out."""
    model_config = ConfigDict(extra="ignore")
    id: str
    url: Optional[str] = None
    role: str
    started_at: float
    seen_at: float
