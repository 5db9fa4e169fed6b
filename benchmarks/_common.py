"""Shared helpers for the benchmarks: a private ORCH_HOME with its own local Ray, running
`orch submit` on a job file, reading the job's events, and printing tables.

Every benchmark that runs jobs through orch does so inside `OrchHome()`: a fresh home under
/tmp (short, for Ray's unix socket paths), `orch local up` on entry, `orch local down` and
removal of the home on exit, whatever happened in between.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/x.py` puts benchmarks/ first, not the root
    sys.path.insert(0, str(ROOT))

ORCH = str(Path(sys.executable).with_name("orch"))


def log(msg: str) -> None:
    """Progress notes go to stderr, so stdout holds only the tables."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def steady(values: list[float]) -> Optional[float]:
    """Steady state: the median of the epochs after the first (all of them if only one)."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return statistics.median(values[1:] if len(values) > 1 else values)


def load_avg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


class OrchHome:
    """A private ORCH_HOME with a local Ray instance up for the duration of a `with` block."""

    def __init__(self, prefix: str = "ob", cpus: Optional[int] = None, env: Optional[dict] = None):
        self.home = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        self.extra_env = dict(env or {})
        self.cpus = cpus
        self.state: dict = {}
        self.up_s: Optional[float] = None

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "RAY_"))}
        env.update(ORCH_HOME=str(self.home), ORCH_CONFIG=str(self.home / "config.toml"),
                   ORCH_MODE="local", SKYPILOT_DISABLE_USAGE_COLLECTION="1",
                   AWS_EC2_METADATA_DISABLED="true", COLUMNS="160", PYTHONPATH=str(ROOT))
        env.update(self.extra_env)
        return env

    def orch(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run([ORCH, *args], env=self.env(), capture_output=True, text=True,
                              timeout=timeout, cwd=str(ROOT), stdin=subprocess.DEVNULL)

    def __enter__(self) -> OrchHome:
        try:
            start = time.monotonic()
            proc = self.orch("local", "up", "--json", timeout=300)
            self.up_s = time.monotonic() - start
            if proc.returncode != 0:
                raise RuntimeError(f"`orch local up` failed:\n{proc.stderr[-3000:]}")
            self.state = json.loads(proc.stdout)
            log(f"local Ray up in {self.up_s:.1f} s under {self.home}")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def wait_for_runner_host(self, settle_s: float = 10.0) -> None:
        """Until the local Ray's runner host answers, then `settle_s` more while its warm
        processes import torch: a warm local Ray, as a user's is after its first job."""
        from jobs.hosted import connect

        sock = self.state.get("host_socket")
        if not sock:
            log("this local Ray has no runner host (local.runner_host = false)")
            return
        start = time.monotonic()
        conn = connect(sock, wait_s=180)
        if conn is None:
            raise RuntimeError(f"the runner host never answered at {sock}")
        conn.close()
        log(f"runner host ready {time.monotonic() - start:.1f} s after `orch local up`; "
            f"{settle_s:.0f} s more for its warm processes")
        time.sleep(settle_s)

    def close(self) -> None:
        try:
            proc = self.orch("local", "down", timeout=180)
            if proc.returncode != 0:
                log(f"`orch local down` said: {proc.stderr.strip()[-500:]}")
        except Exception as e:  # keep going: the home is removed either way
            log(f"`orch local down` failed: {e}")
        temp = self.state.get("temp_dir")
        if temp:
            deadline = time.monotonic() + 30
            while _processes_under(temp) and time.monotonic() < deadline:
                time.sleep(0.5)
            left = _processes_under(temp)
            if left:
                log(f"warning: {len(left)} Ray processes still running under {temp}")
            elif Path(temp).exists() and not str(temp).startswith(str(self.home)):
                shutil.rmtree(temp, ignore_errors=True)
        shutil.rmtree(self.home, ignore_errors=True)

    def submit(self, name: str, job_yaml: str, timeout: float = 900) -> JobRun:
        """Run a job to its end through `orch submit FILE --json`; times the call itself."""
        path = self.home / f"{name}.yaml"
        path.write_text(job_yaml)
        invoked = time.time()
        proc = subprocess.run([ORCH, "submit", str(path), "--json"], env=self.env(),
                              capture_output=True, text=True, timeout=timeout, cwd=str(ROOT),
                              stdin=subprocess.DEVNULL)
        returned = time.time()
        try:
            rec = json.loads(proc.stdout)
        except ValueError:
            raise RuntimeError(f"`orch submit` printed no record (exit {proc.returncode}):\n"
                               f"{proc.stderr[-3000:]}") from None
        text = ""
        if rec.get("log_path") and Path(rec["log_path"]).exists():
            text = Path(rec["log_path"]).read_text(errors="replace")
        else:
            text = self.orch("logs", rec["id"]).stdout
        from jobs import events

        return JobRun(rec=rec, events=list(events.parse(text)), invoked=invoked,
                      returned=returned, stderr=proc.stderr, returncode=proc.returncode)


