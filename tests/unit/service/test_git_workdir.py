"""SkyPilot's `workdir: {url, ref}`: pinned to a commit when the job is checked, checked out
for a run on owned hardware, passed to SkyPilot (the commit as its ref) for the cloud. A real
git repository on this machine stands in for the remote one."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.base.errors import InputError, SpecError
from orchestrator.service import following, submitting
from orchestrator.service.orch import Orch
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text
from tests.repos import committed_repo, git


@pytest.fixture
def repo(tmp_path) -> Path:
    r = committed_repo(tmp_path / "repo", {"train.py": "print('v1')\n"})
    git(r, "tag", "v1")
    return r


def _spec(repo: Path, ref: str = "main"):
    return load_spec_text(f"name: g\nworkdir: {{url: '{repo}', ref: {ref}}}\nrun: python train.py\n",
                          "job.yaml")


def test_a_branch_is_pinned_at_check_and_that_commit_is_what_runs(tmp_path, repo):
    orch = Orch(Settings(home=tmp_path / "home", mode="local"))
    spec = _spec(repo)
    v1 = git(repo, "rev-parse", "HEAD")
    checked = submitting.check(orch.core, spec)
    assert spec.git_workdir.commit == v1
    (repo / "train.py").write_text("print('v2')\n")  # the branch moves before the launch
    git(repo, "commit", "-qam", "v2")
    launch = orch.launch_for("job-1", spec, "local", checked.decision)
    folder = Path(launch.workdir)
    assert folder == tmp_path / "home" / "workdirs" / "job-1"
    assert (folder / "train.py").read_text() == "print('v1')\n"
    assert git(folder, "rev-parse", "HEAD") == v1
    # A second launch of the same job (a retry) reuses the checkout.
    (folder / "marker").write_text("kept")
    assert Path(orch.launch_for("job-1", spec, "local", checked.decision).workdir) == folder
    assert (folder / "marker").exists()
    # The fingerprint names the commit: the same code, the same fingerprint.
    assert checked.fingerprint == submitting.check(orch.core, _spec(repo, "v1")).fingerprint
    assert spec.task_keys()["workdir"] == {"url": str(repo), "ref": v1}


def test_a_tag_and_a_full_commit_hash_name_their_commit(tmp_path, repo):
    from orchestrator.service.git_workdir import resolve

    v1 = git(repo, "rev-parse", "HEAD")
    assert resolve(str(repo), "v1") == v1
    assert resolve(str(repo), None) == v1  # the default branch
    assert resolve(str(repo), v1) == v1


@pytest.mark.parametrize("url_of, ref, words", [
    (lambda repo: str(repo), "no-such-branch", "has no branch or tag 'no-such-branch'"),
    (lambda repo: str(repo.parent / "missing"), "main", "cannot read"),
])
def test_an_unreadable_repository_or_ref_is_refused_before_anything_is_recorded(
        tmp_path, repo, url_of, ref, words):
    orch = Orch(Settings(home=tmp_path / "home", mode="local"))
    with pytest.raises(InputError) as info:
        orch.record(_spec(Path(url_of(repo)), ref))
    assert words in str(info.value) and "workdir.ref" in (info.value.hint or "")
    assert orch.core.store.list() == []


def test_a_git_workdir_in_a_form_skypilot_refuses_is_located():
    with pytest.raises(SpecError) as info:
        load_spec_text("run: echo\nworkdir: {ref: main}\n", "job.yaml")
    assert info.value.line == 2 and info.value.key.startswith("workdir"), str(info.value)
    with pytest.raises(SpecError) as info:  # orch's own field is not a key of the file
        load_spec_text("run: echo\nworkdir: {url: x, commit: abc}\n", "job.yaml")
    assert info.value.line == 2 and info.value.key.startswith("workdir"), str(info.value)


def test_a_git_url_holding_a_token_is_refused_and_not_echoed():
    with pytest.raises(SpecError) as info:
        load_spec_text("run: echo\nworkdir: {url: 'https://me:ghp_secret123@github.com/o/r.git'}\n",
                       "job.yaml")
    assert "password or token" in str(info.value) and "ghp_secret123" not in str(info.value)
    assert load_spec_text("run: echo\nworkdir: {url: 'git@github.com:o/r.git'}\n").git_workdir


def test_a_jobs_checkout_is_removed_when_the_job_ends(tmp_path, repo):
    orch = Orch(Settings(home=tmp_path / "home", mode="local"))
    spec = _spec(repo)
    checked = submitting.check(orch.core, spec)
    rec = orch.core.store.create_job(name="g", spec={"run": "python train.py"}, kind="exploratory",
                                target="local", fingerprint=checked.fingerprint)
    folder = Path(orch.launch_for(rec.id, spec, "local", checked.decision).workdir)
    other = Path(orch.launch_for("another-job", spec, "local", checked.decision).workdir)
    assert (folder / "train.py").is_file() and (other / "train.py").is_file()
    # No backend id: the job never reached its backend, and ends FAILED.
    assert following.finish(orch.core, rec, "FAILED", "never launched").status == "FAILED"
    assert not folder.exists()
    assert (other / "train.py").is_file()  # another job's checkout is its own
