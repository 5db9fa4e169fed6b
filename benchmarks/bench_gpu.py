"""GPU figures, for a machine with CUDA: precision, utilization under loader tuning, scaling.

    .venv/bin/python benchmarks/bench_gpu.py [--skip-orch] [--steps 20]
    .venv/bin/python benchmarks/bench_gpu.py --cpu-smoke    # tiny sizes on CPU: checks the script

Three parts, about 3-5 minutes on one H200 (longer with several GPUs):
1. Time per training step of a compute-heavy model (a Transformer encoder, plain PyTorch,
   no Ray, synthetic data already on the GPU) in fp32 (TF32 off), fp32 with TF32 matmuls,
   bf16 autocast and fp16 autocast with a GradScaler; peak memory of each; the bf16 speed-up.
2. GPU utilization (NVML through nvidia-ml-py when importable, else `nvidia-smi`) of the
   built-in job made input-bound on purpose (`slow_data_ms`, a wider `model_width`) run
   through `orch submit` on one GPU with `data.loader_workers: 0` and then `auto`: mean
   utilization while training, samples/s, the loader workers chosen and the verdicts.
   Beside the script's own sampler, orch's telemetry of each run (its workers' NVML
   series: mean and p10 utilization, energy from the GPU's counter, energy per epoch).
3. With more than one GPU: the built-in job through orch with 1 and then N workers (N = the
   GPU count): samples/s of each and the scaling efficiency (N workers' / (N x one's)).
4. utilization_policy: the built-in job starved on purpose (a slow loader, the GPU idle
   between batches) with `{min_utilization: 20, window_minutes: 0.5, action: stop}`: when
   the runner stopped it, and the reason it gave.

Without CUDA it says so and exits with status 2, having measured nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OrchHome, fmt, job_yaml, log, print_table, steady  # noqa: E402

# -- GPU utilization sampling ------------------------------------------------------------------

class UtilSampler:
    """Samples every GPU's utilization (%) and memory (MiB) in a thread, with time stamps."""

    def __init__(self, interval_s: float = 0.2):
        self.interval_s = interval_s
        self.samples: list[tuple[float, int, float, float]] = []  # (t, gpu, util %, mem MiB)
        self.source = None
        self._stop = threading.Event()
        self._thread = None
        self._read = self._pick()

    def _pick(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                       for i in range(pynvml.nvmlDeviceGetCount())]
            self.source = "NVML (nvidia-ml-py)"

            def read():
                out = []
                for i, h in enumerate(handles):
                    u = pynvml.nvmlDeviceGetUtilizationRates(h)
                    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
                    out.append((i, float(u.gpu), mem.used / 2**20))
                return out
            return read
        except Exception:
            pass
        if shutil.which("nvidia-smi"):
            self.source = "nvidia-smi"

            def read():
                text = subprocess.run(
                    ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used",
                     "--format=csv,noheader,nounits"], capture_output=True, text=True,
                    timeout=10).stdout
                out = []
                for line in text.strip().splitlines():
                    i, u, m = (x.strip() for x in line.split(","))
                    out.append((int(i), float(u), float(m)))
                return out
            return read
        return None

    def _loop(self):
        while not self._stop.is_set():
            try:
                now = time.time()
                for i, u, m in self._read():
                    self.samples.append((now, i, u, m))
            except Exception as e:  # keep the benchmark going without utilization
                log(f"utilization sampling stopped: {e}")
                return
            self._stop.wait(self.interval_s)

    def __enter__(self):
        if self._read:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=15)

    def mean(self, start: float | None, end: float | None, busiest: int = 1) -> tuple:
        """Mean utilization in [start, end] of the `busiest` GPUs (the ones the job used:
        Ray picks which), and the peak memory used on them."""
        per_gpu: dict = {}
        for t, i, u, m in self.samples:
            if (start is None or t >= start) and (end is None or t <= end):
                per_gpu.setdefault(i, []).append((u, m))
        if not per_gpu:
            return None, None
        ranked = sorted(per_gpu.values(), key=lambda v: -statistics.mean(u for u, _ in v))
        used = [x for v in ranked[:busiest] for x in v]
        return statistics.mean(u for u, _ in used), max(m for _, m in used)


# -- 1. precision: plain PyTorch ---------------------------------------------------------------

