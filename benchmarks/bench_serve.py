"""Load and faults on two `orch serve` replicas over one PostgreSQL store (issue 38).

    .venv/bin/python benchmarks/bench_serve.py [--seconds 120] [--clients 32]

N client threads, each with the real client (`Remote`, both replicas' URLs, its retry),
loop over: submit a tiny `run: echo` job (at a bounded overall rate, each with an
idempotency key of its own), list jobs, read a job's status, read its log, and now and then
follow one. One cron job is due every minute. A third of the way in, the replica holding the
scheduler's lease is killed with SIGKILL (and a new one started on its port 5 s later, a
rolling replacement; --no-replace leaves it dead); two thirds in, PostgreSQL is stopped for
a few seconds and started again. Then every accepted job is waited for, and the store is
checked: each submit's key maps to one job, each accepted job exists once and SUCCEEDED,
no job was added that no submit asked for, and each cron slot has exactly one job.

Prints per endpoint the requests, those answered after a retry, those that failed, requests/s,
p50 and p99 latency; then the faults and the checks. Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from _common import ORCH, ROOT, OrchHome, load_avg, log, print_table

from orchestrator.base.errors import OrchError
from orchestrator.client.remote import Remote

JOB = "name: bench-echo\nrun: echo bench\n"
CRON = "name: bench-cron\nrun: echo slot\nschedule: {cron: '* * * * *'}\n"
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
ENDPOINTS = ("POST /v1/jobs", "GET /v1/jobs", "GET /v1/jobs/{id}", "GET /v1/jobs/{id}/logs",
             "GET .../logs?follow=true")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    """One `orch serve` in a home of its own whose `local` folder is the Ray home's (the
    same local Ray for both), on the shared PostgreSQL store."""

    def __init__(self, ray_home: Path, db_url: str, period_s: float):
        self.home = Path(tempfile.mkdtemp(prefix="obr", dir="/tmp"))
        (self.home / "local").symlink_to(ray_home / "local", target_is_directory=True)
        self.db_url, self.period_s = db_url, period_s
        self.key_file = ray_home / "replicas-secret_key"  # removed with the Ray's home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: Optional[subprocess.Popen] = None
        self.starts = 0

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "RAY_"))}
        env.update(ORCH_HOME=str(self.home), ORCH_CONFIG=str(self.home / "config.toml"),
                   ORCH_MODE="local", ORCH_DATABASE_URL=self.db_url, PYTHONPATH=str(ROOT),
                   # one secret key for every replica, as each would hold a copy
                   ORCH_SECRET_KEY_FILE=str(self.key_file),
                   SKYPILOT_DISABLE_USAGE_COLLECTION="1", AWS_EC2_METADATA_DISABLED="true")
        return env

    def start(self) -> None:
        self.starts += 1
        with open(self.home / f"serve-{self.starts}.log", "w") as out:
            self.proc = subprocess.Popen(
                [ORCH, "serve", "--port", str(self.port), "--period", str(self.period_s)],
                env=self.env(), cwd=str(ROOT), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"orch serve exited: {self.logs()[-3000:]}")
            if self.role() is not None:
                return
            time.sleep(0.2)
        raise RuntimeError(f"orch serve did not answer at {self.url}: {self.logs()[-3000:]}")

    def role(self) -> Optional[str]:
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=2) as r:
                return json.loads(r.read())["scheduler"]
        except (OSError, ValueError, KeyError):
            return None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def logs(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.home.glob("serve-*.log")))

    def remove(self, keep: Optional[Path]) -> None:
        if keep is not None:
            for p in self.home.glob("serve-*.log"):
                shutil.copy(p, keep / f"{self.port}-{p.name}")
        (self.home / "local").unlink(missing_ok=True)
        shutil.rmtree(self.home, ignore_errors=True)


class Stats:
    """Every client request: its endpoint, latency, and how it ended."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: list[tuple[str, float, str]] = []  # endpoint, seconds, ok|recovered|failed
        self.errors: Counter = Counter()
        self.submits: list[tuple[str, Optional[str]]] = []  # key, job id (None: failed)

    def add(self, endpoint: str, seconds: float, outcome: str, error: str = "") -> None:
        with self.lock:
            self.rows.append((endpoint, seconds, outcome))
            if error:
                self.errors[f"{endpoint}: {error[:160]}"] += 1


