"""How busy owned GPUs were while jobs held them (NVML telemetry), what a useful GPU-hour
costs, and the advice to fix the jobs before buying: a table of pools, then advise and the CLI."""

from __future__ import annotations

import pytest

from orchestrator.decision.advise import WhatIf, advise
from orchestrator.decision.measured_use import FIX_JOBS_BELOW, MIN_COVERAGE, RunTelemetry, measured_use
from orchestrator.decision.utilization import owned_use
from orchestrator.records.cost import CostEntry
from tests.conftest import run_json, run_orch, store_at
from tests.unit.decision.test_advise import (
    A100S,
    CONFIG,
    DAY,
    NOW,
    OFFERS,
    T0,
    WORKSTATION,
    H,
    fill,
    record,
    rows,
    settings,
)

# 2 x A100 over a 240 h window: ownership 1 USD a pool-hour (240 USD), power 0.25 kW x
# 0.25 USD/kWh = 0.0625 USD a held GPU-hour. A job of both GPUs for 120 h holds 240
# GPU-hours: (240 + 15) / 240 = 1.0625 USD a held GPU-hour.
PER_HELD = 1.0625


def tel(util: float, hours: float, *, source: str = "nvml", workers: int = 2, **extra) -> dict:
    """A job's metrics with the runner's combined telemetry summary (jobs/telemetry.combine)."""
    summary = {"source": source, "device": "NVIDIA A100" if source == "nvml" else "cpu",
               "workers": workers, "mean_util": util, "p10_util": util / 2, "peak_mem_gb": 30.0,
               "mem_total_gb": 80.0, "seconds": hours * 3600.0}
    return {"telemetry": {"workers": {}, "summary": summary}, **extra}


def job(jid: str, count: int, start_h: float, end_h, target: str = "onprem", gpu="A100") -> CostEntry:
    return CostEntry(id=jid, target=target, gpu=gpu, gpu_count=count, started_at=T0 + start_h * H,
                     finished_at=None if end_h is None else T0 + end_h * H)


INPUT_BOUND = {"verdict": {"kind": "input-bound", "reasons": [], "advice": []},
               "run_settings": {"precision": "fp32"}}

# (case, jobs, metrics by id, expected figures of the one A100 pool)
CASES = [
    ("fully measured, busy", [job("a", 2, 0, 120)], {"a": tel(90, 120)},
     dict(held_gpu_hours=240.0, measured_gpu_hours=240.0, coverage=1.0, measured_busy_share=0.9,
          cost_per_held_gpu_hour_usd=PER_HELD, cost_per_useful_gpu_hour_usd=PER_HELD / 0.9,
          measured_jobs=1, fix_jobs_first=False)),
    # Held 4x the hours the GPUs were busy: a useful GPU-hour costs 4 held ones.
    ("held 4x more than busy", [job("a", 2, 0, 120)], {"a": tel(25, 120, **INPUT_BOUND)},
     dict(coverage=1.0, measured_busy_share=0.25, cost_per_useful_gpu_hour_usd=PER_HELD * 4,
          input_bound_jobs=1, fix_jobs_first=True)),
    # 120 GPU-hours at 50%; 120 without telemetry; 80 held by a job whose one worker of two
    # reported, over half its run: 80 x 0.5 x 0.5 = 20 covered, at 100%. Covered 140 of 320
    # (43.75%), busy (60 + 20) / 140 = 57%: under the threshold, but too little measured.
    ("partly measured", [job("a", 2, 0, 60), job("b", 2, 60, 120), job("c", 2, 120, 160)],
     {"a": tel(50, 60), "c": tel(100, 20, workers=1)},
     dict(held_gpu_hours=320.0, coverage=140 / 320, measured_gpu_hours=140.0,
          measured_busy_share=80 / 140, measured_jobs=2, unmeasured_jobs=1, fix_jobs_first=False)),
    # A CPU worker's share (psutil) is not GPU use: left out, counted apart.
    ("CPU telemetry ignored", [job("a", 2, 0, 120)], {"a": tel(95, 120, source="psutil")},
     dict(coverage=0.0, measured_busy_share=None, cost_per_useful_gpu_hour_usd=None,
          cpu_telemetry_jobs=1, measured_jobs=0, fix_jobs_first=False)),
    # No telemetry, and one still running: unmeasured, never 0% or 100% busy.
    ("no telemetry", [job("a", 2, 0, 60), job("b", 2, 180, None)], {"a": {}},
     dict(held_gpu_hours=240.0, coverage=0.0, measured_busy_share=None,
          cost_per_useful_gpu_hour_usd=None, unmeasured_jobs=2, fix_jobs_first=False)),
]


def measure(jobs, metrics, lines=(A100S,), local_gpus=1):
    use = owned_use(jobs, list(lines), WORKSTATION, start=T0, end=NOW, basis="w",
                    electricity_price=0.25, local_gpus=local_gpus)
    return use, measured_use(use, jobs, metrics, end=NOW)


