"""The shell lines that start orch's runner on a Ray cluster under the Python of its Ray.

`python3` on a node's PATH is whatever the machine has first; the cluster's Ray runs under
the interpreter `ray start` was launched with, often a virtualenv that is not on the PATH.
The Ray job supervisor that runs the entrypoint is a worker of that interpreter. Its
/proc/PID/exe names the base interpreter only (a venv's python is a symlink, resolved), so
the environment is read from the `ray/_raylet.so` it has loaded (/proc/PID/maps), unless
the cluster names its interpreter in ORCH_RAY_PYTHON (a user's own cluster does:
jobs/user_cluster.py, whose Python may find Ray through a .pth file). Each
candidate must find ray and torch (importlib.util.find_spec: no import, milliseconds);
without one the job fails at once saying so, as a `result` event and on stderr.
"""

from __future__ import annotations

import shlex

# Exit status of a job whose node has no Python with ray and torch.
NO_PYTHON_EXIT = 3

_CHECK = ('import importlib.util as u, sys; '
          'sys.exit(not (u.find_spec("ray") and u.find_spec("torch")))')

# Walks up from the entrypoint's shell to the first process with Ray's core library loaded.
_FIND = r'''orch_ok=__CHECK__
orch_py= orch_tried=
orch_try() {
  [ -x "$1" ] || return 1
  orch_tried="$orch_tried $1"
  "$1" -c "$orch_ok" 2>/dev/null && orch_py=$1
}
orch_pid=$PPID
[ -z "$ORCH_RAY_PYTHON" ] || orch_try "$ORCH_RAY_PYTHON"
while [ -z "$orch_py" ] && [ "${orch_pid:-0}" -gt 1 ] 2>/dev/null; do
  orch_lib=$(grep -m1 -o '/.*/ray/_raylet\.so$' "/proc/$orch_pid/maps" 2>/dev/null)
  if [ -n "$orch_lib" ]; then
    orch_env=${orch_lib%/ray/_raylet.so}; orch_env=${orch_env%/lib/python*}
    if [ -f "$orch_env/pyvenv.cfg" ]; then
      orch_try "$orch_env/bin/python3" || orch_try "$orch_env/bin/python"
    fi
    [ -n "$orch_py" ] || orch_try "$(readlink "/proc/$orch_pid/exe")"
    break
  fi
  orch_pid=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$orch_pid/status" 2>/dev/null)
done
[ -n "$orch_py" ] || orch_try "$(command -v python3)" || orch_try "$(command -v python)"
if [ -z "$orch_py" ]; then
  orch_msg="no Python with ray and torch for orch's runner on node ${HOSTNAME:-?}"
  orch_msg="$orch_msg (tried:${orch_tried:- none}): install torch into the Python"
  orch_msg="$orch_msg environment that runs ray start on every node"
  echo "orch: $orch_msg" >&2
  orch_msg=${orch_msg//[\"\\]/}  # what JSON would need escaped
  printf '::orch::{"event":"result","ok":false,"error":"%s"}\n' "$orch_msg"
  exit __EXIT__
fi'''


def find_python() -> str:
    """Shell lines that set $orch_py to the Python of the Ray running this job, or end the
    job (exit NO_PYTHON_EXIT) with a clear message when no Python there has ray and torch."""
    return _FIND.replace("__CHECK__", shlex.quote(_CHECK)).replace("__EXIT__", str(NO_PYTHON_EXIT))


def runner_command(module: str = "_orch_runner.runner") -> str:
    """Shell lines that run `python -m module` under the cluster Ray's own Python."""
    return f'{find_python()}\n"$orch_py" -m {shlex.quote(module)}'
