"""Where the suite's CPU goes, test by test: a pytest plugin, off unless named.

    ORCH_CPU_PER_TEST=cpu.jsonl .venv/bin/python -m pytest -p tests.cpu_per_test ... -p no:xdist

Writes a line for each test: its id, its wall clock, and the CPU-seconds the whole machine
spent while it ran (/proc/stat: the test's own process, the Ray, PostgreSQL, browser and
`orch` processes it drives, and anything else running). So run it in one process on an
otherwise quiet machine, one shared Ray's tests at a time (tests/scheduling.py lists them):
then each line is that test's cost. Sorting the lines by CPU names the tests worth making
cheaper; docs/development.md has the last such reading.
"""

from __future__ import annotations

import json
import os
import time

import pytest


def machine_busy_s() -> float:
    """CPU-seconds this machine spent busy since boot, all CPUs together."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle and iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    out = os.environ.get("ORCH_CPU_PER_TEST")
    busy, start = machine_busy_s(), time.monotonic()
    yield
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"id": item.nodeid, "wall_s": round(time.monotonic() - start, 2),
                                "cpu_s": round(machine_busy_s() - busy, 2)}) + "\n")
