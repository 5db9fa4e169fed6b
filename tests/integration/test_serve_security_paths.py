"""Bob, holding a plain token, turns a real `orch serve` (one process for the module, no Ray)
against the server itself: a workdir or a file mount naming the server's own files (its
ORCH_HOME/logs, where another user's saved log is), a relative workdir read beside a
`file` inside the server's home, a `secrets: {NAME: null}` that reads the server's
environment, and text no path can hold. Each is refused with HTTP 400, in words that do
not tell whether the server has the path or the variable, and nothing is recorded.

The attack jobs ask for 8 H100s, which this server cannot place: on code without these
checks they end at placement instead of launching a job (and a Ray) here."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import short_tmp
from tests.integration.test_serve import Server, _serve_home, _token

pytestmark = pytest.mark.integration

UNPLACEABLE = "resources: {accelerators: 'H100:8'}\n"


@pytest.fixture(scope="module")
def server():
    """The server, with a saved log of alice's in its HOME/logs (0700, as orch makes it), a
    variable only its environment holds, and one name its admin lists for every user."""
    for home in _serve_home(short_tmp("ohp")):
        logs = home / "logs"
        logs.mkdir(mode=0o700)
        (logs / "orch-alice0001.log").write_text("alice's training log\n")
        served = Server(home, env={"SERVER_ONLY_VAR": "only-the-server-has-this",
                                   "LISTED_VAR": "listed-for-everyone",
                                   "ORCH_SERVE_ENV_SECRETS": json.dumps({"*": ["LISTED_VAR"]})})
        try:
            yield served
        finally:
            served.stop()


def post(server: Server, who: str, path: str, body) -> tuple[int, dict]:
    """(status, JSON body); `body` as bytes is sent as it is (raw JSON)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(server.url + path, data=data, method="POST", headers={
        "Authorization": f"Bearer {_token(server.log.parent, who)}",
        "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, {"error": raw.decode(errors="replace")}


def refusals(server: Server, body_for, there: str, not_there: str) -> dict:
    """Bob's plan and submit of the same job with a server path that exists and one that
    does not: each answer's (status, error, hint) with the path written as PATH."""
    out = {}
    for path in (there, not_there):
        for endpoint in ("/v1/plan", "/v1/jobs"):
            code, body = post(server, "bob", endpoint, body_for(path))
            shown = json.dumps(body).replace(path, "PATH")
            assert "alice's training log" not in shown and str(server.log.parent) not in shown, shown
            out[(endpoint, path == there)] = (code, shown)
    return out


def assert_refused_alike(answers: dict, words: str) -> None:
    for endpoint in ("/v1/plan", "/v1/jobs"):
        there, missing = answers[(endpoint, True)], answers[(endpoint, False)]
        assert there[0] == 400 and words in there[1], there
        assert there == missing, (endpoint, there, missing)


def test_bobs_job_cannot_name_the_servers_files(server):
    home = server.log.parent
    logs = str(home / "logs")
    # An absolute workdir: the server's logs folder, which it would pack and run the job in.
    answers = refusals(server, lambda p: {"spec": f"name: steal\nworkdir: {p}\n{UNPLACEABLE}"
                                                  "run: cat *.log\n"},
                       logs, str(home / "nothere"))
    assert_refused_alike(answers, "workdir: 'PATH' is a folder on the server, which a job sent "
                                  "to orch serve may not name")
    assert "send the workdir as an upload" in answers[("/v1/plan", True)][1]
    # A relative workdir, read beside a `file` that Bob says is in the server's home.
    answers = refusals(server, lambda p: {"spec": f"name: steal\nworkdir: ../..\n{UNPLACEABLE}"
                                                  "run: cat logs/*.log\n",
                                          "file": f"{p}/a/job.yaml"},
                       logs, str(home / "nothere"))
    assert_refused_alike(answers, "workdir: '../..' is a folder on the server")
    # A file mount from the server's disk, which SkyPilot would copy to Bob's VM.
    answers = refusals(server, lambda p: {"spec": f"name: steal\nfile_mounts: {{/loot: '{p}'}}\n"
                                                  f"{UNPLACEABLE}run: cat /loot/*.log\n"},
                       logs, str(home / "nothere"))
    assert_refused_alike(answers, "file_mounts./loot: 'PATH' is a path on the server, which a "
                                  "job sent to orch serve may not read")
    # Nothing of it was recorded.
    req = urllib.request.Request(server.url + "/v1/jobs", headers={
        "Authorization": f"Bearer {_token(home, 'root')}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert [j for j in json.loads(r.read()) if j["name"] == "steal"] == []


def test_bobs_job_reads_only_the_server_variables_its_admin_lists(server):
    answers = refusals(server, lambda name: {"spec": f"name: env\nsecrets: {{{name}: null}}\n"
                                                     f"{UNPLACEABLE}run: echo ${name}\n"},
                       "SERVER_ONLY_VAR", "NOT_SET_ANYWHERE")
    assert_refused_alike(answers, "secrets.PATH: this server fills only the names its admin "
                                  "lists in serve_env_secrets for you")
    assert "--secret PATH=" in answers[("/v1/jobs", True)][1]
    code, body = post(server, "bob", "/v1/plan", {"spec": "name: env\nsecrets: {LISTED_VAR: null}\n"
                                                          "run: echo $LISTED_VAR\n"})
    assert code == 200 and body["target"] == "local", body
    # A value Bob sends himself is his, whatever the name.
    code, body = post(server, "bob", "/v1/plan", {"spec": "name: env\nsecrets: {SERVER_ONLY_VAR: null}\n"
                                                          "run: echo\n",
                                                  "secrets": {"SERVER_ONLY_VAR": "bobs-own"}})
    assert code == 200, body


def test_text_that_no_path_can_hold_is_a_400_naming_the_field(server):
    for endpoint in ("/v1/jobs", "/v1/plan"):  # each was a 500 in the submit
        code, body = post(server, "bob", endpoint, {"spec": "name: nul\nrun: echo\n",
                                                    "file": "/srv/jobs/a\u0000b.yaml"})
        assert code == 400 and body["error"].startswith("file: contains a NUL character"), body
        # A lone surrogate: the YAML escape \ud800 in the job file's workdir, and the JSON
        # escape in an --env value (json.dumps writes it as the six characters \ud800).
        spec = f'name: sur\nworkdir: "/srv/\\ud800"\n{UNPLACEABLE}run: echo\n'
        code, body = post(server, "bob", endpoint, json.dumps({"spec": spec}).encode())
        assert code == 400 and body["error"].startswith("<job>:2: workdir: contains \\ud800"), body
        raw = json.dumps({"spec": f"name: sur\n{UNPLACEABLE}run: echo\n", "env": {"A": "\ud800"}})
        assert "\\ud800" in raw
        code, body = post(server, "bob", endpoint, raw.encode())
        assert code == 400 and body["error"].startswith("env.A: contains \\ud800"), body
    log = Path(server.log).read_text()
    assert "Traceback" not in log, log[-3000:]
