"""Built-in job `image-classification`: a small CNN on scikit-learn's digits (8x8 images).

The data ships inside scikit-learn, so the job needs no download. Config keys: epochs,
batch_size, lr, dataset_multiplier (repeats the training split to make the job longer),
seed, model_width (multiplies the channels: more compute per sample) and slow_data_ms
(sleeps per sample in the dataset: an input-bound job on purpose).
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import ray.train
import ray.train.torch
import torch
import torch.nn.functional as F
from torch import nn

from .. import events
from ..context import current


class DigitsNet(nn.Module):
    def __init__(self, width: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32 * width, 3, padding=1)
        self.conv2 = nn.Conv2d(32 * width, 64 * width, 3, padding=1)
        self.fc1 = nn.Linear(64 * width * 4 * 4, 128 * width)
        self.fc2 = nn.Linear(128 * width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits (X, y), read from the file scikit-learn ships without importing
    scikit-learn: that import (SciPy and the rest) took 1.2 s of each worker's start here.
    What `sklearn.datasets.load_digits(return_X_y=True)` returns, which is the fallback."""
    import gzip
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("sklearn")  # finds the package, does not run it
    if spec is not None and spec.submodule_search_locations:
        path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            with gzip.open(path) as f:
                data = np.loadtxt(f, delimiter=",")
            return data[:, :-1], data[:, -1].astype(int)
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return x, y


def load_split(seed: int = 0, test_fraction: float = 0.2):
    """Digits as float tensors, split once with a fixed seed so every worker agrees."""
    x, y = load_digits_arrays()
    x = (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(len(y) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return (torch.from_numpy(x[train]), torch.from_numpy(y[train]).long(),
            torch.from_numpy(x[test]), torch.from_numpy(y[test]).long())


class SlowDataset(torch.utils.data.Dataset):
    """The training split, made slow on purpose (`slow_data_ms` per sample) to show what an
    input-bound job looks like and what loader workers do for it."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, delay_s: float):
        self.x, self.y, self.delay_s = x, y, delay_s

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        time.sleep(self.delay_s)  # stands for decoding or augmenting one sample
        return self.x[i], self.y[i]


def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, ctx) -> float:
    model.eval()
    with torch.no_grad(), ctx.autocast():
        pred = model(x.to(ctx.device)).argmax(dim=1).cpu()
    model.train()
    return float((pred == y).float().mean())


def train_loop(config: dict) -> None:
    ctx = current()
    epochs = int(config.get("epochs", 8))
    batch_size = int(config.get("batch_size", 32))
    lr = float(config.get("lr", 2e-3))
    multiplier = max(1, int(config.get("dataset_multiplier", 1)))
    torch.manual_seed(int(config.get("seed", 0)))

    x_train, y_train, x_test, y_test = load_split()
    if multiplier > 1:
        x_train, y_train = x_train.repeat(multiplier, 1, 1, 1), y_train.repeat(multiplier)
    slow_ms = float(config.get("slow_data_ms", 0))
    dataset = (SlowDataset(x_train, y_train, slow_ms / 1000) if slow_ms
               else torch.utils.data.TensorDataset(x_train, y_train))
    # The loader shards itself (and keeps its loader processes from epoch to epoch).
    loader = ray.train.torch.prepare_data_loader(ctx.data_loader(dataset, batch_size),
                                                 add_dist_sampler=False, move_to_device=False)
    net = DigitsNet(int(config.get("model_width", 1)))
    ctx.measure_precision(net, x_train[:batch_size],
                          lambda logits: F.cross_entropy(logits.float(), y_train[:batch_size]
                                                         .to(logits.device)))
    model = ray.train.torch.prepare_model(net)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scaler = ctx.grad_scaler()

    start_epoch = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:  # resumed after a failure or by a rerun with the same name
        with checkpoint.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"), map_location=ctx.device)
        _unwrap(model).load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"] + 1
        if ctx.rank == 0:
            events.emit("resume", epoch=start_epoch)

    steps = len(loader)
    for epoch in range(start_epoch, epochs):
        if hasattr(loader, "sampler") and hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        # The loss is summed on the device and read once an epoch: reading it each step
        # would make the CPU wait for the GPU every step.
        t0, seen, loss_sum = time.perf_counter(), 0, torch.zeros((), device=ctx.device)
        timer = ctx.timer
        timer.reset()
        for step, (xb, yb) in enumerate(timer.batches(loader), start=1):
            xb, yb = timer.to_device(xb, yb)
            optimizer.zero_grad(set_to_none=True)
            with ctx.autocast():
                logits = model(xb)
            loss = F.cross_entropy(logits.float(), yb)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            loss_sum += loss.detach() * len(yb)
            timer.step_done(len(yb))
            seen += len(yb)
            ctx.progress(epoch + 1, epochs, step, steps)
        epoch_loss = float(loss_sum) / max(seen, 1)  # waits for the last step's work
        elapsed = time.perf_counter() - t0
        metrics = {
            "epoch": epoch + 1,
            "epochs": epochs,
            "loss": epoch_loss,
            "accuracy": evaluate(model, x_test, y_test, ctx),
            # Every worker sees an equal shard, so the whole job's rate is world_size x ours.
            "samples_per_sec": seen * ctx.world_size / elapsed if elapsed > 0 else 0.0,
            "epoch_s": elapsed,
            **ctx.precision_record(),
            "workers": ctx.world_size,
            "device": str(ctx.device),
            "loader_workers": ctx.loader_workers,
            "loader_auto": ctx.requested_loader_workers == "auto",
            "pin_memory": ctx.pin_memory,
            **timer.summary(),
        }
        with tempfile.TemporaryDirectory() as d:
            ckpt = None
            if ctx.rank == 0:
                torch.save({"model": _unwrap(model).state_dict(),
                            "optimizer": optimizer.state_dict(), "epoch": epoch},
                           os.path.join(d, "state.pt"))
                ckpt = ray.train.Checkpoint.from_directory(d)
            ray.train.report(metrics, checkpoint=ckpt)
        if ctx.should_stop(epoch + 1):  # the budget is spent: stop here, checkpoint kept
            return


def _unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "module", model)
