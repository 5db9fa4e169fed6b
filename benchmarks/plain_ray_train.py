"""The near-empty job of bench_runner_overhead.py as plain Ray Train: the baseline.

Submitted through Ray's Jobs API to the same local Ray as orch's job (`python -m
benchmarks.plain_ray_train` as the entrypoint): a TorchTrainer with the same number of
workers, the same model (DigitsNet), data (the digits split), batch size and one epoch,
with `prepare_model` / `prepare_data_loader` and a report per epoch, and none of orch's
runner (no events, no profiler, no precision trials, no verdict).
"""

from __future__ import annotations

import json
import os
import sys
import time


def train_func(config: dict) -> None:
    import ray.train
    import ray.train.torch
    import torch
    import torch.nn.functional as F

    from jobs.builtin.image_classification import DigitsNet, load_split

    torch.manual_seed(0)
    x, y, _, _ = load_split()
    loader = ray.train.torch.prepare_data_loader(torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, y), batch_size=config["batch_size"], shuffle=True))
    model = ray.train.torch.prepare_model(DigitsNet())
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for epoch in range(config["epochs"]):
        for xb, yb in loader:
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xb), yb).backward()
            opt.step()
        ray.train.report({"epoch": epoch + 1})


def main() -> int:
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    workers, epochs = int(sys.argv[1]), int(sys.argv[2])
    ray.init()
    result = TorchTrainer(train_func, train_loop_config={"batch_size": 32, "epochs": epochs},
                          scaling_config=ScalingConfig(num_workers=workers),
                          run_config=RunConfig(name=f"plain-{os.getpid()}",
                                               storage_path=os.environ["PLAIN_STORAGE"])).fit()
    print("PLAIN_RESULT " + json.dumps(result.metrics), flush=True)
    return 0


def submit_and_wait(dashboard_url: str, env: dict, workers: int, epochs: int,
                    storage: str) -> float:
    """Seconds from the Jobs API submit call to the job's SUCCEEDED, polled every 0.1 s; in
    a process of its own, since Ray reads its auth settings (`env`) when it is imported."""
    import subprocess

    proc = subprocess.run([sys.executable, __file__, "--submit", dashboard_url, str(workers),
                           str(epochs), storage], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("PLAIN_SECONDS ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"the plain Ray Train job failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return float(lines[-1].split()[1])


def _submit(dashboard_url: str, workers: int, epochs: int, storage: str) -> int:
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(dashboard_url)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    start = time.time()
    job = client.submit_job(
        entrypoint=f"{sys.executable} -m benchmarks.plain_ray_train {workers} {epochs}",
        runtime_env={"env_vars": {"PYTHONPATH": root, "PLAIN_STORAGE": storage}})
    while True:
        status = client.get_job_status(job)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            break
        time.sleep(0.1)
    took = time.time() - start
    if status != JobStatus.SUCCEEDED:
        print(f"ended {status}:\n{client.get_job_logs(job)[-3000:]}")
        return 1
    print(f"PLAIN_SECONDS {took:.3f}")
    return 0


def floor(address: str, env: dict, workers: int, runs: int, storage: str) -> list[float]:
    """Seconds of each of `runs` no-op `TorchTrainer.fit()` calls (the loop reports once and
    returns) from one driver that has already imported torch and Ray Train and joined the
    Ray at `address`, with the actors orch's runner leaves out left out here too: what Ray
    Train itself costs a run (a controller, its workers, their set-up and teardown), before
    any driver start, Jobs API, data or model. In a process of its own, as above."""
    import subprocess

    from jobs.trainer import TRAIN_ENV
    from orchestrator.service.launch_spec import _RAY_TRAIN_ENV

    # Ray Train's settings as orch's jobs get them (the job's environment over the
    # runner's defaults), and, as for orch's local Ray itself, 127.0.0.1 not swapped for
    # the machine's address, where that Ray does not listen.
    train_env = {**TRAIN_ENV, **_RAY_TRAIN_ENV, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    proc = subprocess.run([sys.executable, __file__, "--floor", address, str(workers),
                           str(runs), storage], env={**os.environ, **env, **train_env},
                          capture_output=True, text=True, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("FLOOR_SECONDS ")]
    if proc.returncode != 0 or len(lines) != runs:
        raise SystemExit(f"the no-op TorchTrainer runs failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return [float(ln.split()[1]) for ln in lines]


def _noop(config: dict) -> None:
    import ray.train

    ray.train.report({"done": 1})


def _floor(address: str, workers: int, runs: int, storage: str) -> int:
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from jobs.trainer import trainer_class

    host = address.rsplit(":", 1)[0]
    ray.init(address=address, log_to_driver=False,
             **({"_node_ip_address": host} if host.startswith("127.") else {}))
    trainer_class = trainer_class(TorchTrainer)
    for i in range(runs):
        start = time.time()
        trainer_class(_noop, scaling_config=ScalingConfig(num_workers=workers),
                      run_config=RunConfig(name=f"floor-{os.getpid()}-{i}",
                                           storage_path=storage)).fit()
        print(f"FLOOR_SECONDS {time.time() - start:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--floor":
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        sys.exit(_floor(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]))
    if sys.argv[1] == "--submit":
        sys.exit(_submit(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]))
    sys.exit(main())