def precision_part(args, device) -> list[dict]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    d, layers, seq, batch, vocab = ((64, 2, 32, 8, 128) if args.cpu_smoke
                                    else (args.d_model, args.layers, args.seq, args.batch, 8192))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            layer = nn.TransformerEncoderLayer(d, nhead=max(1, d // 64), dim_feedforward=4 * d,
                                               batch_first=True, norm_first=True, dropout=0.0)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.head = nn.Linear(d, vocab)

        def forward(self, tokens):
            return self.head(self.encoder(self.embed(tokens)))

    g = torch.Generator(device="cpu").manual_seed(0)
    tokens = torch.randint(0, vocab, (batch, seq), generator=g).to(device)
    target = torch.randint(0, vocab, (batch, seq), generator=g).to(device)
    cuda = device.type == "cuda"
    modes = ["fp32", "bf16"] if not cuda else ["fp32", "tf32", "bf16", "fp16"]
    if cuda and not torch.cuda.is_bf16_supported():
        modes.remove("bf16")
    results = []
    for mode in modes:
        torch.manual_seed(0)
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        torch.backends.cudnn.allow_tf32 = mode == "tf32"
        model = Model().to(device)
        params = sum(p.numel() for p in model.parameters())
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mode)
        scaler = torch.amp.GradScaler(device.type, enabled=mode == "fp16")

        def step(opt=opt, model=model, dtype=dtype, scaler=scaler):  # this mode's, bound now
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                logits = model(tokens)
            loss = F.cross_entropy(logits.float().flatten(0, 1), target.flatten())
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            return loss

        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(args.warmup):
            step()
        if cuda:
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        if cuda:
            torch.cuda.synchronize(device)
        per_step = (time.perf_counter() - start) / args.steps
        flops = 6 * params * batch * seq  # weights only: attention's own matmuls not counted
        results.append({"mode": mode, "step_s": per_step, "samples_s": batch / per_step,
                        "tflops": flops / per_step / 1e12,
                        "peak_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None,
                        "loss": float(loss.detach()), "params": params})
        log(f"{mode}: {per_step * 1000:.1f} ms/step")
        del model, opt
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default
    title = (f"1. precision: Transformer encoder {layers} x d{d}, seq {seq}, batch {batch}, "
             f"{results[0]['params'] / 1e6:.1f}M params, {args.steps} steps after {args.warmup} "
             f"warm-up, on {torch.cuda.get_device_name(device) if cuda else 'cpu'}")
    fp32 = results[0]["step_s"]
    print_table(title, ["precision", "ms/step", "samples/s", "~TFLOP/s", "peak mem GiB",
                        "speed-up vs fp32", "final loss"],
                [(r["mode"], f"{r['step_s'] * 1000:.1f}", f"{r['samples_s']:,.0f}",
                  f"{r['tflops']:.1f}", fmt(r["peak_gib"], ".2f"), f"{fp32 / r['step_s']:.2f}x",
                  f"{r['loss']:.3f}") for r in results])
    bf16 = next((r for r in results if r["mode"] == "bf16"), None)
    if bf16:
        print(f"RATIO bf16 / fp32 time per step: {bf16['step_s'] / fp32:.3f} "
              f"(bf16 speed-up {fp32 / bf16['step_s']:.2f}x; peak memory bf16 / fp32 "
              + (f"{bf16['peak_gib'] / results[0]['peak_gib']:.2f}x" if bf16["peak_gib"] else "n/a")
              + ")")
    return results


# -- 2 and 3: through orch ---------------------------------------------------------------------

def run_job(home, sampler, name, config, **kw) -> dict:
    run = home.submit(name, job_yaml(name, config, **kw))
    if not run.ok:
        raise SystemExit(run.fail_text())
    reports = run.reports()
    m = run.metrics
    first, last = run.first_t("progress"), run.last_t("report")
    util, mem = sampler.mean(first, last, kw.get("num_workers", 1)) if sampler else (None, None)
    tuned = run.of("loader_tuned")
    tel = (m.get("telemetry") or {}).get("summary") or {}
    epochs = m.get("epoch") or len(reports) or None
    return {"tel_util": tel.get("mean_util"), "tel_p10": tel.get("p10_util"),
            "tel_source": tel.get("source"), "energy_wh": tel.get("energy_wh"),
            "energy_basis": tel.get("energy_basis"),
            "wh_per_epoch": _div(tel.get("energy_wh"), epochs), "sps": steady([r.get("samples_per_sec") for r in reports]),
            "util": util, "mem_mib": mem, "orch_util": m.get("gpu_util_percent"),
            "orch_mem_gb": m.get("gpu_mem_gb"), "loader_workers": m.get("loader_workers"),
            "pin_memory": m.get("pin_memory"), "precision": m.get("precision"),
            "device": m.get("device"), "data_fraction": m.get("data_fraction"),
            "data_ms": _ms(m.get("time_data_s")), "copy_ms": _ms(m.get("time_copy_s")),
            "compute_ms": _ms(m.get("time_compute_s")),
            "tuning": tuned[0].get("seconds_per_batch") if tuned else None,
            "verdict": m.get("verdict") or {}, "wall_s": run.returned - run.invoked,
            "accuracy": m.get("accuracy"), "trials": m.get("precision_trials") or {},
            "phases": m.get("phases") or {}}


