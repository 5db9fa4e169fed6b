"""jobs/warm_python.py with real processes: a warm-Python zygote (torch imported), its
clients as a `run:` job's `python` runs them, what each child sees and what it cannot; a
sleeping process stands in for the raylet whose end ends the zygote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from jobs import warm_python
from tests.conftest import short_tmp

CLIENT = [sys.executable, "-I", "-S", warm_python.__file__]

# What a command sees: whether torch came preloaded, its arguments, folder, path, values,
# random draws and threads; then what the test asked of it.
SCRIPT = r"""
import json, os, random, sys, time
warm = "torch" in sys.modules
import numpy, torch
print(json.dumps({"warm": warm, "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
                  "path1": sys.path[1], "value": os.environ.get("WP_VALUE"),
                  "random": random.random(), "numpy": float(numpy.random.rand()),
                  "threads": torch.get_num_threads(), "pid": os.getpid(),
                  "main": __name__}), flush=True)
what = sys.argv[1] if len(sys.argv) > 1 else ""
if what == "exit3":
    sys.exit(3)
if what == "sleep":
    import subprocess
    child = subprocess.Popen(["sleep", "300"])
    print(json.dumps({"grandchild": child.pid}), flush=True)
    time.sleep(300)
if what == "memory":  # the attacker: what follows a marker anywhere in its own memory
    import memscan
    print(json.dumps({"found": memscan.occurrences(os.getpid(), sys.argv[2].encode())}))
"""


# Every place a marker is in a process's memory, with the 24 bytes that follow it.
MEMSCAN = r"""
def occurrences(pid, needle, after=24):
    found = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            span, perms = line.split()[:2]
            if "r" not in perms or "[vvar]" in line or "[vsyscall]" in line:
                continue
            start, end = (int(x, 16) for x in span.split("-"))
            try:
                mem.seek(start)
                data = mem.read(end - start)
            except (OSError, ValueError, OverflowError):
                continue
            at = data.find(needle)
            while at >= 0:
                found.append(data[at:at + len(needle) + after].decode("latin-1"))
                at = data.find(needle, at + 1)
    return found