class JobRun:
    def __init__(self, rec: dict, events: list, invoked: float, returned: float, stderr: str,
                 returncode: int):
        self.rec, self.events, self.invoked, self.returned = rec, events, invoked, returned
        self.stderr, self.returncode = stderr, returncode

    @property
    def ok(self) -> bool:
        return self.rec.get("status") == "SUCCEEDED"

    @property
    def metrics(self) -> dict:
        return self.rec.get("metrics") or {}

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("event") == kind]

    def first_t(self, kind: str) -> Optional[float]:
        ts = [e["t"] for e in self.of(kind) if e.get("t") is not None]
        return min(ts) if ts else None

    def last_t(self, kind: str) -> Optional[float]:
        ts = [e["t"] for e in self.of(kind) if e.get("t") is not None]
        return max(ts) if ts else None

    def reports(self) -> list[dict]:
        """Each epoch's report metrics, in order (a resumed run may repeat epochs: last wins)."""
        by_epoch: dict = {}
        for e in self.of("report"):
            m = e.get("metrics") or {}
            by_epoch[m.get("epoch", len(by_epoch) + 1)] = dict(m, t=e.get("t"))
        return [by_epoch[k] for k in sorted(by_epoch, key=lambda k: (k is None, k))]

    def fail_text(self) -> str:
        return (f"job {self.rec.get('id')} ended {self.rec.get('status')}: "
                f"{self.rec.get('message') or ''}\n{self.stderr[-3000:]}")


def job_yaml(name: str, config: dict, *, num_workers: int = 2, precision: str = "bf16",
             loader_workers: Any = 0, pin_memory: Any = "auto", use_gpu: Any = False,
             extra: str = "") -> str:
    """A job file for the built-in `image-classification` job."""
    cfg = ", ".join(f"{k}: {json.dumps(v)}" for k, v in config.items())
    return (f"name: {name}\n"
            "train:\n"
            "  job: image-classification\n"
            f"  config: {{{cfg}}}\n"
            f"scaling: {{num_workers: {num_workers}, use_gpu: {json.dumps(use_gpu)}}}\n"
            f"precision: {precision}\n"
            f"data: {{loader_workers: {loader_workers}, pin_memory: {json.dumps(pin_memory)}}}\n"
            + extra)


def _processes_under(path: str) -> list:
    from providers.local_ray import processes_matching

    return processes_matching(path)


def print_table(title: str, columns: Iterable[str], rows: Iterable[Iterable[Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    columns = list(columns)
    table = Table(title=title, title_justify="left")
    for i, c in enumerate(columns):
        table.add_column(c, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*[str(x) for x in row])
    Console(width=200).print(table)


def fmt(value: Optional[float], spec: str = ".2f", unit: str = "") -> str:
    if value is None:
        return "n/a"
    return f"{value:{spec}}{unit}"
