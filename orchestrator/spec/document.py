"""A job file's YAML, read safely: bounded in size, depth and alias expansion, every
problem a SpecError at its line, and a map from each key to the line it sits on."""

from __future__ import annotations

from typing import Any, Optional

import yaml

from orchestrator.base.errors import SpecError
from orchestrator.base.inputs import clip

# Limits that keep a hostile or broken job file from eating memory or the stack: a real
# job file is a few KiB, a few levels deep, with a few hundred values.
MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_VALUES = 100_000  # after expanding YAML aliases (a "billion laughs" file expands to 10^9)


class SourceMap:
    """Where each key of a YAML document sits, so errors can name the line."""

    def __init__(self, file: str, lines: dict[tuple, int]):
        self.file = file
        self.lines = lines

    def line_of(self, path: tuple) -> Optional[int]:
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), None)


class _Loader(yaml.SafeLoader):
    """SafeLoader whose bad tagged values (`!!int abc`, a date like 2024-13-45) are YAML errors
    at their line, not Python exceptions from deep inside PyYAML."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except yaml.YAMLError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
            value = node.value if isinstance(node, yaml.ScalarNode) else node.tag
            why = f" ({e})" if isinstance(e, (ValueError, OverflowError)) else ""
            raise yaml.constructor.ConstructorError(
                None, None, f"{clip(value)} is not a valid {node.tag.rsplit(':', 1)[-1]}{why}; "
                "quote it if you meant text", node.start_mark) from None


class _Replay(_Loader):
    """Composes from the events _check_shape already parsed: one parse of the text, not two."""

    def __init__(self, events: list[yaml.Event]):
        super().__init__("")
        self.events = events[::-1]  # popped from the end

    def check_event(self, *choices: type) -> bool:
        return bool(self.events) and (not choices or isinstance(self.events[-1], choices))

    def peek_event(self) -> Optional[yaml.Event]:
        return self.events[-1] if self.events else None

    def get_event(self) -> Optional[yaml.Event]:
        return self.events.pop() if self.events else None


def too_big(file: str, size: Optional[int]) -> SpecError:
    """`size` None: a device or pipe, read only up to the limit."""
    what = f"is {size:,} bytes; the limit is" if size is not None else "is over the limit of"
    return SpecError(file, None, None, f"the job file {what} {MAX_BYTES:,} bytes",
                     "put large data in files the job reads (workdir, file_mounts)")


def _documents(text: str) -> str:
    """How many YAML documents `text` holds ('several' if it cannot be counted)."""
    try:
        return str(sum(1 for _ in yaml.compose_all(text, Loader=yaml.SafeLoader)))
    except yaml.YAMLError:
        return "several"


def read_document(text: str, file: str) -> tuple[dict[str, Any], SourceMap]:
    """The job file's top-level mapping and where each key sits; SpecError for anything
    that is not a YAML mapping with text keys."""
    if len(text) > MAX_BYTES:
        raise too_big(file, len(text.encode("utf-8", "surrogatepass")))
    try:
        node = _Replay(_check_shape(text, file)).get_single_node()
    except yaml.composer.ComposerError as e:
        if "single document" not in f"{e.context} {e.problem}":
            raise SpecError(file, (e.problem_mark.line + 1) if e.problem_mark else None, None,
                            f"YAML syntax error: {e.problem or e}",
                            "check the indentation and quoting on that line") from None
        raise SpecError(file, e.problem_mark.line + 1 if e.problem_mark else None, None,
                        f"holds {_documents(text)} YAML documents (a SkyPilot pipeline or job "
                        "group): only `orch submit` and `orch plan` without ORCH_SERVER run "
                        "those", "submit it from this machine (unset ORCH_SERVER), or put each "
                        "task in a file of its own") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        raise SpecError(file, line, None, f"YAML syntax error: {e.problem or e}",
                        "check the indentation and quoting on that line") from None
    except yaml.reader.ReaderError as e:  # a control character, or a lone surrogate
        line = text[:e.position].count("\n") + 1
        raise SpecError(file, line, None, f"YAML syntax error: the character {chr(e.character)!r} "
                        "is not allowed in YAML", "remove it, or write it as an escape in a "
                        "double-quoted string") from None
    except yaml.YAMLError as e:
        raise SpecError(file, None, None, f"YAML syntax error: {e}") from None
    if node is None:
        raise SpecError(file, None, None, "the job file is empty",
                        "write at least a 'train:' or 'run:' section (see examples/quickstart.yaml)")
    lines: dict[tuple, int] = {}
    _walk(node, (), lines, file)
    try:  # from the node already composed: parsing the text again took a third of the time
        data = _Loader("").construct_document(node)
    except yaml.MarkedYAMLError as e:  # e.g. an unhashable key, or `!!int abc`
        line = e.problem_mark.line + 1 if e.problem_mark else None
        context = f"{e.context}: " if e.context else ""
        raise SpecError(file, line, None, f"YAML error: {context}{e.problem}") from None
    except yaml.YAMLError as e:
        raise SpecError(file, None, None, f"YAML error: {e}") from None
    if not isinstance(data, dict):
        raise SpecError(file, 1, None, "the job file must be a mapping of keys to values",
                        "start with keys such as 'name:', 'resources:' and 'train:'")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise SpecError(file, 1, str(bad[0]), "keys must be text")
    return data, SourceMap(file, lines)


def _check_shape(text: str, file: str) -> list[yaml.Event]:
    """Refuse documents too deep, self-referencing, or that expand (through aliases) to too
    many values, reading only the event stream, before anything is built from it; the
    events, to build from."""
    done: dict[str, tuple[int, int]] = {}   # anchor -> (values, depth) it expands to
    stack: list[list] = []                  # per open collection: [anchor, values, depth]
    total = 0
    events = []
    for ev in yaml.parse(text, Loader=_Loader):
        events.append(ev)
        line = ev.start_mark.line + 1
        if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            stack.append([ev.anchor, 1, 1])
            size, depth = 1, len(stack)
        elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            anchor, n, d = stack.pop()
            if anchor is not None:
                done[anchor] = (n, d)
            if stack:
                stack[-1][1] += n
                stack[-1][2] = max(stack[-1][2], d + 1)
            continue
        elif isinstance(ev, yaml.ScalarEvent):
            size, depth = 1, len(stack)
            if ev.anchor is not None:
                done[ev.anchor] = (1, 0)
            if stack:
                stack[-1][1] += 1
        elif isinstance(ev, yaml.AliasEvent):
            if any(open_[0] == ev.anchor for open_ in stack):
                raise SpecError(file, line, None, f"the alias *{ev.anchor} is inside the value it "
                                "names, so it never ends", "an alias can only repeat a finished value")
            size, d = done.get(ev.anchor, (1, 0))
            depth = len(stack) + d
            if stack:
                stack[-1][1] += size
                stack[-1][2] = max(stack[-1][2], d + 1)
        else:
            continue
        total += size
        if depth > MAX_DEPTH:
            raise SpecError(file, line, None, f"nested more than {MAX_DEPTH} levels deep",
                            "a job file needs a few levels; flatten the structure")
        if total > MAX_VALUES:
            raise SpecError(file, line, None, f"expands to more than {MAX_VALUES:,} values "
                            "(YAML aliases repeat whole values)",
                            "write the values out, or use fewer aliases")
    return events


def _walk(node: yaml.Node, path: tuple, lines: dict, file: str) -> None:
    """Record the line of every key and item under `node`; refuse a key given twice (PyYAML
    keeps the last silently) and a NUL, which no file name, command or env value can hold."""
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.ScalarNode) and "\x00" in node.value:
        raise SpecError(file, node.start_mark.line + 1, ".".join(map(str, path)) or None,
                        "contains a NUL character (\\0), which no file name, command or "
                        "environment value can hold")
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k.value)
            if key in seen:
                raise SpecError(file, k.start_mark.line + 1, ".".join(map(str, path + (key,))),
                                "this key appears twice", "keep one of them")
            seen.add(key)
            lines[path + (key,)] = k.start_mark.line + 1
            _walk(v, path + (key,), lines, file)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            lines[path + (i,)] = v.start_mark.line + 1
            _walk(v, path + (i,), lines, file)