class Load:
    """The client threads and what they share: the submit pace, the jobs known so far."""

    def __init__(self, args, urls: list[str], token: str, job_file: Path, stats: Stats):
        self.args, self.urls, self.token, self.job_file, self.stats = args, urls, token, job_file, stats
        self.stop = threading.Event()
        self.began = time.monotonic()
        self.lock = threading.Lock()
        self.submitted = 0

    def may_submit(self) -> bool:
        """At most --submit-rate jobs a second over all clients, so the local Ray keeps up."""
        with self.lock:
            if self.submitted >= int((time.monotonic() - self.began) * self.args.submit_rate) + 1:
                return False
            self.submitted += 1
            return True

    def timed(self, endpoint: str, remote: Remote, call, *args: Any, **kwargs: Any) -> Any:
        before, started = remote.recovered, time.monotonic()
        try:
            out = call(*args, **kwargs)
        except OrchError as e:
            self.stats.add(endpoint, time.monotonic() - started, "failed", e.message)
            return None
        except Exception as e:  # noqa: BLE001  (not a clear error: the benchmark says so)
            self.stats.add(endpoint, time.monotonic() - started, "failed", f"UNCLEAR {type(e).__name__}: {e}")
            return None
        self.stats.add(endpoint, time.monotonic() - started,
                       "recovered" if remote.recovered > before else "ok")
        return out

    def follow(self, remote: Remote, job_id: str) -> int:
        """Follow a job's log to its end, or for --follow-s at most."""
        lines, until = 0, time.monotonic() + self.args.follow_s
        stream = remote.stream(job_id)
        try:
            for _ in stream:
                lines += 1
                if time.monotonic() > until:
                    break
        finally:
            stream.close()
        return lines

    def client(self, n: int) -> None:
        rng = random.Random(n)
        remote = Remote(self.urls, self.token, timeout_s=60, upload_max_bytes=0,
                        retry_s=self.args.retry_s)
        remote._at = n % len(self.urls)  # the clients start spread over the replicas
        mine: list[str] = []
        while not self.stop.is_set():
            if self.may_submit():
                key = f"bench-{uuid.uuid4().hex}"
                sub = self.timed("POST /v1/jobs", remote, remote.submit, self.job_file, key=key)
                with self.stats.lock:
                    self.stats.submits.append((key, sub.id if sub else None))
                if sub:
                    mine.append(sub.id)
            listed = self.timed("GET /v1/jobs", remote, remote.jobs, limit=20) or []
            pick = rng.choice(mine) if mine else (rng.choice(listed).id if listed else None)
            if pick:
                self.timed("GET /v1/jobs/{id}", remote, remote.job, pick)
                self.timed("GET /v1/jobs/{id}/logs", remote, remote.logs, pick)
                if mine and rng.random() < self.args.follow_share:
                    self.timed("GET .../logs?follow=true", remote, self.follow, remote, mine[-1])
            self.stop.wait(self.args.think_s)


