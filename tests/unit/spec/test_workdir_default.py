"""Issue 48: a `run:` job without `workdir:` ran `python train.py` in whatever folder the
local Ray had started in ("can't open file"). A job file's own code now runs from its folder."""

from __future__ import annotations

from orchestrator.spec import load_spec, load_spec_text
from orchestrator.spec.pipeline import load_job


def test_a_job_files_own_code_runs_from_its_folder(tmp_path):
    (tmp_path / "job.yaml").write_text("run: python train.py\n")
    assert load_spec(tmp_path / "job.yaml").workdir_path() == tmp_path.resolve()
    (tmp_path / "loop.yaml").write_text("train: {entrypoint: 'mytrain:main'}\n")
    assert load_job(tmp_path / "loop.yaml").workdir_path() == tmp_path.resolve()
    (tmp_path / "pipe.yaml").write_text("name: p\n---\nrun: echo a\n---\nrun: echo b\n")
    assert {s.workdir_path() for s in load_job(tmp_path / "pipe.yaml").stages} == {tmp_path.resolve()}


def test_a_built_in_job_a_given_workdir_and_a_servers_copy_keep_theirs(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "given.yaml").write_text("workdir: sub\nrun: python train.py\n")
    assert load_spec(tmp_path / "given.yaml").workdir_path() == (tmp_path / "sub").resolve()
    (tmp_path / "builtin.yaml").write_text("train: {job: image-classification}\n")
    assert load_spec(tmp_path / "builtin.yaml").workdir_path() is None
    # The text a server is sent, with the client's path: no folder of the server's is taken.
    text = "run: python train.py\n"
    assert load_spec_text(text, str(tmp_path / "job.yaml")).workdir_path() is None


def test_the_job_file_is_never_sent_with_its_workdir(tmp_path):
    """It may hold secret values inline (`envs: {HF_TOKEN: hf_...}`): a copy of the workdir
    on Ray (its package, the job's kept folder) or on a server (an upload) must not."""
    import io
    import tarfile

    from orchestrator.service.launch_spec import job_file_in
    from orchestrator.service.upload import pack

    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "job.yaml").write_text("envs: {HF_TOKEN: hf_secret}\nrun: python train.py\n")
    spec = load_spec(tmp_path / "job.yaml")
    leave = job_file_in(spec.workdir_path(), spec.source_file)
    assert leave == ("/job.yaml",) and job_file_in(tmp_path / "elsewhere", spec.source_file) == ()
    packed = pack(tmp_path, 1 << 20, leave)
    with tarfile.open(fileobj=io.BytesIO(packed.file.read()), mode="r:gz") as tar:
        assert tar.getnames() == ["train.py"]


def test_no_file_with_one_of_the_jobs_secret_values_goes_with_its_workdir(tmp_path):
    from orchestrator.service.launch_spec import left_out

    (tmp_path / "train.yaml").write_text("envs: {HF_TOKEN: hf_0123456789abcdef}\n")  # a sibling
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.csv").write_text("a,b\n")
    (tmp_path / "run.yaml").write_text("run: echo\n")
    assert left_out(tmp_path, str(tmp_path / "run.yaml"), ["hf_0123456789abcdef", "short"]) == (
        "/run.yaml", "/train.yaml")
    assert left_out(tmp_path, None, []) == ()