@pytest.mark.parametrize("case,jobs,metrics,want", CASES, ids=[c[0] for c in CASES])
def test_each_owned_pool_held_hours_busy_share_and_useful_cost(case, jobs, metrics, want):
    use, m = measure(jobs, metrics)
    [p] = m.pools
    assert p.pool == "onprem A100 x2" and p.held_gpu_hours == pytest.approx(use.pools[0].busy_gpu_hours)
    for k, v in want.items():
        got = getattr(p, k)
        assert got == (pytest.approx(v) if isinstance(v, float) else v), k
    assert bool(m.buy_condition) == p.fix_jobs_first
    assert set(p.basis) == {"held_gpu_hours", "measured_busy_share", "cost_per_held_gpu_hour_usd",
                            "cost_per_useful_gpu_hour_usd"}


def test_the_verdict_says_what_to_fix_or_that_it_is_unmeasured():
    [p] = measure(*CASES[1][1:3])[1].pools
    assert p.verdict.endswith("held 4.0x the hours the GPUs were busy: fix the jobs before buying "
                              "more GPUs")
    assert "busy 25% of the 240.0 GPU-hours jobs held them (measured over 100% of them)" in p.verdict
    assert "each useful GPU-hour costs 4.25 USD, each held one 1.06 USD" in p.verdict
    loader, precision, batch = p.advice
    assert "1 of the 1 measured jobs wait on data" in loader and "pin_memory: true" in loader
    assert precision == "1 ran in fp32: precision: auto (bf16 where the GPU has it)"
    assert batch == "a larger batch per GPU: a measured job peaked at 38% of its GPU's memory"
    # a busy pool gets no advice; a compute-bound one that is idle gets no loader advice
    assert measure(*CASES[0][1:3])[1].pools[0].advice == ()
    [idle] = measure([job("a", 2, 0, 120)], {"a": tel(30, 120)})[1].pools
    assert idle.fix_jobs_first and not any("loader" in a for a in idle.advice)
    [part] = measure(*CASES[2][1:3])[1].pools
    assert "too little of the held time is measured" in part.verdict and "(measured over 44% of them: 1 job without telemetry)" in part.verdict
    [cpu] = measure(*CASES[3][1:3])[1].pools
    assert cpu.verdict.startswith("unmeasured: no NVML telemetry covers the 240.0 GPU-hours")
    assert "(1 with only CPU telemetry, not GPU use)" in cpu.verdict
    [none] = measure(*CASES[4][1:3])[1].pools
    assert "(2 jobs without telemetry, 1 of them still running)" in none.verdict


def test_the_threshold_and_its_coverage():
    assert FIX_JOBS_BELOW == pytest.approx(2 / 3) and MIN_COVERAGE == 0.5
    # 66% busy is under two thirds; 67% is not
    assert measure([job("a", 2, 0, 120)], {"a": tel(66, 120)})[1].pools[0].fix_jobs_first
    assert not measure([job("a", 2, 0, 120)], {"a": tel(67, 120)})[1].pools[0].fix_jobs_first
    # half the held hours measured is enough: 20% busy over 120 of 240 GPU-hours
    [p] = measure([job("a", 2, 0, 60), job("b", 2, 60, 120)], {"a": tel(20, 60)})[1].pools
    assert p.coverage == pytest.approx(0.5) and p.fix_jobs_first
    # a window that cuts a job: its measured part is scaled like its held part
    [p] = measure([job("a", 2, -120, 120)], {"a": tel(40, 240)})[1].pools
    assert p.held_gpu_hours == pytest.approx(240.0) and p.coverage == pytest.approx(1.0)


def test_other_pools_workstation_lines_of_one_model_and_no_history():
    # The workstation's GPU job measured; its CPU-only job is no GPU use at all.
    jobs = [job("g", 1, 0, 24, target="local", gpu="RTX4090"),
            job("c", 0, 0, 24, target="local", gpu=None)]
    _, m = measure(jobs, {"g": tel(80, 24, workers=1), "c": tel(90, 24, source="psutil", workers=1)},
                   lines=())
    [p] = m.pools
    assert p.pool == "local" and p.jobs == 1 and p.measured_busy_share == pytest.approx(0.8)
    # A workstation without GPUs has no GPU busy share.
    _, m = measure([job("c", 0, 0, 24, target="local", gpu=None)], {}, lines=(), local_gpus=0)
    assert m.pools[0].measured_busy_share is None and "no GPUs here" in m.pools[0].verdict
    # Two lines of one model share its jobs by GPU count: each keeps its own held hours,
    # and the same busy share and coverage.
    from orchestrator.settings import OwnedGpus

    more = OwnedGpus(gpu="A100", count=6, purchase_price=1)
    _, m = measure([job("a", 8, 0, 10)], {"a": tel(40, 10, workers=8)}, lines=(A100S, more))
    assert [p.held_gpu_hours for p in m.pools] == [pytest.approx(20.0), pytest.approx(60.0)]
    assert [p.measured_busy_share for p in m.pools] == [pytest.approx(0.4)] * 2
    # No job history: nothing held, nothing measured, no assumption to print.
    use = owned_use([], [A100S], WORKSTATION, start=T0, end=NOW, basis="w", electricity_price=0.25)
    m = measured_use(use, [], {}, end=NOW)
    assert m.pools[0].coverage is None and m.pools[0].measured_busy_share is None
    assert m.assumptions == () and m.buy_condition == ""


