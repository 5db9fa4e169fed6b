"""A SkyPilot pipeline: one file of several YAML documents, a header (`name:`) and then one
task per document, run in order, each after the one before it succeeded. A job group (a
header with `execution: parallel`: its tasks run at once, side by side) is read by
spec/job_group.py, wherever its header stands."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import yaml

from orchestrator.base.errors import SpecError
from orchestrator.base.inputs import clip
from orchestrator.spec.document import MAX_BYTES, MAX_DEPTH, read_document, too_big
from orchestrator.spec.job import JobSpec
from orchestrator.spec.job_group import JobGroup, load_group
from orchestrator.spec.load import beside_its_file, default_name, load_spec_text, read_job_file
from orchestrator.spec.overrides import Overrides

HEADER_KEYS = {"name", "execution"}
# What a job group's header may hold besides (sky/utils/dag_utils.py).
GROUP_HEADER_KEYS = HEADER_KEYS | {"primary_tasks", "termination_delay", "inter_connection"}


@dataclass
class Pipeline:
    name: str
    stages: list[JobSpec]


def documents(text: str) -> list[tuple[int, str]]:
    """(line, text) of each YAML document in `text`, where `line` is the 1-based line it
    starts on; each text is padded with empty lines so that its lines are the file's.

    Empty past MAX_DEPTH levels of nesting, which read_document refuses with the line: PyYAML
    takes time quadratic in the depth to parse on (4 s for 3,000 levels)."""
    out: list[tuple[int, str]] = []
    start = None
    depth = 0
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                return []
        elif isinstance(ev, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(ev, yaml.DocumentStartEvent):
            start = ev.start_mark
        elif isinstance(ev, yaml.DocumentEndEvent) and start is not None:
            body = text[start.index:ev.end_mark.index]
            out.append((start.line + 1, "\n" * start.line + body))
            start = None
    return out


def load_job(path: str | Path, given: Optional[Overrides] = None) -> Union[JobSpec, Pipeline, JobGroup]:
    """The file, read once: a pipeline (or a job group) when it holds several YAML
    documents, else its one task. SpecError (file, line, key) for anything wrong, in a stage at its own line."""
    text, file = read_job_file(path)
    pipeline = load_pipeline_text(text, file, given)
    if pipeline is not None:
        for stage in (pipeline.tasks if isinstance(pipeline, JobGroup) else pipeline.stages):
            beside_its_file(stage, file)
        return pipeline
    return beside_its_file(load_spec_text(text, file, given), file)


def load_pipeline_text(text: str, file: str = "<job>",
                       given: Optional[Overrides] = None) -> Union[Pipeline, JobGroup, None]:
    if len(text) > MAX_BYTES:
        raise too_big(file, len(text.encode("utf-8", "surrogatepass")))
    try:
        docs = [(line, body) for line, body in documents(text) if body.strip(" \n-.")]
    except yaml.YAMLError:
        return None  # not YAML: load_spec says where and why
    if len(docs) < 2:
        return None
    group = _job_group(docs, file, given)
    if group is not None:
        return group
    header: dict = {}
    first_line, first = docs[0]
    data, _ = read_document(first, file)
    if set(data) <= HEADER_KEYS:
        header = data
        docs = docs[1:]
    if not docs:
        raise SpecError(file, first_line, None, "a pipeline header with no stage after it",
                        "add each stage as a YAML document after the header")
    name = str(header.get("name") or default_name(file))
    stages = []
    for i, (_, body) in enumerate(docs):
        named = "name" in read_document(body, file)[0]
        spec = load_spec_text(body, file, given)
        if not named:
            spec.name = f"{name}-{i + 1}"[:63]
        if spec.schedule.cron:
            raise spec.error("schedule.cron", "a pipeline's stage cannot have a schedule of its "
                             "own", "schedule the jobs of a pipeline as separate files")
        stages.append(spec)
    return Pipeline(name=name, stages=stages)


def _job_group(docs: list[tuple[int, str]], file: str,
               given: Optional[Overrides]) -> Optional[JobGroup]:
    """The job group whose header (`execution` other than serial) stands first, after
    documents of comments only, or holds primary_tasks and the like beside it; None for a
    pipeline. A document that does not read is left to the stage loading, which says where
    and why."""
    first = True
    for i, (_, body) in enumerate(docs):
        try:
            data, src = read_document(body, file)
        except SpecError:
            continue  # comments only, or broken
        execution = data.get("execution")
        if execution not in (None, "serial") and (first or set(data) <= GROUP_HEADER_KEYS):
            where = src.line_of(("execution",))
            if execution != "parallel":
                raise SpecError(file, where, "execution", f"is {clip(execution, quote=False)}: "
                                "neither serial (a pipeline) nor parallel (a job group)",
                                "write `execution: parallel` for a job group, or leave it out "
                                "for a pipeline")
            if not first:
                raise SpecError(file, where, "execution", "a job group's header must come "
                                "before its tasks", "move the header to the file's first document")
            return load_group(data, src, [d for d in docs[i + 1:] if _has_keys(d[1], file)],
                              file, given)
        first = False
    return None


def _has_keys(body: str, file: str) -> bool:
    try:
        return bool(read_document(body, file)[0])
    except SpecError:
        return True  # broken: loading it as a task says where and why
