"""The CLI with bad input: one located message, exit 2, no traceback, nothing written."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, run_orch, store_created

CASES = [
    ("missing.yaml", None, "no such file"),
    ("syntax.yaml", "train: [oops\n", "YAML syntax error"),
    ("unknown.yaml", "train:\n  job: image-classification\nscalng: {num_workers: 2}\n", ":3: scalng: unknown key"),
    ("type.yaml", "train:\n  job: image-classification\nscaling:\n  num_workers: lots\n", "scaling.num_workers"),
    ("accel.yaml", "resources:\n  accelerators: 'H100:many'\nrun: echo\n", "resources.accelerators"),
    ("zero.yaml", "train:\n  job: image-classification\nscaling:\n  num_workers: 0\n", "greater than 0"),
    ("entry.yaml", "workdir: userjob\ntrain:\n  entrypoint: nothere:fn\n", "does not import"),
    ("attr.yaml", "workdir: userjob\ntrain:\n  entrypoint: mytrain:nope\n", "defines no 'nope'"),
    ("notfn.yaml", "workdir: userjob\ntrain:\n  entrypoint: notfn:VALUE\n", "not a function"),
    ("wd.yaml", "workdir: no-such-dir\nrun: echo\n", "is not a directory"),
]


@pytest.mark.parametrize("name,doc,words", CASES)
def test_bad_job_file(orch_home, tmp_path, name, doc, words):
    (tmp_path / "userjob").symlink_to(ROOT / "tests" / "fixtures" / "userjob")
    path = tmp_path / name
    if doc is not None:
        path.write_text(doc)
    proc = run_orch(orch_home, "submit", str(path))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith("error: ") and str(path) in proc.stderr
    assert words in proc.stderr, proc.stderr
    assert not store_created(orch_home), "bad input must not touch the store"


def test_bad_settings_is_exit_2(orch_home):
    (orch_home / "config.toml").write_text("currency_rate = 'lots'\n")
    proc = run_orch(orch_home, "status")
    assert proc.returncode == 2 and "currency_rate" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_orch(orch_home, "status", ORCH_MODE="sideways")
    assert proc.returncode == 2 and "ORCH_MODE" in proc.stderr


def test_unknown_job_id(orch_home):
    proc = run_orch(orch_home, "status", "orch-doesnotexist")
    assert proc.returncode == 2 and "no job" in proc.stderr and "Traceback" not in proc.stderr


def test_help_is_fast_and_imports_no_sdk():
    code = ("import sys, time; t=time.perf_counter();"
            "from orchestrator.cli.commands import app;"
            "print([m for m in ('ray','torch','sky','boto3') if m in sys.modules]);"
            "print(time.perf_counter()-t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded, seconds = out.stdout.splitlines()
    assert loaded == "[]"
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "--help"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "submit" in proc.stdout
    print(f"import {float(seconds):.3f}s, --help {time.perf_counter() - start:.3f}s")


@pytest.mark.parametrize("args", [["status", "--limit", "abc"], ["status", "--bogus"],
                                  ["cost", "--since"]])
def test_bad_flags_are_one_message_and_exit_2(orch_home, args):
    proc = run_orch(orch_home, *args)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "Error:" in proc.stderr


LEAVE = """
import atexit, sys, threading, time
from orchestrator.cli import leave
atexit.register(lambda: sys.stderr.write("exit handler ran\\n"))
sys.stdout.write("x" * 300_000)  # more than a pipe holds: still buffered when leave is called
if sys.argv[1] == "thread":  # a thread still at work is waited for, as Python does
    threading.Thread(target=lambda: (time.sleep(0.3), sys.stderr.write("thread done\\n"))).start()
leave({"none": None, "three": 3, "text": "a message", "thread": 4}[sys.argv[1]])
"""


@pytest.mark.parametrize("how, code, said", [("none", 0, ""), ("three", 3, ""),
                                             ("text", 1, "a message\n"),
                                             ("thread", 4, "thread done\n")])
def test_orch_leaves_without_teardown_yet_says_everything(how, code, said):
    """Issue 34: `orch` skips the interpreter's teardown (1-1.5 s after `orch submit` is
    done); its output, its exit handlers and its exit code are as Python's own exit."""
    proc = subprocess.run([sys.executable, "-c", LEAVE, how], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == code and len(proc.stdout) == 300_000
    assert proc.stderr == said + "exit handler ran\n"