def print_run_facts(label: str, r: dict) -> None:
    """What `precision: auto` measured and kept, the accuracy, and where the time went."""
    trials = ", ".join(f"{p} {t * 1000:.2f} ms" for p, t in r["trials"].items()) or "n/a"
    phases = ", ".join(f"{k} {v:.1f}s" for k, v in r["phases"].items()) or "n/a"
    print(f"{label}: precision {r['precision']} (a step took {trials}); accuracy "
          f"{fmt(r['accuracy'], '.3f')}; phases: {phases}")


def _ms(v):
    return None if v is None else v * 1000


def orch_parts(args, gpus: int) -> None:
    use_gpu = not args.cpu_smoke
    sampler = UtilSampler() if use_gpu else None
    if sampler and not sampler.source:
        log("neither nvidia-ml-py nor nvidia-smi found: no utilization figures")
    smoke = args.cpu_smoke
    slow = {"epochs": 2 if smoke else 3, "batch_size": 64 if smoke else args.job_batch,
            "lr": 1e-3, "seed": 0, "dataset_multiplier": 1 if smoke else args.job_multiplier,
            "slow_data_ms": args.slow_data_ms, "model_width": 1 if smoke else args.model_width}
    with OrchHome(prefix="obg") as home:
        with (sampler or _Null()):
            rows, runs = [], {}
            for lw in (0, "auto"):
                log(f"2. input-bound job on one {'GPU' if use_gpu else 'CPU worker'}, loader_workers {lw}")
                r = run_job(home, sampler, f"gpu-slow-{lw}", slow, num_workers=1, use_gpu=use_gpu,
                            precision="auto", loader_workers=lw, pin_memory="auto")
                runs[lw] = r
                rows.append((f"loader_workers: {lw}", str(r["loader_workers"]), str(r["pin_memory"]),
                             fmt(r["util"], ".0f", " %"), fmt(r["tel_util"], ".0f", " %"),
                             fmt(r["tel_p10"], ".0f", " %"), fmt(r["wh_per_epoch"], ".2f"),
                             fmt(r["orch_mem_gb"], ".2f"), fmt(r["sps"], ",.0f"),
                             fmt(r["data_ms"], ".2f"), fmt(r["copy_ms"], ".2f"),
                             fmt(r["compute_ms"], ".2f"), fmt(r["data_fraction"], ".2f"),
                             r["verdict"].get("kind", "n/a")))
            print_table(f"2. utilization before and after loader tuning: built-in job, "
                        f"slow_data_ms {slow['slow_data_ms']:g}, model_width {slow['model_width']}, "
                        f"batch {slow['batch_size']}, 1 worker, precision {runs[0]['precision']} "
                        f"(utilization from {sampler.source if sampler else 'n/a'}, mean over training)",
                        ["run", "loader workers", "pinned", "GPU util", "util (orch's telemetry)",
                         "p10 (orch's)", "Wh/epoch (orch's)",
                         "GPU mem GiB (orch's)", "samples/s", "data ms",
                         "copy ms", "compute ms", "data share", "verdict"], rows)
            if runs["auto"]["tuning"]:
                print("auto tuning, seconds per batch: " + ", ".join(
                    f"{k} workers {v * 1000:.1f} ms" for k, v in runs["auto"]["tuning"].items()))
            for lw, r in runs.items():
                print(f"verdict with loader_workers {lw}: {r['verdict'].get('kind', 'n/a')}; advice: "
                      + "; ".join(r["verdict"].get("advice", [])))
                print_run_facts(f"loader_workers {lw}", r)
            b, a = runs[0], runs["auto"]
            print(f"RATIO tuned / 0 loader workers: samples/s {fmt(_div(a['sps'], b['sps']), '.2f')}x, "
                  f"GPU utilization {fmt(b['util'], '.0f', ' %')} -> {fmt(a['util'], '.0f', ' %')}")
            for lw, r in runs.items():
                print(f"orch's telemetry, loader_workers {lw}: {r['tel_source']} mean "
                      f"{fmt(r['tel_util'], '.1f', ' %')}, p10 {fmt(r['tel_p10'], '.1f', ' %')}, "
                      f"energy {fmt(r['energy_wh'], '.2f', ' Wh')} ({r['energy_basis'] or 'n/a'}), "
                      f"{fmt(r['wh_per_epoch'], '.2f', ' Wh')} per epoch")

            n = gpus if use_gpu else 2
            if n < 2:
                print("3. scaling: skipped, this machine has one GPU (needs 2 or more)")
            else:
                scaling_part(home, sampler, args, n, use_gpu)
            idle_part(home, slow, use_gpu)