@pytest.mark.parametrize("summary", [None, {}, {"source": "nvml"}, {"source": "nvml", "mean_util": "90",
                                                                    "seconds": 10},
                                     {"source": "nvml", "mean_util": True, "seconds": 10}])
def test_a_missing_or_malformed_summary_is_unmeasured(summary):
    metrics = {} if summary is None else {"telemetry": {"summary": summary}}
    assert RunTelemetry.of(metrics) is None


# -- advise and the CLI ---------------------------------------------------------------


def with_telemetry(util: float, **extra) -> list[dict]:
    """test_advise's history, its on-prem job (2 x RTX4090 for 80 h) measured at `util`%."""
    from tests.unit.decision.test_advise import history

    recs = history()
    for r in recs:
        if r["target"] == "onprem":
            r["metrics"] = tel(util, 80, **extra)
    return recs


def test_advise_makes_buying_conditional_on_fixing_the_jobs():
    a = advise(rows(with_telemetry(25)), settings(), OFFERS, NOW)
    [p] = a.measured_use.pools
    assert p.pool == "onprem RTX4090 x4" and p.fix_jobs_first
    assert p.held_gpu_hours == pytest.approx(160.0) and p.measured_busy_share == pytest.approx(0.25)
    [c] = a.candidates
    assert c.verdict == "buy" and c.condition == (
        "only once the jobs are fixed: onprem RTX4090 x4 was busy 25% of the GPU-hours jobs held "
        "it, and the measured steady work counts held hours, busy or not")
    assert any(s.startswith("fix the jobs before buying: a pool busy under 67%") for s in a.assumptions)
    d = a.to_dict()
    assert d["measured_use"]["pools"][0]["measured_busy_share"] == pytest.approx(0.25)
    assert d["candidates"][0]["condition"] == c.condition
    # given steady work is not what the jobs held: the condition names the pool only
    [c] = advise(rows(with_telemetry(25)), settings(), OFFERS, NOW,
                 what_if=WhatIf(steady_hours=300)).candidates
    assert c.verdict == "buy" and c.condition.endswith("25% of the GPU-hours jobs held it")
    # busy jobs: the buy stands as it is
    a = advise(rows(with_telemetry(95)), settings(), OFFERS, NOW)
    assert not a.measured_use.pools[0].fix_jobs_first and a.candidates[0].condition == ""


def test_cli_json_and_text_carry_held_hours_and_busy_share(orch_home):
    import time

    shift = time.time() - NOW  # the same history, ending now
    recs = []
    for r in with_telemetry(25, **INPUT_BOUND):
        recs.append({**r, **{k: r[k] + shift for k in ("created_at", "started_at", "finished_at")
                             if r[k] is not None}})
    store = store_at(orch_home)
    fill(store, recs)
    store.close()
    (orch_home / "config.toml").write_text(CONFIG)
    env = {"ORCH_CURRENCY": "KRW", "ORCH_CURRENCY_RATE": "1000"}
    d = run_json(orch_home, "advise", "--rent-price", "1.5", timeout=120, **env)
    [p] = d["measured_use"]["pools"]
    assert p["pool"] == "onprem RTX4090 x4"
    assert p["held_gpu_hours"] == pytest.approx(160.0, rel=1e-3)
    assert p["measured_busy_share"] == pytest.approx(0.25)
    assert p["coverage"] == pytest.approx(1.0, rel=1e-3)
    [own] = d["owned_use"]["pools"]
    assert p["cost_per_held_gpu_hour_usd"] == pytest.approx(own["real_per_gpu_hour_usd"])
    assert p["cost_per_useful_gpu_hour_usd"] == pytest.approx(own["real_per_gpu_hour_usd"] * 4)
    assert p["fix_jobs_first"] and p["input_bound_jobs"] == 1 and len(p["advice"]) == 3
    assert d["candidates"][0]["verdict"] == "buy" and d["candidates"][0]["condition"]
    proc = run_orch(orch_home, "advise", "--rent-price", "1.5", timeout=120, **env)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "how busy owned GPUs were while jobs held them" in text
    assert "busy 25% of the 160.0 GPU-hours jobs held them (measured over 100% of them)" in text
    assert "fix the jobs before buying more GPUs" in text and "data.pin_memory: true" in text
    assert "only once the" in text  # the candidate's verdict, wrapped in its cell
    # A history without telemetry: unmeasured, said so, in JSON as null
    recs = [record("steady", "onprem", "RTX4090", 2, 2, end=time.time() - 0.1 * DAY, price_krw=500.0)]
    store = store_at(orch_home)
    fill(store, recs)
    store.close()
    d = run_json(orch_home, "advise", "--rent-price", "1.5", "--days", "0.2", timeout=120, **env)
    [p] = d["measured_use"]["pools"]
    assert p["measured_busy_share"] is None and p["coverage"] == 0.0
    assert p["cost_per_useful_gpu_hour_usd"] is None and p["verdict"].startswith("unmeasured")
