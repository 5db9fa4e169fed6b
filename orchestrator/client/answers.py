"""A server's answer as this client's record, whichever `orch serve` version gave it."""

from __future__ import annotations

import typing
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def read(cls: type[M], answer: Any) -> M:
    """A server's answer as this client's record. A newer `orch serve` may add fields: they
    are left out (at every level) rather than refused, so an older client still reads it."""
    return cls.model_validate(known(cls, answer))


def known(ann: Any, data: Any) -> Any:
    """`data` without the keys that the annotation's models forbid and do not know."""
    if isinstance(data, list):
        args = typing.get_args(ann)
        return [known(args[0] if args else Any, x) for x in data]
    if not isinstance(data, dict):
        return data
    models = [a for a in (ann, *typing.get_args(ann)) if isinstance(a, type) and issubclass(a, BaseModel)]
    if not models:
        return data
    cls = models[0]
    fields = cls.model_fields
    strict = cls.model_config.get("extra") == "forbid"
    return {k: known(fields[k].annotation, v) if k in fields else v for k, v in data.items()
            if k in fields or not strict}