def scaling_part(home, sampler, args, n: int, use_gpu: bool) -> None:
    """3. The built-in job with 1 and then n workers: samples/s and the efficiency."""
    smoke = args.cpu_smoke
    heavy = {"epochs": 2 if smoke else 3, "batch_size": 64 if smoke else args.job_batch,
             "lr": 1e-3, "seed": 0,
             "dataset_multiplier": 2 if smoke else args.job_multiplier * 4,
             "model_width": 1 if smoke else args.model_width}
    rows, res = [], {}
    for w in (1, n):
        log(f"3. scaling: {w} worker(s)")
        r = run_job(home, sampler, f"gpu-scale-{w}", heavy, num_workers=w, use_gpu=use_gpu,
                    precision="auto", loader_workers="auto", pin_memory="auto")
        res[w] = r
        rows.append((f"{w} worker(s)", fmt(r["sps"], ",.0f"), fmt(r["util"], ".0f", " %"),
                     fmt(r["tel_util"], ".0f", " %"),
                     fmt(r["data_fraction"], ".2f"), r["verdict"].get("kind", "n/a"),
                     fmt(r["verdict"].get("scaling_efficiency"), ".2f")))
    print_table(f"3. scaling: built-in job, model_width {heavy['model_width']}, batch "
                f"{heavy['batch_size']} per worker, loader_workers auto",
                ["run", "samples/s", "GPU util", "util (orch's telemetry)", "data share", "verdict",
                 "orch's efficiency"], rows)
    for w, r in res.items():
        print_run_facts(f"{w} worker(s)", r)
    speed = _div(res[n]["sps"], res[1]["sps"])
    print(f"RATIO {n} workers / 1 worker: {fmt(speed, '.2f')}x (efficiency "
          f"{fmt(_div(speed, n), '.2f')})")


def idle_part(home, slow: dict, use_gpu: bool) -> None:
    """4. A starved run stopped by its utilization_policy: when, and why."""
    log("4. utilization_policy: a starved job, stopped once its device idles for 30 s")
    starved = dict(slow, epochs=1000, slow_data_ms=200.0)
    policy = "utilization_policy: {min_utilization: 20, window_minutes: 0.5, action: stop}\n"
    run = home.submit("gpu-idle", job_yaml("gpu-idle", starved, num_workers=1, use_gpu=use_gpu,
                                           precision="auto", loader_workers=0, extra=policy))
    started = run.first_t("worker")
    stop = run.of("utilization")
    tel = (run.metrics.get("telemetry") or {}).get("summary") or {}
    after = stop[0]["t"] - started if stop and started else None
    print(f"4. utilization_policy: {run.rec.get('status')} after {fmt(after, '.1f', ' s')} "
          f"of its worker (window 30 s, telemetry every 5 s); message: {run.rec.get('message')}; "
          f"its device: {tel.get('source')} mean {fmt(tel.get('mean_util'), '.1f', ' %')}")


def _div(a, b):
    return a / b if a and b else None


class _Null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32, help="part 1's batch")
    ap.add_argument("--slow-data-ms", type=float, default=0.2, help="part 2's slow_data_ms")
    ap.add_argument("--model-width", type=int, default=16, help="parts 2-3: DigitsNet width")
    ap.add_argument("--job-batch", type=int, default=256, help="parts 2-3: batch per worker")
    ap.add_argument("--job-multiplier", type=int, default=10, help="parts 2-3: dataset_multiplier")
    ap.add_argument("--skip-orch", action="store_true", help="part 1 only (no Ray, no orch)")
    ap.add_argument("--cpu-smoke", action="store_true",
                    help="run every part on CPU at tiny sizes, to check the script itself")
    args = ap.parse_args()

    import torch

    if not torch.cuda.is_available() and not args.cpu_smoke:
        print(f"bench_gpu.py needs a CUDA GPU and torch.cuda.is_available() is False here "
              f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'none'}); nothing "
              f"measured. Run it on a machine with an NVIDIA GPU and a CUDA build of torch "
              f"(`--cpu-smoke` checks the script on CPU).", file=sys.stderr)
        raise SystemExit(2)
    device = torch.device("cpu") if args.cpu_smoke else torch.device("cuda", 0)
    gpus = 0 if args.cpu_smoke else torch.cuda.device_count()
    started = time.monotonic()
    log(f"{gpus} GPU(s)" + (f": {torch.cuda.get_device_name(0)}" if gpus else " (CPU smoke run)"))
    precision_part(args, device)
    if not args.skip_orch:
        if gpus:
            torch.cuda.empty_cache()
        orch_parts(args, gpus)
    log(f"done in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
