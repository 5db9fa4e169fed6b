"""Precision by measurement (jobs/precision.py): the choice from figures, and real timed
steps of a small model on this CPU."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from jobs import precision as prec
from jobs.context import WorkerContext


@pytest.mark.parametrize("trials,chosen", [
    ({"fp32": 0.0055, "bf16": 0.061}, "fp32"),             # a CPU without native bf16
    ({"fp32": 0.030, "bf16": 0.012, "fp16": 0.011}, "bf16"),  # fp16 within 10%: bf16 is safer
    ({"fp32": 0.030, "bf16": 0.020, "fp16": 0.010}, "fp16"),  # fp16 clearly faster (scaled)
    ({"fp32": 0.010, "bf16": 0.0095}, "fp32"),             # 5% is not worth the half type
])
def test_auto_keeps_the_fastest_unless_a_safer_one_is_close(trials, chosen):
    assert prec.pick(trials) == chosen


def test_candidates_per_device():
    assert prec.candidates("cpu", False) == ["fp32", "bf16"]
    assert prec.candidates("cuda", True) == ["fp32", "bf16", "fp16"]
    assert prec.candidates("cuda", False) == ["fp32", "fp16"]  # no bf16 before Ampere


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


def _ctx(requested: str, precision: str) -> WorkerContext:
    return WorkerContext(job_id="t", rank=0, world_size=1, device=torch.device("cpu"),
                         precision=precision, loader_workers=0, pin_memory=False,
                         requested_precision=requested)


def test_timing_leaves_the_model_as_it_found_it():
    torch.manual_seed(0)
    model = _Net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    seconds = prec.measure(model, torch.randn(16, 1, 8, 8), ["fp32", "bf16"],
                           torch.device("cpu"), rounds=2, min_s=0.01)
    assert set(seconds) == {"fp32", "bf16"} and min(seconds.values()) > 0
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # weights and BN statistics
    assert all(p.grad is None for p in model.parameters())


def test_auto_trains_in_what_it_measured_fastest_and_an_explicit_choice_stays(capsys):
    batch = torch.randn(32, 1, 8, 8)
    ctx = _ctx("auto", "fp32")
    chosen = ctx.measure_precision(_Net(), batch)
    assert set(ctx.precision_trials) == {"fp32", "bf16"}
    assert chosen == ctx.precision == prec.pick(ctx.precision_trials)
    assert '"event":"precision"' in capsys.readouterr().out.replace(" ", "")
    assert ctx.precision_record()["precision_auto"] is True

    explicit = _ctx("bf16", "bf16")
    assert explicit.measure_precision(_Net(), batch) == "bf16"
    assert set(explicit.precision_trials) == {"fp32", "bf16"}
    assert explicit.precision_record() == {"precision": "bf16", "precision_auto": False,
                                           "precision_trials": explicit.precision_trials}


def test_the_loader_shards_itself_and_keeps_its_processes_across_epochs():
    from torch.utils.data import TensorDataset
    from torch.utils.data.distributed import DistributedSampler

    data = TensorDataset(torch.arange(20).float(), torch.arange(20))
    ctx = WorkerContext(job_id="t", rank=1, world_size=2, device=torch.device("cpu"),
                        precision="fp32", loader_workers=2, pin_memory=False,
                        requested_loader_workers=2)
    loader = ctx.data_loader(data, batch_size=5)
    assert isinstance(loader.sampler, DistributedSampler) and loader.persistent_workers
    loader.sampler.set_epoch(0)
    seen = sorted(int(i) for _, y in loader for i in y)
    assert len(seen) == 10  # this worker's half; the other rank gets the rest
    alone = WorkerContext(job_id="t", rank=0, world_size=1, device=torch.device("cpu"),
                          precision="fp32", loader_workers=0, pin_memory=False,
                          requested_loader_workers=0)
    assert sorted(int(i) for _, y in alone.data_loader(data, 5) for i in y) == list(range(20))


class _SlowStart(torch.utils.data.Dataset):
    """3 ms a sample; the second loader process's first sample takes 1 s more (a process
    that starts late on a busy machine)."""

    started = False

    def __len__(self):
        return 400

    def __getitem__(self, i):
        import time

        info = torch.utils.data.get_worker_info()
        if info is not None and info.id == 1 and not _SlowStart.started:
            _SlowStart.started = True  # this process's copy of the class
            time.sleep(1.0)
        time.sleep(0.003)
        return torch.tensor(float(i)), i


def test_auto_loader_workers_time_batches_only_once_every_loader_process_has_started():
    ctx = WorkerContext(job_id="t", rank=0, world_size=1, device=torch.device("cpu"),
                        precision="fp32", loader_workers=0, pin_memory=False,
                        requested_loader_workers="auto")
    ctx.data_loader(_SlowStart(), batch_size=5)
    tuning = ctx.loader_tuning
    assert set(tuning) >= {"0", "2"} and ctx.loader_workers >= 2, tuning
    assert tuning["2"] < tuning["0"] / 1.5, tuning  # the late start is not in the timing
