"""Why a job failed, read from its (redacted) log: the error its output ended with, the last
lines of that traceback (once, however many processes printed it), and a hint where orch
knows more (a CUDA call on a target with no GPU, a module not installed, out of memory).
Pure: text in, a small dict out."""

from __future__ import annotations

import re
from typing import Optional

from jobs.events import parse_line

# What Ray puts before a line a worker or actor printed: "(RayTrainWorker pid=12, ip=...) ".
_PREFIX = re.compile(r"^\((?:[\w.]+ )?pid=\d+[^)]*\)\s?")
_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Killed))(?::\s?(.*))?$")
_TRACEBACK = "Traceback (most recent call last):"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the colours Ray puts on a worker's prefix
_WORKSPACE = "orch: job "  # jobs/workspace.py's line saying where the job runs
_EXIT = re.compile(r"exit code (-?\d+)")
MAX_LINES = 8
MAX_CHARS = 400  # a line of the tail: an error message can quote a whole tensor

# (pattern over the error and its tail, hint), the first match wins.
_HINTS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"exit code (?:137|-9)\b"),
     "the job was killed (SIGKILL), most often because its machine ran out of memory: a "
     "smaller batch, fewer loader workers, or more memory (resources.memory)"),
    (re.compile(r"out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|\bMemoryError\b"),
     "the job ran out of memory: a smaller batch or model, or a GPU with more memory "
     "(resources.accelerators: 24GB+)"),
    (re.compile(r"_cuda_setDevice|_cuda_init|not compiled with CUDA|no NVIDIA driver|"
                r"No CUDA GPUs are available|CUDA driver|cuda runtime|NCCL|nccl", re.I),
     "the script uses CUDA (or NCCL) and the target it ran on has no GPU: ask for one "
     "(resources.accelerators), or let it fall back to CPU (`torch.cuda.is_available()`, "
     "backend gloo)"),
    (re.compile(r"gloo/transport/tcp/.*(?:Read error|Connection closed by peer|Connection "
                r"reset)|Connection closed by peer|ActorDiedError|node .* (?:died|was lost)"),
     "a worker it exchanged gradients with died (its process or its node was lost): the "
     "others' collectives broke after it; checkpoint.max_failures lets the run restart "
     "from its last checkpoint"),
    (re.compile(r"([\w.-]+): command not found"),
     "`{0}` is not on the PATH where the job ran: install it in `setup:`, or call it by the "
     "Python that has it (`python -m ...`)"),
    (re.compile(r"No module named '([\w.]+)'"),
     "module '{0}' is not installed where the job ran: install it in `setup:` (pip install "
     "...), or add it to the workdir"),
)


def _plain(text: str) -> list[str]:
    """The job's own lines: orch's event lines out, Ray's process prefix off."""
    out = []
    for line in text.splitlines():
        if parse_line(line) is not None or line.startswith(_WORKSPACE):
            continue
        out.append(_PREFIX.sub("", _ANSI.sub("", line).rstrip()))
    return out


def explain(text: str, message: Optional[str] = None) -> Optional[dict]:
    """{error, lines, hint} for a failed job's log `text` (its backend's `message` too,
    for the hint): `error` only where its output ends with an exception; None when there is
    nothing to show."""
    lines = _plain(text)
    last_error = None
    for i in range(len(lines) - 1, -1, -1):
        if _ERROR.match(lines[i].strip()) and not lines[i].startswith(" "):
            last_error = i
            break
    error = None  # only an exception line is taken as the error: the backend's word stands else
    if last_error is None:
        tail = [ln for ln in lines if ln.strip()][-3:]
    else:
        error = lines[last_error].strip()
        start = last_error
        # Back to the traceback that ends there: the one printed last, shown once.
        while start > 0 and lines[start].strip() != _TRACEBACK and last_error - start < 200:
            start -= 1
        if lines[start].strip() != _TRACEBACK:
            start = last_error
        tail = lines[start:last_error + 1]
    hint = hint_for("\n".join([*tail, message or ""]))
    if not tail and not hint:
        return None
    if len(tail) > MAX_LINES:
        tail = tail[:1] + ["  ..."] + tail[-(MAX_LINES - 2):]
    found: dict = {"lines": [ln[:MAX_CHARS] for ln in tail]}
    if error:
        found["error"] = error[:MAX_CHARS]
    if hint:
        found["hint"] = hint
    return found


def hint_for(text: str) -> Optional[str]:
    for pattern, hint in _HINTS:
        m = pattern.search(text)
        if m:
            return hint.format(*m.groups())
    return None


def message_with(failure: Optional[dict], message: Optional[str]) -> Optional[str]:
    """The job's message naming its error: the backend's own (Ray's "Job entrypoint command
    failed with exit code 1; ...") said as the error and its exit code."""
    if not failure or not failure.get("error"):
        return message
    code = _EXIT.search(message or "")
    return failure["error"] + (f" (exit code {code.group(1)})" if code else "")
