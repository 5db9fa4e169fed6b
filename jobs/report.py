"""Metrics from any script, shown by orch as a `train:` job's are (`orch status`, the status
page's charts, `/metrics`): one line on its output,

    ::orch::{"event": "report", "metrics": {"epoch": 3, "loss": 0.41}}

which any language can print, or, from Python where orch's runner is on the path (every
`run:` job: it ships as `_orch_runner`), `from _orch_runner.report import report` and
`report(epoch=3, loss=0.41)`. Numbers become curves; `samples_per_sec` is the throughput
gauge. A report sets no outcome: a job's status is its command's exit code.
"""

from __future__ import annotations

import itertools
from typing import Any

from . import events

_INDEX = itertools.count(1)


def report(**metrics: Any) -> None:
    """Print one report of `metrics` (names to numbers or short strings), numbered."""
    events.emit("report", index=next(_INDEX), metrics=metrics)