"""
_SCAN: dict = {}
exec(MEMSCAN, _SCAN)

@pytest.fixture(scope="module")
def zygote():
    """A warm-Python zygote at a socket of its own, its stand-in raylet, and a command's
    environment that points at it."""
    folder = short_tmp("wp")
    raylet = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    sock = folder / "python.sock"
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"),
            "LANG": os.environ.get("LANG", "C.UTF-8")}
    proc = subprocess.Popen([sys.executable, warm_python.__file__, "--serve", str(sock)],
                            env={**base, "RAY_RAYLET_PID": str(raylet.pid)},
                            stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not sock.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sock.exists(), (folder / "python.sock.log").read_text() if (folder / "python.sock.log").exists() else "no log"
    (folder / "work").mkdir()
    (folder / "work" / "script.py").write_text(SCRIPT)
    (folder / "work" / "memscan.py").write_text(MEMSCAN)
    (folder / "work" / "pkg").mkdir()
    (folder / "work" / "pkg" / "__init__.py").write_text("")
    (folder / "work" / "pkg" / "tool.py").write_text(SCRIPT)
    try:
        yield folder, {**base, warm_python.SOCKET_VAR: str(sock)}, proc
    finally:
        raylet.kill()
        raylet.wait()
        proc.wait(15)  # the zygote ends with its raylet


def _run(folder, env, *args, timeout=60, cwd=None) -> tuple[int, list]:
    proc = subprocess.run(CLIENT + list(args), env=env, cwd=cwd or folder / "work",
                          timeout=timeout, capture_output=True, text=True)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    return proc.returncode, lines


def test_a_script_runs_forked_warm_as_python_would_run_it(zygote):
    folder, env, _ = zygote
    code, out = _run(folder, {**env, "WP_VALUE": "one", "OMP_NUM_THREADS": "1",
                              "PYTHONPATH": "/nonexistent-a"}, "script.py", "exit3")
    assert code == 3, out
    seen = out[0]
    assert seen["warm"] is True and seen["main"] == "__main__"
    assert seen["argv"] == ["script.py", "exit3"] and seen["cwd"] == str(folder / "work")
    assert seen["path0"] == str(folder / "work") and seen["path1"] == "/nonexistent-a"
    assert seen["value"] == "one" and seen["threads"] == 1
    # A module by -m, from the command's folder; and each child's random draws its own.
    code, more = _run(folder, {**env, "WP_VALUE": "two"}, "-u", "-m", "pkg.tool")
    assert code == 0 and more[0]["warm"] is True and more[0]["value"] == "two", more
    assert more[0]["argv"][0] == str(folder / "work" / "pkg" / "tool.py")
    assert more[0]["path0"] == str(folder / "work")
    assert (seen["random"], seen["numpy"]) != (more[0]["random"], more[0]["numpy"])


# A module of the script's own folder under the name of one the zygote preloaded (torch
# imports `random`): python imports it, not the preloaded one. It is the real one re-exported.
SHADOW = """import os, sysconfig
_path = os.path.join(sysconfig.get_paths()["stdlib"], "random.py")
exec(compile(open(_path).read(), _path, "exec"))
SHADOWED = True
"""


@pytest.mark.parametrize("change", ["-c", "hashseed", "locale", "off", "no-zygote", "shadow",
                                    "fifo"])
def test_what_cannot_run_the_same_warm_runs_plain(zygote, change):
    folder, env, _ = zygote
    args, cwd = ["script.py"], None
    if change == "shadow":
        cwd = folder / "shadow"
        cwd.mkdir(exist_ok=True)
        (cwd / "script.py").write_text(SCRIPT.replace('"main": __name__', '"main": __name__, '
                                                      '"shadowed": hasattr(random, "SHADOWED")'))
        (cwd / "random.py").write_text(SHADOW)
    if change == "-c":
        args = ["-c", "import sys, json; print(json.dumps({'warm': 'torch' in sys.modules}))"]
    elif change == "hashseed":
        env = {**env, "PYTHONHASHSEED": "7"}  # a child's hashes would be the zygote's
    elif change == "locale":
        env = {**env, "LANG": "C"}  # its streams' encoding was chosen as the zygote started
    elif change == "fifo":  # another job left a FIFO where the zygote's settings are read
        fifo = folder / "fifo.sock"
        if not os.path.exists(f"{fifo}.env"):
            os.mkfifo(f"{fifo}.env")
        env = {**env, warm_python.SOCKET_VAR: str(fifo)}
    elif change == "off":
        env = {**env, warm_python.SOCKET_VAR: "0"}
    else:
        env = {**env, warm_python.SOCKET_VAR: str(folder / "none.sock")}
    code, out = _run(folder, env, *args, cwd=cwd, timeout=30)
    assert code == 0 and out and out[0]["warm"] is False, out
    if change == "shadow":  # its own module, as python would have imported it
        assert out[0]["shadowed"] is True, out


def test_a_stopped_or_killed_client_takes_the_commands_whole_session(zygote):
    folder, env, _ = zygote
    for how in (signal.SIGTERM, signal.SIGKILL):
        proc = subprocess.Popen(CLIENT + ["script.py", "sleep"], env=env, cwd=folder / "work",
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        child = json.loads(proc.stdout.readline())["pid"]
        grandchild = json.loads(proc.stdout.readline())["grandchild"]
        # A cancel's SIGTERM (to the job's group, the client in it) goes on to the command's
        # whole session, as it would reach a command started in the job's group; a SIGKILL
        # of the client has the zygote end that session.
        os.kill(proc.pid, how)
        assert proc.wait(10) == -how
        pids = (child, grandchild)
        deadline = time.monotonic() + 10
        while any(_running(p) for p in pids):
            assert time.monotonic() < deadline, f"still running after {how!r}: {pids}"
            time.sleep(0.1)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_no_command_finds_an_earlier_commands_value_in_its_memory(zygote):
    """The attacker: a later command of another job searches all of its own memory (what
    the zygote's memory was when it forked) for a value an earlier command had."""
    folder, env, _ = zygote
    value = "wpsecret" + os.urandom(12).hex()  # the attacker knows the marker, not the rest
    code, out = _run(folder, {**env, "WP_VALUE": value}, "script.py", "--token", value)
    assert code == 0 and out[0]["value"] == value and out[0]["warm"] is True
    code, out = _run(folder, env, "script.py", "memory", "wpsecret", timeout=120)
    found = out[-1]["found"]
    assert code == 0 and found, out  # its own marker, at least: the search works
    assert not any(value in f for f in found), found
    # Nor the zygote itself, ever: the value went from the client to its child only.
    assert _SCAN["occurrences"](zygote[2].pid, value.encode()) == []


def test_the_shims_are_made_again_whatever_a_job_left_in_their_place(tmp_path):
    """The shims' folder is in the local Ray's, which a job of the same OS user can write:
    one that left a FIFO (a read would wait for ever) or a link there holds no submit up,
    and the next submit's shims are orch's again."""
    from providers.warm_python import _shims

    script = tmp_path / "warm_python.py"
    folder = _shims(tmp_path / "bin", script)
    kept = (folder / "python").stat().st_mtime_ns
    assert _shims(folder, script) == folder and (folder / "python").stat().st_mtime_ns == kept
    (folder / "python").unlink()
    os.mkfifo(folder / "python")
    (folder / "torchrun").unlink()
    (folder / "torchrun").symlink_to(tmp_path / "elsewhere")
    started = time.monotonic()
    _shims(folder, script)
    assert time.monotonic() - started < 2
    for name in ("python", "torchrun"):
        path = folder / name
        assert path.is_file() and not path.is_symlink() and os.access(path, os.X_OK)
        assert str(script) in path.read_text()
    assert "-m torch.distributed.run" in (folder / "torchrun").read_text()