def faults(args, replicas: list[Replica], pg, began: float) -> list[tuple[str, str, str]]:
    """SIGKILL the lease holder at --kill-at, PostgreSQL stopped and started at --pg-at; what
    happened, as table rows (event, seconds into the run, effect)."""
    rows: list[tuple[str, str, str]] = []

    def at(frac: float) -> None:
        time.sleep(max(0.0, began + frac * args.seconds - time.monotonic()))

    def now() -> str:
        return f"{time.monotonic() - began:.1f}"

    def leader_after(t0: float, timeout: float = 60) -> tuple[Optional[Replica], float]:
        while time.monotonic() - t0 < timeout:
            leading = [r for r in replicas if r.role() == "leading"]
            if len(leading) == 1:
                return leading[0], time.monotonic() - t0
            time.sleep(0.1)
        return None, time.monotonic() - t0

    at(args.kill_at)
    holder = next((r for r in replicas if r.role() == "leading"), None)
    if holder is None:
        rows.append(("SIGKILL the lease holder", now(), "no replica was leading"))
    else:
        t0, when = time.monotonic(), now()
        holder.kill()
        log(f"SIGKILLed the lease holder on port {holder.port}")
        other = [r for r in replicas if r is not holder]
        new, took = leader_after(t0)
        rows.append(("SIGKILL the lease holder", when, f"port {holder.port}; "
                     + (f"port {new.port} leads {took:.1f} s later" if new in other else
                        f"no takeover in {took:.0f} s")))
        if args.replace:
            time.sleep(5)
            holder.start()
            rows.append(("a new replica on the killed one's port", now(), f"answers as {holder.role()}"))
    at(args.pg_at)
    t0, when = time.monotonic(), now()
    restart = threading.Thread(target=pg.restart, kwargs={"down_s": args.pg_down_s})
    restart.start()
    lost = None  # when /healthz first showed no replica leading
    while restart.is_alive():
        if lost is None and not any(r.role() == "leading" for r in replicas):
            lost = time.monotonic()
        time.sleep(0.1)
    back = time.monotonic()
    log(f"PostgreSQL stopped for {args.pg_down_s:g} s and started again")
    new, took = leader_after(back)
    while lost is None and time.monotonic() - back < 3 * args.period_s:  # a holder's next look
        if not any(r.role() == "leading" for r in replicas):
            lost = time.monotonic()
            new, took = leader_after(back)
        time.sleep(0.1)
    seen = (f"the lease seen lost {lost - t0:.1f} s after the stop; " if lost is not None
            else "the lease never seen lost; ")
    rows.append(("PostgreSQL stopped and started", when, f"down {back - t0:.1f} s; {seen}"
                 + (f"port {new.port} leads {took:.1f} s after it is back" if new
                    else f"no replica leads {took:.0f} s after it is back")))
    return rows


def register_cron(remote: Remote, home: Path) -> tuple[str, float]:
    f = home / "cron.yaml"
    f.write_text(CRON)
    from orchestrator.records import Registered

    reg = remote.submit(f)
    assert isinstance(reg, Registered)
    return reg.schedule.id, _ts(reg.schedule.next_at)


def _ts(iso_text: Optional[str]) -> float:
    assert iso_text is not None
    return datetime.fromisoformat(iso_text.replace("Z", "+00:00")).timestamp()


