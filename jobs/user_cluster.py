"""A Ray cluster of one OS user's own on the owned nodes (issue 46, part 3, on-prem; started
by providers/onprem_users.py). Ray "doesn't attempt to enforce isolation" between the jobs
of one cluster and advises a cluster per user: this is it.

It runs as a Ray job of the base cluster, which only orch submits to in the per-user mode
and which runs as root. It reserves what the job asked for on the base cluster (a
placement group, one bundle a node, STRICT_SPREAD), then in each bundle an actor makes the
OS user (useradd, where missing) and starts `ray start` as that user: the head in bundle 0,
a worker node in each other one, with the user's own token, temp dir and home (0700, the
user's), on the GPUs Ray gave that actor (CUDA_VISIBLE_DEVICES, --num-gpus). The base
cluster thus counts what the user's cluster holds, and no two users' clusters share a GPU.

The token comes in the job's environment (read, then removed from it: root's processes'
environ is closed to the users) and never goes to a log. The job prints one line, UP and
the head's addresses, then waits; on SIGTERM (orch stops the job when the cluster is idle)
every process of the user on every node is stopped and the token file removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

SPEC_VAR = "ORCH_USER_CLUSTER"
UP = "ORCH_USER_CLUSTER_UP "
FAILED = "ORCH_USER_CLUSTER_FAILED "

# What the user's Ray processes get from this environment (the rest is theirs: HOME, the
# token's path, the GPUs): never the base cluster's token or orch's values.
_PASS = ("PATH", "LANG", "LC_ALL", "TZ")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def make_user(name: str, root: str) -> pwd.struct_passwd:
    """The OS user `name` on this node (a system user with no login, made when missing) and
    its folder root/name, 0700, its own. One node's holders (two when nodes share a machine)
    take turns."""
    import fcntl

    os.makedirs(root, mode=0o755, exist_ok=True)
    with open(os.path.join(root, ".users.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            done = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                                   "--home-dir", os.path.join(root, name), "--shell",
                                   "/usr/sbin/nologin", name], capture_output=True, text=True,
                                  timeout=60)
            if done.returncode != 0:
                raise RuntimeError(f"could not make the OS user {name}: {done.stderr.strip()}") from None
            entry = pwd.getpwnam(name)
        if entry.pw_uid == 0:
            raise RuntimeError(f"the OS user {name} is root")
        _own_dir(os.path.join(root, name), entry)
    return entry


def _own_dir(path: str, entry: pwd.struct_passwd) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or st.st_uid not in (0, entry.pw_uid):
        raise RuntimeError(f"{path} is not a folder orch or its user made")
    os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
    os.chmod(path, 0o700)


def kill_user(uid: int) -> int:
    """Stop every process of `uid` on this node (TERM, then KILL after 5 s): how many."""
    import psutil

    procs = []
    for p in psutil.process_iter(["uids"]):
        if p.info["uids"] and p.info["uids"].real == uid:
            procs.append(p)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=5)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
    return len(procs)


class Holder:
    """One node of the user's cluster: the user's `ray start` on the node this actor runs on."""

    def __init__(self, spec: dict, index: int):
        import ray

        self.spec, self.index = spec, index
        self.user = make_user(spec["user"], spec["root"])
        self.home = os.path.join(spec["root"], spec["user"])
        self.token_file = os.path.join(self.home, ".ray-token")
        self.ip = ray._private.worker.global_worker.node_ip_address
        self.gpu_ids = [str(int(g)) for g in ray.get_gpu_ids()]

    def start(self, head: str | None) -> dict:
        u, spec = self.user, self.spec
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.token_file)
        fd = os.open(self.token_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(spec["token"])
        os.chown(self.token_file, u.pw_uid, u.pw_gid, follow_symlinks=False)
        temp = os.path.join(self.home, f"r{self.index}")  # a node's own (nodes may share a disk)
        _own_dir(temp, u)
        python = spec.get("python") or sys.executable
        env = {k: os.environ[k] for k in _PASS if k in os.environ}
        # `python` in a job is the Python of its cluster's Ray (as on the local target).
        env["PATH"] = os.pathsep.join([os.path.dirname(python), env.get("PATH", os.defpath)])
        env.update(HOME=self.home, USER=u.pw_name, LOGNAME=u.pw_name, TMPDIR=self.home,
                   RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=self.token_file,
                   RAY_USAGE_STATS_ENABLED="0", CUDA_VISIBLE_DEVICES=",".join(self.gpu_ids),
                   RAY_prestart_worker_first_driver="0", ORCH_RAY_PYTHON=python)
        ports = {n: _free_port() for n in ("gcs", "dashboard", "client", "agent_http",
                                          "agent_grpc", "runtime_env", "metrics")}
        args = [f"--node-ip-address={self.ip}", f"--temp-dir={temp}",
                f"--num-cpus={max(1, int(-(-float(spec['cpus']) // 1)))}",
                f"--num-gpus={len(self.gpu_ids)}",
                f"--object-store-memory={int(spec['object_store_mb']) * 1024 * 1024}",
                f"--dashboard-agent-listen-port={ports['agent_http']}",
                f"--dashboard-agent-grpc-port={ports['agent_grpc']}",
                f"--runtime-env-agent-port={ports['runtime_env']}",
                f"--metrics-export-port={ports['metrics']}", "--disable-usage-stats"]
        if head is None:
            args += ["--head", f"--port={ports['gcs']}", "--include-dashboard=true",
                     f"--dashboard-host={self.ip}", f"--dashboard-port={ports['dashboard']}",
                     f"--ray-client-server-port={ports['client']}"]
        else:
            args += [f"--address={head}"]
        done = subprocess.run([python, "-m", "ray.scripts.scripts", "start", *args], env=env,
                              cwd=self.home, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=180, user=u.pw_uid, group=u.pw_gid,
                              extra_groups=[], umask=0o077)
        if done.returncode != 0:
            kill_user(u.pw_uid)
            raise RuntimeError(f"ray start as {u.pw_name} on {self.ip} failed (exit "
                               f"{done.returncode}): {(done.stdout + done.stderr)[-1500:]}")
        return {"gcs": f"{self.ip}:{ports['gcs']}", "ip": self.ip, "gpu_ids": self.gpu_ids,
                "dashboard_url": f"http://{self.ip}:{ports['dashboard']}"}

    def alive(self) -> bool:
        import psutil

        return any(p.info["uids"] and p.info["uids"].real == self.user.pw_uid
                   and "raylet" in (p.info["name"] or "")
                   for p in psutil.process_iter(["uids", "name"]))

    def stop(self) -> int:
        n = kill_user(self.user.pw_uid)
        with contextlib.suppress(OSError):
            os.unlink(self.token_file)
        shutil.rmtree(os.path.join(self.home, f"r{self.index}"), ignore_errors=True)
        return n


def main() -> int:
    spec = json.loads(os.environ.pop(SPEC_VAR))
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    ray.init(address="auto", log_to_driver=False)
    n, cpus, gpus = int(spec["nodes"]), float(spec["cpus"]), float(spec["gpus"])
    bundle = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    pg = placement_group([bundle] * n, strategy="STRICT_SPREAD" if n > 1 else "PACK")
    try:
        ray.get(pg.ready(), timeout=float(spec.get("wait_s", 120)))
    except Exception:  # noqa: BLE001  (GetTimeoutError, or the group could not be made)
        print(FAILED + json.dumps({"error": f"the cluster has no room for {n} node(s) of "
                                   f"{bundle} now"}), flush=True)
        return 1
    remote = ray.remote(max_restarts=0)(Holder)
    holders = [remote.options(num_cpus=cpus, num_gpus=gpus, scheduling_strategy=
                              PlacementGroupSchedulingStrategy(pg, i)).remote(spec, i)
               for i in range(n)]
    try:
        head = ray.get(holders[0].start.remote(None), timeout=240)
        nodes = [head] + ray.get([h.start.remote(head["gcs"]) for h in holders[1:]], timeout=240)
        print(UP + json.dumps({**head, "nodes": nodes}), flush=True)
        while not stopping.wait(5):
            if not all(ray.get([h.alive.remote() for h in holders], timeout=60)):
                print(FAILED + json.dumps({"error": "a node of the cluster stopped"}), flush=True)
                return 1
        return 0
    except Exception as e:  # noqa: BLE001  (a node that could not start: say why, stop all)
        print(FAILED + json.dumps({"error": str(e)[-1500:]}), flush=True)
        return 1
    finally:
        with contextlib.suppress(Exception):
            ray.get([h.stop.remote() for h in holders], timeout=20)
        time.sleep(0.1)


if __name__ == "__main__":
    sys.exit(main())
