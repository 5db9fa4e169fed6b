"""service/why_failed.py: a failed job's error, its traceback once, and orch's hint."""

from __future__ import annotations

from orchestrator.service.why_failed import explain, message_with

CUDA = """orch: job orch-1 runs in /tmp/x
::orch::{"event": "phase", "name": "x"}
Traceback (most recent call last):
  File "multigpu.py", line 104, in <module>
    main(rank, world_size)
  File "multigpu.py", line 90, in main
    torch.cuda.set_device(rank)
  File "torch/cuda/__init__.py", line 567, in set_device
    torch._C._cuda_setDevice(device)
    ^^^^^^^^^^^^^^^^^^^^^^^^
AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'
"""


def test_a_run_jobs_error_its_traceback_once_and_the_cuda_hint():
    # Two workers printed the same traceback (Ray prefixes each line): one is shown.
    text = "".join(f"(pid={p}) {line}\n" for p in (11, 12) for line in CUDA.splitlines())
    found = explain(text, "Job entrypoint command failed with exit code 1; its output: ...")
    assert found["error"] == "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'"
    assert found["lines"][0] == "Traceback (most recent call last):"
    assert found["lines"][-1] == found["error"] and "  ..." in found["lines"]
    assert sum("Traceback" in line for line in found["lines"]) == 1
    assert "no GPU" in found["hint"]
    assert message_with(found, "Job entrypoint command failed with exit code 1; its output: x") == (
        "AttributeError: module 'torch._C' has no attribute '_cuda_setDevice' (exit code 1)")


def test_hints_for_a_missing_module_and_running_out_of_memory_and_none_without_an_error():
    missing = explain("Traceback (most recent call last):\n  File \"t.py\", line 1\n"
                      "ModuleNotFoundError: No module named 'transformers'\n")
    assert missing["hint"].startswith("module 'transformers' is not installed")
    oom = explain("step 3\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n")
    assert "out of memory" in oom["hint"] and oom["lines"] == [oom["error"]]
    killed = explain("step 1\nstep 2\n", "Job entrypoint command failed with exit code 137")
    assert killed["lines"] == ["step 1", "step 2"] and "SIGKILL" in killed["hint"]
    assert "error" not in killed and message_with(killed, "exit code 137") == "exit code 137"
    assert explain("orch: job orch-1 runs in /tmp/x\n") is None
    assert message_with(None, "as it was") == "as it was"
    colored = explain("\x1b[36m(_run pid=9107)\x1b[0m bash: line 5: torchrun: command not found\n")
    assert colored["lines"] == ["bash: line 5: torchrun: command not found"]
    assert colored["hint"].startswith("`torchrun` is not on the PATH")
