"""A `train:` job's `setup:` runs without the job's event key (issue 46, part 4): the
runner runs it as a child started after it took the key from a pipe (jobs/secret_env.py),
so neither its environment, its ancestors' nor an inherited fd holds the key."""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys

from jobs import secret_env
from jobs.events import KEY_VAR
from jobs.request import ENV_VAR, RunRequest
from orchestrator.service.orch import Orch
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text

# A setup: that writes to OUT everything of its own and its ancestors' a process can read
# without privilege: environments, command lines, and what each inherited fd yields.
DUMP = r"""set +e
{
echo "== env"; env
echo "== secret sha $(printf %s "$A_SECRET" | sha256sum | cut -d' ' -f1)"
echo "== self"; tr '\0' '\n' < /proc/$$/environ; tr '\0' ' ' < /proc/$$/cmdline; echo
p=$PPID; i=0
while [ "$p" -gt 1 ] && [ $i -lt 5 ]; do
  echo "== ancestor $p"; tr '\0' '\n' < /proc/$p/environ; tr '\0' ' ' < /proc/$p/cmdline; echo
  p=$(cut -d' ' -f4 /proc/$p/stat); i=$((i+1))
done
for d in /proc/$$/fd /proc/$PPID/fd; do
  for f in $d/*; do
    n=${f##*/}; [ "$n" -gt 2 ] || continue
    echo "== fd $f -> $(readlink $f)"; timeout 0.3 head -c 65536 "$f"; echo
  done
done
} > OUT 2>&1
set -e
"""


def dump(out) -> str:
    return DUMP.replace("OUT", str(out))


def _orch(tmp_path) -> Orch:
    return Orch(Settings(home=tmp_path / "home", mode="local"))


def test_a_ray_targets_train_setup_goes_to_the_runner_not_the_shell(tmp_path):
    orch = _orch(tmp_path)
    train = load_spec_text("train:\n  job: image-classification\nsetup: echo hi\n")
    for target in ("local", "onprem"):
        launch = orch.launch_for("orch-s", train, target, secrets={}, event_key="k" * 64)
        assert launch.env[secret_env.SETUP_VAR] == "echo hi", target
        assert "echo hi" not in launch.entrypoint and "-m _orch_runner" in launch.entrypoint
        assert launch.secrets == {KEY_VAR: "k" * 64}  # to the runner by its secret file
    # A run: job has no runner (nor key): its setup stays in its shell, as before.
    run = load_spec_text("run: echo job\nsetup: echo hi\n")
    launch = orch.launch_for("orch-r", run, "local", secrets={})
    assert secret_env.SETUP_VAR not in launch.env and "set -e\necho hi\nset +e" in launch.entrypoint


def test_take_key_reads_the_pipe_once_and_closes_it():
    values = {"A": "1", KEY_VAR: "secret-key"}
    passed = secret_env.hand_key(values)
    assert values == {"A": "1"} and set(passed) == {secret_env.KEY_FD_VAR}
    fd = int(passed[secret_env.KEY_FD_VAR])
    env = dict(passed)
    assert secret_env.take_key(env) == {KEY_VAR: "secret-key"} and env == {}
    try:
        os.fstat(fd)
        raise AssertionError("the pipe is still open")
    except OSError:
        pass
    assert secret_env.hand_key({"A": "1"}) == {} and secret_env.take_key({}) == {}


def _runner(tmp_path, setup: str, key: str, token: str) -> subprocess.CompletedProcess:
    """secret_env -> bash -> the real runner's main, as a Ray target starts it; setup ends
    the job with its own exit code before the runner reaches Ray."""
    secret_env.write(tmp_path / ".orch-env-t", {KEY_VAR: key, "A_SECRET": token})
    env = {**os.environ, secret_env.FILE_VAR: ".orch-env-t", secret_env.SETUP_VAR: setup,
           ENV_VAR: RunRequest(job_id="orch-t", target="image-classification").to_json()}
    env.pop(KEY_VAR, None)
    return subprocess.run([sys.executable, "-m", "jobs.secret_env", "--", "bash", "-c",
                           f"echo before; {sys.executable} -m jobs.runner"],
                          cwd=tmp_path, env={**env, "PYTHONPATH": os.getcwd()},
                          capture_output=True, text=True, timeout=60)


def test_setup_finds_no_key_but_its_secrets_and_its_exit_code_fails_the_job(tmp_path):
    key, token = secrets.token_hex(32), "tok-" + secrets.token_hex(8)
    out = tmp_path / "dump.txt"
    proc = _runner(tmp_path, dump(out) + "echo setup ran\nexit 7\n", key, token)
    assert proc.returncode == 7, proc.stderr[-2000:]
    assert "setup ran" in proc.stdout and "::orch::" not in proc.stdout  # as a shell's set -e
    text = out.read_text()
    assert "== ancestor" in text and f"{ENV_VAR}=" in text  # its parent, the runner, read
    assert f"== secret sha {hashlib.sha256(token.encode()).hexdigest()}" in text
    assert key not in text and key not in proc.stdout + proc.stderr
    assert not (tmp_path / ".orch-env-t").exists()
    # `set -e`: a failing line stops setup there; the runner never starts the run.
    proc = _runner(tmp_path, "false\necho not here\n", key, token)
    assert (proc.returncode, "not here" in proc.stdout) == (1, False), proc.stderr[-2000:]
