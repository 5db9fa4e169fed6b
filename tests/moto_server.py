"""A real S3 protocol server for tests: moto's server on a free loopback port, one bucket."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

# Fake credentials: moto accepts any, and the AWS chain must find some to sign requests.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class MotoS3:
    endpoint: str
    bucket: str
    proc: subprocess.Popen

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def keys(self, prefix: str = "") -> dict[str, int]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                        Prefix=prefix)
        return {o["Key"]: o["Size"] for p in pages for o in p.get("Contents", [])}


def start(timeout: float = 20.0) -> MotoS3:
    """Start moto's server and wait until it answers; the caller must `stop` it."""
    exe = Path(sys.executable).with_name("moto_server")
    for _ in range(3):  # the free port may be taken between choosing and binding it
        port = _free_port()
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]
        proc = subprocess.Popen([*cmd, "-H", "127.0.0.1", "-p", str(port)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env={**os.environ, **CREDENTIALS})
        endpoint = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).close()
                server = MotoS3(endpoint, f"orch-test-{uuid.uuid4().hex[:8]}", proc)
                server.client().create_bucket(Bucket=server.bucket)
                return server
            except OSError:
                time.sleep(0.1)
        stop(proc)
    raise RuntimeError("moto's S3 server did not start")


def stop(proc: subprocess.Popen) -> None:
    """Stop exactly the process `start` started."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(3)  # it exits in a fraction of a second when not starved of CPU
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def moto_s3() -> Iterator[MotoS3]:
    server = start()
    try:
        yield server
    finally:
        stop(server.proc)
