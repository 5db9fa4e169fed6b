"""The suite's CPU-per-test plugin (tests/cpu_per_test.py) on a file of two tests."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_each_test_gets_a_line_with_its_wall_clock_and_the_machines_cpu(tmp_path):
    (tmp_path / "test_two.py").write_text(
        "import time\n\n"
        "def test_busy():\n    end = time.process_time() + 0.4\n    while time.process_time() < end:\n        pass\n\n"
        "def test_asleep():\n    time.sleep(0.4)\n")
    out = tmp_path / "cpu.jsonl"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.cpu_per_test", "-p", "no:xdist",
                           "-p", "no:cacheprovider", "-c", "/dev/null", str(tmp_path / "test_two.py")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "ORCH_CPU_PER_TEST": str(out)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    busy, asleep = [json.loads(line) for line in out.read_text().splitlines()]
    assert busy["id"].endswith("test_two.py::test_busy") and asleep["id"].endswith("::test_asleep")
    assert busy["cpu_s"] >= 0.35 and busy["wall_s"] >= 0.35, busy
    assert asleep["wall_s"] >= 0.4 and asleep["cpu_s"] >= 0, asleep  # the machine's, whatever ran