def settle_cron(remote: Remote, sched_id: str, timeout: float = 120) -> float:
    """Wait until every slot due by now is handled, pause the schedule; its next slot then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nxt = _ts(remote.schedule(sched_id).next_at)
        if nxt > time.time() + 1:
            remote.pause_schedule(sched_id)
            return nxt
        time.sleep(1)
    raise RuntimeError("the cron schedule's due slot was never handled")


def store_rows(db_url: str) -> list[dict]:
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        return list(conn.execute("SELECT id, status, idempotency_key, info_json FROM jobs"))


def drain(db_url: str, timeout: float) -> list[dict]:
    """Until every job in the store has ended (or `timeout`): the rows then."""
    deadline, said = time.monotonic() + timeout, 0.0
    while True:
        rows = store_rows(db_url)
        left = sum(r["status"] not in TERMINAL for r in rows)
        if not left or time.monotonic() > deadline:
            return rows
        if time.monotonic() - said > 15:
            log(f"waiting for {left} of {len(rows)} jobs to end")
            said = time.monotonic()
        time.sleep(2)


def checks(stats: Stats, rows: list[dict], sched_id: str, first_slot: float, next_slot: float):
    """(check, found, expected, ok) rows, from the store's rows."""
    by_key = defaultdict(list)
    for r in rows:
        by_key[r["idempotency_key"]].append(r)
    ours = {f"api:bench:{k}" for k, _ in stats.submits}
    accepted = [(k, i) for k, i in stats.submits if i]
    failed = [k for k, i in stats.submits if not i]
    lost = [i for k, i in accepted if [r["id"] for r in by_key[f"api:bench:{k}"]] != [i]]
    doubled = sum(len(v) - 1 for k, v in by_key.items() if k in ours and len(v) > 1)
    strays = [r for r in rows if (r["idempotency_key"] or "").startswith("api:") and r["idempotency_key"] not in ours]
    ended = Counter(r["status"] for r in rows if r["id"] in {i for _, i in accepted})
    recorded_anyway = sum(bool(by_key[f"api:bench:{k}"]) for k in failed)
    slots: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        info = json.loads(r["info_json"] or "{}")
        if info.get("schedule") == sched_id:
            slots[info.get("slot")].append(r["status"])
    want = {_iso(t) for t in range(int(first_slot), int(next_slot), 60)}
    missed, extra = want - set(slots), set(slots) - want
    twice = sum(len(v) - 1 for v in slots.values() if len(v) > 1)
    cron_ok = sum(s == ["SUCCEEDED"] for k, s in slots.items() if k in want)
    return [
        ("submits accepted", len(accepted), "", True),
        ("submits failed (no answer)", len(failed), 0, not failed),
        ("  of those recorded anyway", recorded_anyway, "", True),
        ("accepted jobs lost (key not mapped to its job)", len(lost), 0, not lost),
        ("jobs doubled (a key mapped to two jobs)", doubled, 0, doubled == 0),
        ("jobs no submit asked for", len(strays), 0, not strays),
        ("accepted jobs SUCCEEDED", ended.get("SUCCEEDED", 0), len(accepted), ended.get("SUCCEEDED", 0) == len(accepted)),
        ("cron slots due during the run", len(want), "", True),
        ("cron slots missed", len(missed), 0, not missed),
        ("cron slots doubled (or outside the run)", twice + len(extra), 0, not twice and not extra),
        ("cron slot jobs SUCCEEDED", cron_ok, len(want), cron_ok == len(want)),
    ]


def _iso(t: float) -> str:
    from orchestrator.store import iso

    return iso(t) or ""


def endpoint_table(stats: Stats, seconds: float) -> list[list[str]]:
    def pct(xs: list[float], q: float) -> str:
        if not xs:
            return "n/a"
        xs = sorted(xs)
        return f"{1000 * xs[min(len(xs) - 1, int(q * len(xs)))]:.0f}"

    rows = []
    for name in (*ENDPOINTS, "all"):
        mine = [r for r in stats.rows if name == "all" or r[0] == name]
        answered = [s for _, s, o in mine if o != "failed"]
        rec = sum(o == "recovered" for _, _, o in mine)
        rows.append([name, str(len(mine)), str(rec), str(len(mine) - len(answered)),
                     f"{len(answered) / seconds:.1f}", pct(answered, 0.5), pct(answered, 0.99)])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120, help="how long the clients run")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--submit-rate", type=float, default=0.25, help="jobs a second, all clients together")
    ap.add_argument("--think-s", type=float, default=0.5, help="each client's pause between rounds")
    ap.add_argument("--follow-share", type=float, default=0.1, help="the rounds that follow a log")
    ap.add_argument("--follow-s", type=float, default=20, help="longest follow of one log")
    ap.add_argument("--retry-s", type=float, default=30, help="the client's retry bound")
    ap.add_argument("--period-s", type=float, default=2, help="each replica's scheduler period")
    ap.add_argument("--kill-at", type=float, default=1 / 3, help="when the lease holder is killed (share of --seconds)")
    ap.add_argument("--no-replace", dest="replace", action="store_false",
                    help="leave the killed replica dead (default: a new one on its port 5 s later)")
    ap.add_argument("--pg-at", type=float, default=2 / 3, help="when PostgreSQL restarts (share of --seconds)")
    ap.add_argument("--pg-down-s", type=float, default=3, help="how long PostgreSQL stays down")
    ap.add_argument("--drain-s", type=float, default=600, help="longest wait for the jobs to end")
    ap.add_argument("--keep-logs", type=Path, help="copy the replicas' logs into this folder")
    args = ap.parse_args()

    from tests import pgserver

    why = pgserver.unavailable()
    if why:
        log(f"cannot start PostgreSQL: {why}")
        return 2
    log(f"load average {load_avg():.2f} on {os.cpu_count()} cores")
    pg, replicas = pgserver.PgServer(), []
    try:
        db_url = pg.start()
        log(f"PostgreSQL up on port {pg.port}")
        with OrchHome(prefix="obs") as ray:
            replicas = [Replica(ray.home, db_url, args.period_s) for _ in range(2)]
            token_proc = subprocess.run([ORCH, "token", "create", "bench"], env=replicas[0].env(),
                                        capture_output=True, text=True, timeout=120, cwd=str(ROOT))
            if token_proc.returncode != 0:
                raise RuntimeError(f"orch token create failed: {token_proc.stderr[-2000:]}")
            token = token_proc.stdout.strip()
            for r in replicas:
                r.start()
            log(f"replicas on {', '.join(r.url for r in replicas)}: {[r.role() for r in replicas]}")
            return run(args, pg, db_url, ray.home, replicas, token)
    finally:
        for r in replicas:
            r.stop()
        if args.keep_logs:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
        for r in replicas:
            r.remove(args.keep_logs)
        pg.stop()
        log(f"load average {load_avg():.2f} at the end")


