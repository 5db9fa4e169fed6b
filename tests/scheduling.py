"""How `make test` shares the suite between its pytest-xdist processes (three).

Two shared Ray instances serve most of the integration tests: the session's local Ray
(`ray_home`, with its runner host) and the two-node loopback cluster (`cluster`). Under
xdist's plain load balancing each process took tests of both as they came, so each started
both: four Ray instances and their daemons on two cores, and the two processes' Ray jobs
contending with each other. Here each Ray's tests are units of work that one process
takes whole (xdist's LoadScopeScheduling, with the units below): the local Ray's two units
first, then the cluster's, so each of the three processes starts one Ray (the local one in
two of them); every other test is a unit of its own and goes to whichever process is free. `--dist loadgroup` and `xdist_group` marks would
say the same, but have no effect under pytest 9 (xdist 3.8 renames `item._nodeid`; pytest 9
reads `_id`).

The controller process sees test ids only, not their fixtures; so the units are named here
by test id, and every process checks at collection that each test of a shared Ray is in
its Ray's unit (a test added without its line here is a usage error that says what to add).
"""

from __future__ import annotations

import os
from typing import Optional

import pytest

# The session fixture each shared Ray comes from -> the units its tests are in. The local
# Ray's tests are two units, about 270-300 s each in `make test`: one unit of 560 s was the
# run's longest path on three processes (the other two ended 160 s before it). Each
# process that takes one starts a local Ray of its own.
SHARED = {"ray_home": ("local-ray", "local-ray-serve"), "cluster": ("two-node-cluster",)}

# Test ids (a file, or a file::test) -> their unit. A file's tests share one unit unless
# one of its tests is named on its own.
UNITS = {
    "tests/integration/test_crash_safety.py": "local-ray-serve",
    "tests/integration/test_local_jobs.py": "local-ray",
    "tests/integration/test_job_reach.py": "local-ray",
    "tests/integration/test_host_reach.py": "local-ray",
    "tests/integration/test_setup_reach.py": "local-ray-serve",
    "tests/integration/test_local_ports.py": "local-ray-serve",
    "tests/integration/test_prometheus.py": "local-ray-serve",
    "tests/integration/test_runner_host.py": "local-ray",
    "tests/integration/test_run_jobs.py": "local-ray-serve",
    "tests/integration/test_s3.py": "local-ray-serve",
    "tests/integration/test_secrets_travel.py::test_local_jobs_see_their_secrets_and_nothing_keeps_them": "local-ray-serve",
    "tests/integration/test_serve.py": "local-ray-serve",
    "tests/integration/test_serve_client.py": "local-ray-serve",
    "tests/integration/test_serve_queue.py": "local-ray-serve",
    "tests/integration/test_serve_security_secrets.py": "local-ray-serve",
    "tests/integration/test_speed.py": "local-ray",
    "tests/integration/test_status_page.py": "local-ray-serve",
    "tests/integration/test_utilization_policy.py": "local-ray",
    "tests/integration/test_onprem.py": "two-node-cluster",
    "tests/integration/test_sweep_cluster.py": "two-node-cluster",
    "tests/integration/test_run_nodes.py": "two-node-cluster",
    "tests/integration/test_isolation_onprem.py": "two-node-cluster",
    "tests/integration/test_secrets_travel.py::test_on_prem_jobs_see_their_secrets_and_nothing_keeps_them": "two-node-cluster",
    "tests/integration/test_serve_replicas.py::test_jobs_logs_uploads_and_cron_slots_are_shared_by_replicas_and_survive_a_kill": "two-node-cluster",
    # Its last test reads what the file's fuzz tests recorded in this process.
    "tests/unit/server/test_api_fuzz.py": "api-fuzz",
}
# The order the shared Rays' units are handed out in: SHARED's, the longest first.
ORDER = tuple(u for units in SHARED.values() for u in units)


def unit_of(nodeid: str) -> Optional[str]:
    """The unit a test id belongs to; None: a unit of its own."""
    path, _, rest = nodeid.partition("::")
    name = rest.split("[")[0].split("::")[0]
    return UNITS.get(f"{path}::{name}") or UNITS.get(path)


def check(items: list) -> None:
    """Every test that uses a shared Ray is in that Ray's unit, and no other is."""
    wrong = []
    for item in items:
        uses = [SHARED[f] for f in SHARED if f in getattr(item, "fixturenames", ())]
        named = unit_of(item.nodeid)
        listed = named if named in ORDER else None
        if len(uses) > 1 or (listed not in uses[0] if uses else listed is not None):
            can = " or ".join(u for us in uses for u in us) or "no shared Ray"
            wrong.append(f"{item.nodeid}: uses {can}, listed under {named or 'nothing'}")
    if wrong:
        raise pytest.UsageError(
            "tests/scheduling.py's UNITS disagree with the tests' fixtures (a test of a shared "
            "Ray belongs in that Ray's unit; one test cannot use both):\n  " + "\n  ".join(wrong))


def sort_key(item, xdist: bool) -> tuple:
    """In one process: the unit tests first (quick failures come first), then each shared
    Ray's tests together. Under xdist: the shared Rays' units first, the longest first, then
    the other integration tests, then the unit tests, which fill in at the end whichever
    process is free first. Either way a Ray's tests follow each other, and it is stopped
    after its last (tests/integration/conftest.py)."""
    integration = bool(item.get_closest_marker("integration"))
    unit = unit_of(item.nodeid)
    shared = ORDER.index(unit) if unit in ORDER else len(ORDER)
    if not xdist:
        return (integration, shared)
    return (shared, not integration)


def make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        """Units in collection order (not xdist's largest-first), a test of no unit alone."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid) or nodeid

    return ByUnit(config, log)


class Spans:
    """When each pytest-xdist process ran tests: the end of `make test`'s output shows it, so
    that a process left idle while the other still runs (a unit too long) is seen at once."""

    def __init__(self) -> None:
        self.by_process: dict[str, list[float]] = {}  # name -> [first start, last stop, busy s, tests]
        self.cpu_at_start = cpu_times()

    def add(self, report) -> None:
        node = getattr(report, "node", None)  # set by xdist in the controlling process
        if node is None:
            return
        span = self.by_process.setdefault(node.gateway.id, [report.start, report.stop, 0.0, 0])
        span[0], span[1] = min(span[0], report.start), max(span[1], report.stop)
        span[2] += report.duration
        span[3] += report.when == "call"

    def lines(self) -> list[str]:
        if not self.by_process:
            return []
        t0 = min(s[0] for s in self.by_process.values())
        out = [f"{name}: {int(n)} tests, {busy:.0f} s in tests, its last ended {stop - t0:.0f} s "
               f"after the first began" for name, (_, stop, busy, n) in sorted(self.by_process.items())]
        now = cpu_times()
        if self.cpu_at_start and now and now != self.cpu_at_start:
            busy, idle = (b - a for a, b in zip(self.cpu_at_start, now))
            out.append(f"this machine's CPUs: busy {busy / (busy + idle):.0%} of the time since the "
                       f"run began ({busy:.0f} CPU-seconds)")
        return out


def cpu_times() -> Optional[tuple[float, float]]:
    """The machine's CPU-seconds busy and idle since boot (Linux's /proc/stat); None elsewhere."""
    try:
        with open("/proc/stat") as f:
            fields = [float(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / ticks, idle / ticks
