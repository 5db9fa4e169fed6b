"""Issue 32, findings 1, 3 and 8 (parts), against a real `orch serve` on the session's local
Ray: Alice's `run:` job prints its secret values in five forms and fails. Bob, another
token holder, reads every endpoint; the store and ORCH_HOME/logs are searched; the server
is restarted (the values it held are gone, only the record's digests are left) and read
again. The job also prints forged `::orch::` result and verdict lines, and an admin
follows its log until the admin's token is revoked."""

from __future__ import annotations

import base64
import http.client
import json
import secrets
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import short_tmp, store_at, store_text
from tests.integration.conftest import on_session_ray, wait_until
from tests.integration.test_serve import Server, _serve_home

pytestmark = pytest.mark.integration

JOB = """\
name: leaky
envs: {{HF_TOKEN: '{HF_TOKEN}', WANDB_API_KEY: '{WANDB_API_KEY}', EPOCHS: 1}}
secrets: {{DB_PASSWORD: '{DB_PASSWORD}', API_SECRET: '{API_SECRET}'}}
run: |
  for v in "$HF_TOKEN" "$WANDB_API_KEY" "$DB_PASSWORD" "$API_SECRET"; do
    printf '%s\\n' "$v" "token is $v." "https://example.invalid/cb?t=$v&a=1" "pw:$v" "/p/$v/x"
  done
  echo '::orch::{{"event":"result","ok":false,"error":"forged by the job"}}'
  echo '::orch::{{"event":"verdict","kind":"forged-verdict","reasons":["forged"],"advice":["forged"]}}'
  echo "printed them all"
  sleep 7
  exit 3
"""


def new_values() -> dict:
    return {"HF_TOKEN": "hf_" + secrets.token_hex(16),
            "WANDB_API_KEY": secrets.token_hex(20),
            # base64 with '=' padding, and one with ':' in it (a password)
            "DB_PASSWORD": base64.b64encode(secrets.token_bytes(16)).decode(),
            "API_SECRET": "p@ss:" + secrets.token_urlsafe(12)}


def call(server: Server, token: str, method: str, path: str, body=None, timeout=30) -> tuple[int, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server.url + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def found(values: dict, places: dict) -> list:
    """(where, name) for each place that holds a value as printed."""
    return [(where, name) for where, blob in places.items() for name, v in values.items()
            if v.encode() in blob]


@pytest.fixture(scope="module")
def home(ray_home):
    yield from _serve_home(on_session_ray(short_tmp("ohx"), ray_home))  # alice, bob, root


def follow(server: Server, token: str, job_id: str, out: dict) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request("GET", f"/v1/jobs/{job_id}/logs?follow=true",
                     headers={"Authorization": f"Bearer {token}"})
        out["body"] = conn.getresponse().read().decode()
    finally:
        conn.close()


def test_a_failed_jobs_secrets_reach_no_other_user_no_store_and_no_log(home):
    tokens = json.loads((home / "tokens.json").read_text())
    values = new_values()
    server = Server(home)
    try:
        code, body = call(server, tokens["alice"], "POST", "/v1/jobs",
                          {"spec": JOB.format(**values)})
        assert code == 201, body
        job_id = json.loads(body)["id"]

        def running():
            status = json.loads(call(server, tokens["bob"], "GET", f"/v1/jobs/{job_id}")[1])["status"]
            assert status in ("PENDING", "RUNNING"), status  # it sleeps 7 s once it printed
            return status == "RUNNING"
        wait_until("the job to run", running, timeout=120)
        streamed: dict = {}
        reader = threading.Thread(target=follow, args=(server, tokens["root"], job_id, streamed))
        reader.start()
        wait_until("the revoked token's stream to print the job's lines",
                   lambda: "printed them all" in call(server, tokens["bob"], "GET",
                                                      f"/v1/jobs/{job_id}/logs")[1].decode(),
                   timeout=60)
        store = store_at(home)
        store.revoke_token("root")
        store.close()
        reader.join(30)
        assert not reader.is_alive(), "a revoked token's stream went on"

        def ended():
            rec = json.loads(call(server, tokens["bob"], "GET", f"/v1/jobs/{job_id}")[1])
            return rec if rec["status"] in ("FAILED", "SUCCEEDED", "CANCELLED") else None
        rec = wait_until("the job to end", ended, timeout=120)
        # The stream ended for the revocation, while the job still ran (it sleeps 7 s).
        assert streamed["body"].rstrip().endswith("its token was revoked"), streamed["body"][-300:]

        places = {f"GET /v1/jobs/{job_id}": json.dumps(rec).encode()}
        for path in ("/v1/jobs", f"/v1/jobs/{job_id}/logs", "/v1/summary"):
            code, body = call(server, tokens["bob"], "GET", path)
            assert code == 200, body
            places[f"GET {path}"] = body
        places["the revoked token's stream"] = streamed["body"].encode()
        log = places[f"GET /v1/jobs/{job_id}/logs"].decode()
    finally:
        server.stop()

    # Every form of every value was printed, and is redacted where it stood.
    for form in ("token is <redacted>.", "cb?t=<redacted>&a=1", "pw:<redacted>", "/p/<redacted>/x"):
        assert log.count(form) == 4, (form, log)

    later = Server(home)  # a new process: the values are gone, only digests remain
    try:
        for path in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/logs", "/v1/jobs", "/v1/summary"):
            code, body = call(later, tokens["bob"], "GET", path)
            assert code == 200, body
            places[f"restarted: GET {path}"] = body
    finally:
        later.stop()
    places["the store"] = store_text(home).encode()
    for p in Path(home, "logs").glob("*"):
        places[str(p)] = p.read_bytes()
    places["the servers' logs"] = server.log.read_bytes() + later.log.read_bytes()
    assert any(str(p).endswith(f"{job_id}.log") for p in places), "the saved log was not searched"
    assert found(values, places) == []
    # The job failed by its own exit, whatever its forged lines said.
    assert rec["status"] == "FAILED", rec
    assert "forged" not in (rec["message"] or "") and "forged" not in json.dumps(rec["metrics"]), rec
