"""Issue 34: a user's `train.entrypoint` is checked by reading its module, imported in a
subprocess only when reading cannot tell, and a check that passed is remembered by the
job's fingerprint and the Python that ran it: a second plan or submit of unchanged code
imports nothing. A missing function is still refused at the door; an import that fails
is the run's to report, in the same words."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.base.errors import SpecError
from orchestrator.service.orch import Orch
from orchestrator.service.placing import prepared
from orchestrator.settings import Settings
from orchestrator.spec import load_spec
from orchestrator.spec.check_memo import CheckMemo, memo_path
from orchestrator.spec.checks import Read, read_entrypoint
from tests.conftest import run_orch, store_created

JOB = """\
name: mine
workdir: code
train:
  entrypoint: {entrypoint}
  config: {{steps: 3, token: not-for-the-memo}}
scaling: {{num_workers: 1}}
"""


def imports(work: Path) -> int:
    """How many times the user's module was imported (each import adds a line)."""
    log = work / "IMPORTED"
    return len(log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A user's folder: `star.py` takes its loop from `impl.py` by `import *` (reading it
    cannot tell what it defines), `plain.py` defines its loop and imports what is not here."""
    code = tmp_path / "code"
    code.mkdir()
    counter = f"open({str(tmp_path / 'IMPORTED')!r}, 'a').write('x\\n')\n"
    (code / "impl.py").write_text(counter + "def train(config):\n    return config\n")
    (code / "star.py").write_text("from impl import *\n")
    (code / "plain.py").write_text(counter + "import not_installed_here_zz\n\n\n"
                                   "def train(config):\n    pass\n")
    return tmp_path


def plan(work: Path, entrypoint: str) -> str:
    """What `orch plan` and `orch submit` check before placing the job (a new service each
    time, as each command is a new process); returns the job's fingerprint."""
    path = work / "job.yaml"
    path.write_text(JOB.format(entrypoint=entrypoint))
    orch = Orch(Settings(home=work / "home", mode="local"))
    return prepared(orch.core, load_spec(path))[0]


def test_a_second_plan_of_unchanged_code_imports_nothing(work):
    fp = plan(work, "star:train")
    assert imports(work) == 1  # reading could not tell: imported once, in a subprocess
    assert plan(work, "star:train") == fp
    assert plan(work, "star:train") == fp
    assert imports(work) == 1
    kept = memo_path(work / "home").read_text()
    assert "star" not in kept and "not-for-the-memo" not in kept  # digests only
    assert len(json.loads(kept)["passed"]) == 1


def test_changed_code_config_or_python_is_checked_again(work, monkeypatch):
    plan(work, "star:train")
    with open(work / "code" / "impl.py", "a") as f:
        f.write("# changed\n")
    plan(work, "star:train")
    assert imports(work) == 2
    (work / "job.yaml").write_text(JOB.format(entrypoint="star:train").replace("steps: 3", "steps: 4"))
    prepared(Orch(Settings(home=work / "home", mode="local")).core, load_spec(work / "job.yaml"))
    assert imports(work) == 3
    plan(work, "star:train")
    assert imports(work) == 3  # the first config again: remembered
    monkeypatch.setattr(sys, "version", sys.version + " (another build)")
    plan(work, "star:train")
    assert imports(work) == 4


def test_a_module_that_defines_its_loop_is_read_never_imported(work):
    """Its own import fails here (a package only the cluster has): that is the run's to
    report, not the door's."""
    plan(work, "plain:train")
    plan(work, "plain:train")
    assert imports(work) == 0


def test_a_missing_function_is_refused_at_the_door(work, orch_home):
    path = work / "job.yaml"
    path.write_text(JOB.format(entrypoint="plain:trian"))
    for command in ("plan", "submit"):
        proc = run_orch(orch_home, command, str(path))
        assert proc.returncode == 2, proc.stderr
        said = " ".join(proc.stderr.split())  # rich may wrap a long line
        assert said.startswith(
            f"error: {path}:4: train.entrypoint: 'plain:trian': module 'plain' defines no "
            "'trian' at its top level (plain.py); did you mean 'train'?"), proc.stderr
        assert "Traceback" not in proc.stderr + proc.stdout
    assert imports(work) == 0 and not store_created(orch_home)
    with pytest.raises(SpecError, match="'star:nope' does not import: module 'star' has no "
                       "attribute 'nope'"):
        plan(work, "star:nope")  # reading cannot tell: the import says, and it is refused
    assert not memo_path(work / "home").exists()  # a refusal is not remembered


