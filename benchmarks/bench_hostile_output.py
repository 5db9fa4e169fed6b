"""What a hostile job's output costs `orch serve` (issue 47): the CPU seconds of one
`GET /v1/jobs/ID/logs` for a finished job whose kept log is 2 MB of `a-a-a-...` (the server
holds its secret values no longer: before issue 47 it searched the log for them by digest
at every read), and of the digest search itself on such a log (a running job read by a
replica that does not hold the values), per MB. In-process (FastAPI's test client, no
network), on a fresh home under /tmp; about 30 s before issue 47, under a second after.

    .venv/bin/python benchmarks/bench_hostile_output.py [--mb 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import log  # noqa: E402

# Three secret values of three lengths, as a job with HF_TOKEN, WANDB_API_KEY and
# AWS_SECRET_ACCESS_KEY gives them.
VALUES = ["hf_abcdefghijklmnopqrstuvwxyzABCDEFGH", "0123456789abcdef0123456789abcdef01234567",
          "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=2.0, help="the log's size in MB (2)")
    args = ap.parse_args()
    for k in list(os.environ):
        if k.startswith("ORCH_"):
            del os.environ[k]
    home = Path(tempfile.mkdtemp(prefix="orch-bh-", dir="/tmp"))
    try:
        run(home, int(args.mb * 1_000_000))
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run(home: Path, size: int) -> None:
    from fastapi.testclient import TestClient

    from orchestrator.base import redact
    from orchestrator.server import auth
    from orchestrator.server.app import create_app
    from orchestrator.server.scheduler import Scheduler
    from orchestrator.settings import Settings
    from orchestrator.store import Store

    settings = Settings(home=home, mode="local")
    store = Store(home / "orch.db")
    token, digest = auth.new_token()
    store.add_token("alice", digest, admin=False)
    key = redact.store_key(home)
    salt = redact.new_salt()
    job = store.create_job(name="loud", spec={"run": "yes a- | tr -d '\\n'"}, kind=None,
                           target="local", fingerprint="f",
                           info={"secret_salt": salt,
                                 "secret_hmacs": redact.digests(VALUES, salt, key),
                                 "secret_lengths": redact.lengths(VALUES),
                                 **redact.heads_info(VALUES, salt, key)})
    text = "a-" * (size // 2) + "\n"
    log_path = home / "logs" / f"{job.id}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(text)
    store.keep_log(job.id, text)
    store.set_status(job.id, "SUCCEEDED", "done", log_path=str(log_path))
    log(f"a finished job with a {size / 1e6:g} MB log of a-a-a-...; reading it")
    with TestClient(create_app(settings, Scheduler(settings), run_scheduler=False)) as client:
        t0, w0 = time.process_time(), time.perf_counter()
        r = client.get(f"/v1/jobs/{job.id}/logs", headers={"Authorization": f"Bearer {token}"})
        cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    assert r.status_code == 200 and len(r.text) == len(text), r.status_code
    rec = store.get(job.id)
    info = rec.info
    search = redact.Redactor([], info.secret_salt, info.secret_hmacs, key, (),
                             info.secret_lengths, getattr(info, "secret_heads", ()))
    t0 = time.process_time()
    search(text)
    per_mb = (time.process_time() - t0) / (size / 1e6)
    # A job knows its own values: the first characters of one at every place it can.
    heads = (VALUES[0][:4] + "-") * (size // 5)
    t0 = time.process_time()
    search(heads)
    heads_per_mb = (time.process_time() - t0) / (size / 1e6)
    print(f"{'what':<52} {'figure':>10}")
    print(f"{'GET /logs of the finished job, CPU s':<52} {cpu:>10.2f}")
    print(f"{'GET /logs of the finished job, wall s':<52} {wall:>10.2f}")
    print(f"{'digest search of a-a-a-..., CPU s per MB':<52} {per_mb:>10.2f}")
    print(f"{'digest search of hf_a-hf_a-... (heads), CPU s per MB':<52} {heads_per_mb:>10.2f}")
    print("baseline (e407815, the 2-core dev machine): GET /logs 4.70 CPU s; digest search "
          "2.13 CPU s per MB of a-a-a-...")


if __name__ == "__main__":
    main()
