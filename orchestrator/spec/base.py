"""What every part of the job file shares: strict models, the targets, free-form values."""

from __future__ import annotations

import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from orchestrator.base.inputs import clip
from orchestrator.base.targets import TARGETS, Target

__all__ = ["TARGETS", "Strict", "Target", "plain"]


class Strict(BaseModel):
    """Every user-facing model forbids unknown keys: a typo is an error, not silence."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def plain(v: Any) -> Any:
    """A free-form value (train.config, a file_mounts entry) as JSON-like data, so it can be
    stored, fingerprinted and sent to the job: text keys, no !!binary or !!set; dates as text."""
    if isinstance(v, dict):
        bad = next((k for k in v if not isinstance(k, str)), None)
        if bad is not None or None in v:
            raise ValueError(f"the key {clip(bad)} is not text: quote it")
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if v is None or isinstance(v, (str, int, float, bool)):
        return v
    raise ValueError(f"a {type(v).__name__} value ({clip(v)}) cannot be used here: "
                     "write text, numbers, lists or mappings")