def test_a_memo_that_cannot_be_read_costs_a_check_not_an_error(work):
    memo = memo_path(work / "home")
    memo.parent.mkdir(parents=True)
    memo.write_text("{not json")
    plan(work, "star:train")
    plan(work, "star:train")
    assert imports(work) == 1 and json.loads(memo.read_text())["version"] == 1


def test_two_processes_remembering_at_once_leave_a_whole_file(tmp_path):
    path = tmp_path / "home" / "cache" / "entrypoints.json"
    code = ("import sys; from pathlib import Path; from orchestrator.spec.check_memo import CheckMemo\n"
            "for i in range(40): CheckMemo(Path(sys.argv[1]), sys.argv[2] + str(i))"
            ".remember('m:f', Path('.'))\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), who]) for who in "ab"]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    passed = json.loads(path.read_text())["passed"]
    assert len(passed) == 80  # under the folder's lock neither writer's passes are lost
    assert all(CheckMemo(path, w + str(i)).passed("m:f", Path(".")) for w in "ab" for i in range(40))
    assert [p.name for p in path.parent.iterdir()] == ["entrypoints.json"]  # no temp files


@pytest.mark.parametrize("source, read, words", [
    ("if True:\n    def train(c): pass\nelse:\n    train = None\n", Read.FOUND, ""),
    ("try:\n    from fast import train\nexcept ImportError:\n    from slow import train\n", Read.FOUND, ""),
    ("for train in [print]:\n    pass\n", Read.FOUND, ""),
    ("train = make_loop()\n", Read.FOUND, ""),
    ("from impl import *\n", Read.DYNAMIC, "it imports * from impl"),
    ("def __getattr__(name):\n    return print\n", Read.DYNAMIC, "module __getattr__"),
    ("globals()['train'] = print\n", Read.DYNAMIC, "it calls globals()"),
    ("train = 3\n", Read.MISSING, "m:train is not a function: m.py assigns it a literal"),
    ("def train_func(c): pass\n", Read.MISSING, "did you mean 'train_func'?"),
    ("def nothing(c): pass\n", Read.MISSING, "module 'm' defines no 'train' at its top level (m.py)"),
    ("def train(:\n", Read.MISSING, "SyntaxError in m.py:1"),
])
def test_what_reading_a_module_tells(tmp_path, source, read, words):
    (tmp_path / "m.py").write_text(textwrap.dedent(source))
    found = read_entrypoint("m:train", tmp_path)
    assert found.read is read and words in found.detail, found
    assert read_entrypoint("elsewhere.m:train", tmp_path).read is Read.ELSEWHERE
    assert read_entrypoint("m:train", None).read is Read.ELSEWHERE


def test_the_run_says_an_entrypoint_that_does_not_import_in_the_doors_words(tmp_path, monkeypatch):
    """On a worker the import fails (Ray Train wraps it in a traceback snippet); the
    driver's result names it alone."""
    from ray.train.v2._internal.exceptions import UserExceptionWithTraceback
    from ray.train.v2.api.exceptions import WorkerGroupError

    from jobs.train_loops import EntrypointError, failure_text, imported

    (tmp_path / "broken_mod.py").write_text("import not_installed_here_zz\ndef train(c): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EntrypointError) as caught:
        imported("broken_mod:train")
    said = ("train.entrypoint 'broken_mod:train' does not import: ModuleNotFoundError: No "
            "module named 'not_installed_here_zz'")
    assert str(caught.value) == said
    failed = WorkerGroupError("[Rank 0 Error Snippet]: Traceback ...",
                              {0: UserExceptionWithTraceback(caught.value, "Traceback ...")})
    assert failure_text(failed) == said
    assert failure_text(RuntimeError("boom")) == "RuntimeError: boom"