def run(args, pg, db_url: str, home: Path, replicas: list[Replica], token: str) -> int:
    urls = [r.url for r in replicas]
    admin = Remote(urls, token, timeout_s=60, upload_max_bytes=0, retry_s=args.retry_s)
    sched_id, first_slot = register_cron(admin, home)
    log(f"cron schedule {sched_id}: its first slot {_iso(first_slot)}")
    job_file = home / "job.yaml"
    job_file.write_text(JOB)
    stats = Stats()
    load = Load(args, urls, token, job_file, stats)
    threads = [threading.Thread(target=load.client, args=(n,), daemon=True) for n in range(args.clients)]
    for t in threads:
        t.start()
    log(f"{args.clients} clients for {args.seconds:g} s")
    fault_rows = faults(args, replicas, pg, load.began)
    time.sleep(max(0.0, load.began + args.seconds - time.monotonic()))
    load.stop.set()
    for t in threads:
        t.join(args.follow_s + 120)
    ran_s = time.monotonic() - load.began
    log(f"clients stopped after {ran_s:.0f} s; {len(stats.rows)} requests")
    next_slot = settle_cron(admin, sched_id)
    rows = drain(db_url, args.drain_s)
    print_table(f"{args.clients} clients, {ran_s:.0f} s, 2 replicas on one PostgreSQL (latency of "
                "answered requests, retries included)",
                ["endpoint", "requests", "recovered by retry", "failed", "answered/s", "p50 ms", "p99 ms"],
                endpoint_table(stats, ran_s))
    print_table("faults", ["event", "at s", "effect"], fault_rows)
    found = checks(stats, rows, sched_id, first_slot, next_slot)
    print_table("checks", ["check", "found", "expected", "ok"],
                [(c, f, e, "yes" if ok else "NO") for c, f, e, ok in found])
    if stats.errors:
        print_table("errors no retry recovered from", ["error", "count"], stats.errors.most_common(10))
    tracebacks = [(r.port, r.logs().count("Traceback")) for r in replicas]
    print_table("replica logs", ["port", "tracebacks", "lines"],
                [(p, n, len(r.logs().splitlines())) for (p, n), r in zip(tracebacks, replicas)])
    return 0 if all(ok for *_, ok in found) else 1


if __name__ == "__main__":
    sys.exit(main())
