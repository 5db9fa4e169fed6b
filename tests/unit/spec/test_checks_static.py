"""Issue 32: `orch serve` checked a client's `train.entrypoint` by importing it, which ran
the client's module, as the server's user, at plan time. On the server the entrypoint is
now looked for in the module's source; nothing of it runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.base.errors import SpecError
from orchestrator.spec import load_spec_text
from orchestrator.spec.checks import check_runnable


def job(workdir: Path, entrypoint: str):
    return load_spec_text(f"workdir: {workdir}\ntrain:\n  entrypoint: {entrypoint}\n",
                          str(workdir.parent / "job.yaml"))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    pkg = tmp_path / "work" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    marker = tmp_path / "MARKER"
    (pkg / "m.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                              "import json as loads_alias\n"
                              "def train(config):\n    pass\n"
                              "alias = train\n")
    (pkg / "broken.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\ndef train(:\n")
    return tmp_path / "work"


@pytest.mark.parametrize("entrypoint", ["pkg.m:train", "pkg.m:alias", "pkg.m:loads_alias"])
def test_a_clients_entrypoint_is_found_without_running_its_module(work, entrypoint):
    check_runnable(job(work, entrypoint), serves_clients=True)
    assert not (work.parent / "MARKER").exists()


@pytest.mark.parametrize("entrypoint, words", [
    ("pkg.m:nope", "module 'pkg.m' defines no 'nope' at its top level"),
    ("pkg.broken:train", "SyntaxError in pkg/broken.py:2"),
])
def test_a_clients_bad_entrypoint_is_named_without_running_its_module(work, entrypoint, words):
    with pytest.raises(SpecError, match="train.entrypoint") as e:
        check_runnable(job(work, entrypoint), serves_clients=True)
    assert words in str(e.value) and not (work.parent / "MARKER").exists()


def test_alone_orch_reads_the_users_own_module_too(work):
    """Issue 34: the CLI on the user's own machine reads the module as well (what it
    imports, torch and Ray, took 3.6 s to import at every submit); an import that fails is
    the run's to report."""
    check_runnable(job(work, "pkg.m:train"))
    assert not (work.parent / "MARKER").exists()


@pytest.mark.parametrize("source, words", [
    ("def main(a, b, c):\n    pass\n", "pkg/s.py:1 defines main(a, b, c), and the runner calls it"),
    ("def main(config, *, lr):\n    pass\n", "defines main(config, lr)"),
    ("import argparse\np = argparse.ArgumentParser()\nargs = p.parse_args()\n"
     "def main():\n    pass\n", "pkg/s.py:3 reads the command line when the module is imported"),
    ("import sys\nN = int(sys.argv[1])\ndef main():\n    pass\n", "pkg/s.py:2 reads the command line"),
])
def test_an_entrypoint_the_runner_cannot_call_is_refused_at_its_line(work, source, words):
    """Issue 48: `main(a, b, c)`, or a module that parses sys.argv on import, passed the
    check and failed in every worker."""
    (work / "pkg" / "s.py").write_text(source)
    with pytest.raises(SpecError, match="train.entrypoint") as e:
        check_runnable(job(work, "pkg.s:main"))
    assert words in str(e.value) and ":3: train.entrypoint" in str(e.value), str(e.value)


def test_a_main_without_arguments_and_a_guarded_command_line_pass(work):
    (work / "pkg" / "s.py").write_text(
        "import argparse, sys\n@staticmethod\ndef helper(x, y):\n    return sys.argv\n"
        "def main(config=None, epochs=3):\n    pass\n"
        "if __name__ == '__main__':\n    argparse.ArgumentParser().parse_args()\n    main()\n")
    check_runnable(job(work, "pkg.s:main"))
