"""`orch serve`'s /metrics scraped by a real Prometheus (Debian's `prometheus`; `make test`
installs it) while a job runs: a real server on a loopback port with a SQLite store, the
session's local Ray, and a Prometheus of this test's own, on a free loopback port with a
temporary data folder, scraping every second with the server's metrics token. What
Prometheus's HTTP API answers is what the test checks; `promtool check metrics` lints the
endpoint's text. The test stops exactly the Prometheus it started."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import short_tmp
from tests.integration.conftest import wait_until
from tests.integration.test_serve import Server, _free_port
from tests.integration.test_serve_queue import _api, home  # noqa: F401 (fixture)

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not (shutil.which("prometheus") and shutil.which("promtool")),
                                 reason="no prometheus/promtool on PATH: `make prometheus` "
                                        "installs Debian's prometheus (as root with apt-get)")]

METRICS_TOKEN = "prometheus-reads-metrics-" + "0" * 16
# The built-in job on one CPU worker, long enough to be scraped while it runs (it is
# cancelled once the test has seen it).
JOB = """name: scraped
train: {job: image-classification, config: {epochs: 400}}
scaling: {num_workers: 1, use_gpu: false}
"""
# Each worker reads its CPU every second, and its live point is the mean of 2 s of them:
# the running job's utilization is in the store seconds after its worker starts.
SERVER_ENV = {"ORCH_METRICS_TOKEN": METRICS_TOKEN, "ORCH_TELEMETRY_INTERVAL_SECONDS": "1",
              "ORCH_TELEMETRY_POINT_SECONDS": "2"}


class Prometheus:
    """One `prometheus` process scraping `target` (host:port) every second, with the token in
    a credentials file, and once more without one; stop() ends exactly it."""

    def __init__(self, folder: Path, target: str, token: str):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (folder / "token").write_text(token)
        (folder / "token").chmod(0o600)
        # JSON is YAML: the scrape config written without a YAML library.
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                  "scrape_configs": [
                      {"job_name": "orch", "authorization": {"credentials_file": str(folder / "token")},
                       "static_configs": [{"targets": [target]}]},
                      {"job_name": "orch-no-token", "static_configs": [{"targets": [target]}]}]}
        (folder / "prometheus.yml").write_text(json.dumps(config))
        self.log = folder / "prometheus.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                ["prometheus", f"--config.file={folder / 'prometheus.yml'}",
                 f"--storage.tsdb.path={folder / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=str(folder))
        try:
            wait_until("Prometheus to be ready", self._ready, timeout=60)
        except AssertionError:
            self.stop()
            raise AssertionError(f"prometheus did not start: {self.log.read_text()[-3000:]}") from None

    def _ready(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> list:
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}",
                                    timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]["result"] if "result" in body["data"] else body["data"]

    def query(self, promql: str) -> dict:
        """An instant query's answer: each series' labels (as sorted pairs) -> its value."""
        return {tuple(sorted(s["metric"].items())): float(s["value"][1])
                for s in self.api("query", query=promql)}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _by_state(prom: Prometheus) -> dict:
    return {dict(k)["state"]: v for k, v in prom.query("sum by (state) (orch_jobs)").items()}


def test_prometheus_scrapes_the_job_counts_and_a_running_jobs_utilization(home):  # noqa: F811
    started = time.monotonic()
    server = Server(home, env=SERVER_ENV)
    folder = short_tmp("opm")
    prom = None
    try:
        prom = Prometheus(folder, f"127.0.0.1:{server.port}", METRICS_TOKEN)
        job_id = _api(server, "POST", "/v1/jobs", {"spec": JOB})["id"]
        mine = f'{{job_id="{job_id}"}}'
        # Through Prometheus: the job counted as RUNNING, its worker's utilization (its CPU,
        # psutil) and its throughput once an epoch has reported.
        wait_until("Prometheus to see the job running with its utilization and throughput", lambda: (
            _by_state(prom) == {"RUNNING": 1.0}
            and prom.query(f"orch_job_device_utilization_ratio{mine}")
            and prom.query(f"orch_job_samples_per_second{mine}")), timeout=180)
        util = prom.query(f"orch_job_device_utilization_ratio{mine}")
        assert [dict(k) for k in util] == [{
            "__name__": "orch_job_device_utilization_ratio", "instance": f"127.0.0.1:{server.port}",
            "job": "orch", "job_id": job_id, "kind": "exploratory", "name": "scraped", "rank": "0",
            "source": "psutil", "target": "local"}]
        assert all(0.0 <= v <= 1.0 for v in util.values()), util
        assert list(prom.query(f"orch_job_samples_per_second{mine}").values())[0] > 0
        assert prom.query('sum(orch_queue_length)') == {(): 0.0}
        # Owned hardware is never free: the running job has cost something already.
        assert list(prom.query(f"orch_job_cost_so_far_usd{mine}").values())[0] > 0
        # The scrape without a token: the target is down, with the server's 401 (once it has
        # been scraped: on a warm Ray the job can run before Prometheus's first look at it).
        def no_token() -> list:
            return [t for t in prom.api("targets")["activeTargets"]
                    if t["labels"]["job"] == "orch-no-token" and t["health"] != "unknown"]

        down = wait_until("the scrape without a token to be tried", no_token, timeout=30)
        assert down[0]["health"] == "down" and "401" in down[0]["lastError"], down

        # promtool lints the text Prometheus scraped, running job included.
        text = _metrics_text(server)
        assert f'job_id="{job_id}"' in text
        lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                              text=True, timeout=60)
        assert (lint.returncode, lint.stdout, lint.stderr) == (0, "", ""), lint

        # Cancelled, the job is counted so, and its series end (no series of an ended job).
        _api(server, "POST", f"/v1/jobs/{job_id}/cancel")
        wait_until("Prometheus to see the job cancelled and its series gone", lambda: (
            _by_state(prom) == {"CANCELLED": 1.0}
            and not prom.query(f"orch_job_device_utilization_ratio{mine}")), timeout=120)
    finally:
        if prom is not None:
            prom.stop()
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nscraped, read back and cancelled in {time.monotonic() - started:.1f} s")


def _metrics_text(server: Server) -> str:
    req = urllib.request.Request(server.url + "/metrics",
                                 headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        return r.read().decode()
