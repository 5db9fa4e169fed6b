"""Commands that do not go through `orch serve` say so when ORCH_SERVER is set (issue 16):
they act on this machine, and a user pointing at a server must not think otherwise."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_orch

SERVER = "http://127.0.0.1:9"  # never asked: these commands do not use it


@pytest.mark.parametrize("args, acts_on", [
    (("token", "list", "--json"), "this machine's store"),
    (("local", "status", "--json"), "this machine's Ray instance"),
    (("advise", "--json"), "this machine's store"),
])
def test_a_local_only_command_says_so_and_keeps_its_json(orch_home, args, acts_on):
    proc = run_orch(orch_home, *args, ORCH_SERVER=SERVER, ORCH_TOKEN="orch_x", timeout=120)
    assert proc.returncode == 0, proc.stderr
    json.loads(proc.stdout)  # stdout stays the command's JSON
    said = " ".join(proc.stderr.split())
    assert f"`orch {args[0]}` works on {acts_on}" in said and f"not through ORCH_SERVER ({SERVER})" in said


def test_without_a_server_nothing_is_said(orch_home):
    proc = run_orch(orch_home, "token", "list", "--json")
    assert proc.returncode == 0 and "ORCH_SERVER" not in proc.stderr, proc.stderr
