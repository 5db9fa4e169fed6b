"""jobs/workspace.py: a `run:` job's fresh folder, and which of its files are its own."""

from __future__ import annotations

import os

from jobs import events
from jobs.workspace import prepare, written
from orchestrator.service.launch_spec import kept_folder, own_folder
from providers.artifacts import LocalArtifacts


def test_each_job_gets_a_fresh_copy_and_only_what_it_writes_is_its_own(tmp_path):
    src = tmp_path / "workdir"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("print(1)\n")
    (src / "pkg" / "data.txt").write_text("data\n")
    (src / ".orch-job-job-1").write_text("job-1\n")  # what made its Ray package its own
    root = tmp_path / "runs"
    first = prepare(src, root, "job-1")
    assert not (first / ".orch-job-job-1").exists()
    assert first == root / "job-1" and (first / "pkg" / "data.txt").read_text() == "data\n"
    (first / "snapshot.pt").write_text("epoch 5")
    (first / "pkg" / "data.txt").write_text("changed by the job\n")
    os.symlink("/etc/passwd", first / "leak")
    assert written(first) == ["leak", "pkg/data.txt", "snapshot.pt"]
    # The listing leaves out links: a job's link may name any file of this machine.
    assert [a.key for a in LocalArtifacts(str(first)).list()] == ["pkg/data.txt", "snapshot.pt"]
    second = prepare(src, root, "job-2")
    assert not (second / "snapshot.pt").exists() and written(second) == []
    assert (src / "pkg" / "data.txt").read_text() == "data\n"  # the source is never written
    # Resuming is asked for: the earlier folder first, the workdir over it.
    third = prepare(src, root, "job-3", resume=first)
    assert (third / "snapshot.pt").read_text() == "epoch 5"
    assert (third / "pkg" / "data.txt").read_text() == "data\n"
    # The same job started again from scratch gets a fresh folder; run again by the
    # preemption contract, it goes on in its folder as it left it (its checkpoint there).
    assert not (prepare(src, root, "job-1") / "snapshot.pt").exists()
    (first / "snapshot.pt").write_text("epoch 7")
    again = prepare(src, root, "job-1", again=True)
    assert again == first and (again / "snapshot.pt").read_text() == "epoch 7"


def test_a_folder_is_kept_only_where_storage_is_a_path():
    assert kept_folder("/shared/runs/") == "/shared/runs"
    assert kept_folder("s3://bucket/runs") is None and kept_folder(None) is None
    line = own_folder("py -m ws", "orch-1", "echo 'hi'", "/runs", None)
    assert line == "py -m ws --job orch-1 --root /runs -- bash -c 'echo '\"'\"'hi'\"'\"''"


def test_a_folder_not_kept_is_removed_at_the_end(tmp_path, monkeypatch, capfd):
    from jobs import workspace

    monkeypatch.chdir(tmp_path)
    for name in ("PWD", workspace.OUTPUT_VAR):  # set by main: restored after the test
        monkeypatch.setenv(name, "")
    (tmp_path / "train.py").write_text("")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    code = workspace.main(["--job", "orch-x", "--", "bash", "-c", "pwd; ls; exit 3"])
    out = capfd.readouterr().out
    assert code == 3 and "train.py" in out and "(not kept)" in out
    assert "orch: the job runs with OMP_NUM_THREADS=1 (set for it" in out
    folder = next(line for line in out.splitlines() if line.startswith("/"))
    assert "orch-orch-x-" in folder and not os.path.exists(folder)
    # Its phases: started, first printed, ended (service/run_metrics.phases reads them).
    kinds = [(e["event"], e.get("exit_code")) for e in events.parse(out)]
    assert kinds == [("start", None), ("first_output", None), ("end", 3)]
    assert out.index("first_output") < out.index(folder + "\ntrain.py")


def test_the_loop_gets_the_config_only_where_it_takes_one():
    from jobs.runner import _takes_config

    def train_func(config): ...
    def with_default(config=None): ...
    def main(): ...
    def script_main(epochs=3, snapshot="s.pt"): ...
    def kw_only(*, epochs=3): ...
    assert _takes_config(train_func) and _takes_config(with_default) and _takes_config(print)
    assert not any(map(_takes_config, (main, script_main, kw_only)))


def test_each_node_is_told_its_place_as_skypilot_tells_it():
    from jobs.per_node import node_env, workspace_argv

    env = node_env(1, ["10.0.0.1", "10.0.0.2"], 8)
    assert env["SKYPILOT_NODE_RANK"] == "1" and env["SKYPILOT_NODE_IPS"] == "10.0.0.1\n10.0.0.2"
    assert (env["SKYPILOT_NUM_NODES"], env["SKYPILOT_NUM_GPUS_PER_NODE"]) == ("2", "8")
    assert (env["ORCH_NODE_RANK"], env["ORCH_HEAD_ADDRESS"], env["ORCH_NUM_NODES"]) == ("1", "10.0.0.1", "2")
    head = workspace_argv(0, "orch-1", "/runs", "/runs/orch-0", ["bash", "-c", "x"])
    other = workspace_argv(1, "orch-1", "/runs", "/runs/orch-0", ["bash", "-c", "x"])
    assert head[2].endswith(".workspace") and head[head.index("--"):] == ["--", "bash", "-c", "x"]
    # The head's folder is the job's kept one; the others' are temporary.
    assert head[3:9] == ["--job", "orch-1", "--root", "/runs", "--resume", "/runs/orch-0"]
    assert other[3:5] == ["--job", "orch-1-node1"] and "--root" not in other


def test_a_multi_node_run_job_on_an_owned_cluster_starts_one_process_a_node():
    from orchestrator.service.launch_spec import own_folder

    line = own_folder("py -m per_node", "orch-1", "torchrun x.py", "/runs", None, nodes=(2, 4))
    assert line == "py -m per_node --nodes 2 --gpus 4 --job orch-1 --root /runs -- bash -c 'torchrun x.py'"


def test_a_job_without_a_workdir_copies_nothing_of_the_folder_it_starts_in(tmp_path):
    """The folder Ray's driver starts in, without a workdir, is the node's own (a Ray
    started from a repository with its virtualenv: gigabytes, copied for an `echo`)."""
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "blob").write_bytes(b"x" * 1000)
    folder = prepare(None, tmp_path / "runs", "orch-1")
    assert list(folder.iterdir()) == [] and written(folder) == []
    from orchestrator.service.launch_spec import own_folder

    assert "--no-workdir" in own_folder("ws", "orch-1", "echo", None, None, copy=False)
