"""A SkyPilot job group: one file of several YAML documents whose header says
`execution: parallel`, then one task per document, all started together, side by side.

The header's keys as SkyPilot reads them (sky/dag.py): `name` (the group's), `execution`,
`primary_tasks` (the tasks whose end ends the group; none given: every task is primary),
`termination_delay` (how long an auxiliary task may outlive the primary ones: "30s", or
per task `{default: 30s, replay-buffer: 1m}`) and `inter_connection` (whether the tasks
reach each other by address; unset means they do, so they must share one place to run)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from orchestrator.base.errors import SpecError
from orchestrator.base.inputs import clip
from orchestrator.spec.document import SourceMap, read_document
from orchestrator.spec.job import JobSpec
from orchestrator.spec.load import default_name, load_spec_text
from orchestrator.spec.overrides import Overrides

HEADER_KEYS = {"name", "execution", "primary_tasks", "termination_delay", "inter_connection"}
# A task's name becomes its host name (`<task>-0.<group>`) and a variable's suffix.
_TASK_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DELAY_S = 7 * 86400


@dataclass
class JobGroup:
    name: str
    tasks: list[JobSpec]
    primary: list[str] = field(default_factory=list)  # empty: every task is primary
    delays_s: dict[str, float] = field(default_factory=dict)  # auxiliary task -> seconds
    inter_connection: bool = True

    def is_primary(self, task: str) -> bool:
        return not self.primary or task in self.primary

    def task_names(self) -> list[str]:
        return [str(t.name) for t in self.tasks]


def is_group_header(data: dict) -> bool:
    return data.get("execution") == "parallel"


def load_group(header: dict, src: SourceMap, docs: list[tuple[int, str]], file: str,
               given: Optional[Overrides] = None) -> JobGroup:
    """The group whose header (read from `src`) stands before `docs`, each task loaded as a
    job file of its own; SpecError at the header's or the task's line for anything wrong."""
    unknown = sorted(set(header) - HEADER_KEYS)
    if unknown:
        raise SpecError(file, src.line_of((unknown[0],)), unknown[0],
                        "is not a key of a job group's header",
                        f"a header holds {', '.join(sorted(HEADER_KEYS))}; a task's own keys go "
                        "in its document after the header")
    if not docs:
        raise SpecError(file, src.line_of(("execution",)), "execution",
                        "a job group with no task after its header",
                        "add each task as a YAML document after the header")
    name = str(header.get("name") or default_name(file))
    tasks: list[JobSpec] = []
    seen: dict[str, int] = {}
    for line, body in docs:
        data, task_src = read_document(body, file)
        spec = load_spec_text(body, file, given)
        if "name" not in data:
            first = min(task_src.lines.values(), default=line)
            raise SpecError(file, first, "name", "a job group's task needs a name: the other "
                            "tasks reach it by it", "add `name: server` (lower case, digits, '-')")
        task = str(spec.name)
        if not _TASK_NAME.match(task):
            raise SpecError(file, task_src.line_of(("name",)), "name",
                            f"{clip(task)} cannot name a task of a job group: it becomes a host "
                            "name", "use lower-case letters, digits and '-', at most 63")
        if task in seen:
            raise SpecError(file, task_src.line_of(("name",)), "name",
                            f"a second task named {task!r} (the first is at line {seen[task]})",
                            "give each task of the group its own name")
        seen[task] = task_src.line_of(("name",)) or line
        if spec.schedule.cron:
            raise spec.error("schedule.cron", "a job group's task cannot have a schedule of its "
                             "own", "schedule the group's jobs as separate files")
        tasks.append(spec)
    primary = _primary(header, src, file, list(seen))
    delays = _delays(header.get("termination_delay"), src, file, list(seen))
    inter = header.get("inter_connection", True)
    if not isinstance(inter, bool):
        raise SpecError(file, src.line_of(("inter_connection",)), "inter_connection",
                        f"is {clip(inter, quote=False)}, not true or false",
                        "false when the tasks need not reach each other (they may then run on "
                        "different infrastructure)")
    return JobGroup(name=name, tasks=tasks, primary=primary, delays_s=delays,
                    inter_connection=inter)


def _primary(header: dict, src: SourceMap, file: str, names: list[str]) -> list[str]:
    given = header.get("primary_tasks")
    if given is None:
        return []
    if not (isinstance(given, list) and all(isinstance(t, str) for t in given)):
        raise SpecError(file, src.line_of(("primary_tasks",)), "primary_tasks",
                        "is not a list of task names", "e.g. `primary_tasks: [trainer]`")
    for t in given:
        if t not in names:
            raise SpecError(file, src.line_of(("primary_tasks",)), "primary_tasks",
                            f"names {clip(t)}, which is not a task of this group",
                            f"its tasks are {', '.join(names)}")
    return list(given)


def _delays(given, src: SourceMap, file: str, names: list[str]) -> dict[str, float]:
    """Seconds each task may outlive the primary ones; a task not named gets `default`."""
    if given is None:
        return {}
    where = src.line_of(("termination_delay",))
    if isinstance(given, dict):
        out = {}
        for k, v in given.items():
            if k != "default" and k not in names:
                raise SpecError(file, src.line_of(("termination_delay", k)),
                                f"termination_delay.{k}", "is not a task of this group",
                                f"its tasks are {', '.join(names)} (or `default`)")
            out[str(k)] = seconds(v, file, src.line_of(("termination_delay", k)),
                                  f"termination_delay.{k}")
        default = out.pop("default", 0.0)
        return {t: out.get(t, default) for t in names}
    delay = seconds(given, file, where, "termination_delay")
    return dict.fromkeys(names, delay)


def seconds(value, file: str, line: Optional[int], key: str) -> float:
    """A duration as SkyPilot writes it: a number of seconds, or "30s", "5m", "1h", "1d"."""
    if isinstance(value, bool):
        value = None
    if isinstance(value, (int, float)):
        s = float(value)
    else:
        m = _DELAY.match(str(value)) if isinstance(value, str) else None
        s = float(m.group(1)) * _UNIT_S[m.group(2).lower()] if m else -1.0
    if not (0 <= s <= MAX_DELAY_S):
        raise SpecError(file, line, key, f"{clip(value, quote=False)} is not a duration of at "
                        "most 7 days", 'write seconds, or "30s", "5m", "1h"')
    return s
