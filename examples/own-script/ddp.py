"""A plain PyTorch DDP script, as people write them: it runs under `torchrun`, `accelerate
launch`, plain `python ddp.py` (one process), or as orch's `train.entrypoint: ddp:main`
(Ray Train's workers, whose process group is made already). Nothing in it is orch's but the
optional report line; its snapshot lives in its own folder, as tutorials keep it."""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch import nn


def setup() -> tuple[int, int, torch.device]:
    """(rank, world size, device): the process group torchrun's variables describe, unless
    one exists (Ray Train made it) or there is none to make (plain python)."""
    cuda = torch.cuda.is_available()
    if not dist.is_initialized() and "WORLD_SIZE" in os.environ:
        dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    local = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local)
    return rank, world, torch.device(f"cuda:{local}" if cuda else "cpu")


def main(epochs: int = 3, snapshot: str = "snapshot.pt") -> None:
    rank, world, device = setup()
    torch.manual_seed(rank)
    model = nn.Linear(16, 1).to(device)
    if dist.is_initialized():
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.index is not None else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start = 0
    if os.path.exists(snapshot):  # the tutorial's resume: orch gives each job a fresh folder
        start = torch.load(snapshot)["epoch"]
        print(f"Resuming training from snapshot at Epoch {start}")
    x, y = torch.randn(256, 16, device=device), torch.randn(256, 1, device=device)
    for epoch in range(start, start + epochs):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            torch.save({"epoch": epoch + 1}, snapshot)
            # Optional: orch shows this as the job's metrics (docs/own-script.md).
            print("::orch::" + json.dumps({"event": "report", "metrics": {
                "epoch": epoch + 1, "epochs": start + epochs, "loss": loss.item()}}), flush=True)
    print(f"rank {rank} of {world} done on {device}", flush=True)
    if dist.is_initialized() and "WORLD_SIZE" in os.environ and "RAY_ADDRESS" not in os.environ:
        dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    main(parser.parse_args().epochs)
