"""`dse bench`: rows per second of the vectorized models, measured in one process.

Timing follows the shared-machine recipe: several repetitions, the median reported, and a
baseline (a plain numpy pass over the same number of rows) measured in the same run, so the
figure can be compared across machines as a ratio.
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd

BENCH_SYSTEMS = ["a100-80gb", "h100-sxm", "h200", "b200", "gb200"]
# A mix of dense, MoE (MLA, sliding-window) and hybrid (Mamba-2, Gated DeltaNet) models.
BENCH_MODELS = ["gpt3-175b", "llama3.1-70b", "llama3.1-8b", "llama2-70b", "nemotron4-15b", "mixtral-8x7b",
                "deepseek-v3", "gpt-oss-120b", "nemotron-h-56b", "qwen3-next-80b-a3b"]


def random_training_points(n: int, seed: int = 0) -> dict:
    """n random design points, most of them valid splits (powers of two that divide the model)."""
    rng = np.random.default_rng(seed)
    tp = 2 ** rng.integers(0, 4, n)
    pp = 2 ** rng.integers(0, 4, n)
    cp = 2 ** rng.integers(0, 2, n)
    dp = 2 ** rng.integers(0, 8, n)
    mb = 2 ** rng.integers(0, 3, n)
    return {
        "model": pd.Categorical.from_codes(rng.integers(0, len(BENCH_MODELS), n), BENCH_MODELS),
        "system": pd.Categorical.from_codes(rng.integers(0, len(BENCH_SYSTEMS), n), BENCH_SYSTEMS),
        "tp": tp, "pp": pp, "cp": cp, "dp": dp, "gpus": tp * pp * cp * dp,
        "micro_batch": mb, "global_batch": dp * mb * 2 ** rng.integers(0, 6, n),
        "vp": np.ones(n, dtype=np.int64),
        "recompute": rng.integers(0, 3, n).astype(np.int8),
        "precision": rng.integers(0, 2, n).astype(np.int8),
        "zero": rng.integers(0, 4, n), "sp": rng.integers(0, 2, n).astype(bool),
    }


def _median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def random_inference_points(n: int, seed: int = 0) -> dict:
    """n random serving points: catalog models and systems, TP/PP splits, batches and lengths."""
    rng = np.random.default_rng(seed)
    tp = 2 ** rng.integers(0, 4, n)
    pp = 2 ** rng.integers(0, 3, n)
    return {
        "model": pd.Categorical.from_codes(rng.integers(0, len(BENCH_MODELS), n), BENCH_MODELS),
        "system": pd.Categorical.from_codes(rng.integers(0, len(BENCH_SYSTEMS), n), BENCH_SYSTEMS),
        "tp": tp, "pp": pp, "gpus": tp * pp,
        "batch": 2 ** rng.integers(0, 10, n), "isl": 2 ** rng.integers(7, 14, n), "osl": 2 ** rng.integers(5, 12, n),
        "precision": rng.integers(0, 2, n).astype(np.int8), "kv_precision": rng.integers(0, 2, n).astype(np.int8),
    }


def as_user_frame(points: dict) -> pd.DataFrame:
    """The path users take: a DataFrame whose name and enumeration columns are plain strings."""
    spell = {"precision": ("bf16", "fp8", "fp4"), "kv_precision": ("bf16", "fp8", "fp4"),
             "recompute": ("none", "selective", "full")}
    cols = {}
    for k, v in points.items():
        if isinstance(v, pd.Categorical):
            cols[k] = np.asarray(v, dtype=object)
        elif k in spell:
            cols[k] = np.asarray(spell[k], dtype=object)[np.asarray(v)]
        else:
            cols[k] = v
    return pd.DataFrame(cols)


def bench_model(name: str, evaluate, points, repeat: int) -> dict:
    """Median time of `evaluate(points)` (after one full warm-up pass) and, measured in the same run,
    one numpy pass over as many rows."""
    rows = len(points)
    evaluate(points)  # warm the catalog caches and the allocator
    elapsed = _median_time(lambda: evaluate(points), repeat)
    x = np.random.default_rng(1).random(rows)
    baseline = _median_time(lambda: np.sqrt(x * 2.0 + 1.0).sum(), max(repeat, 5))
    return {"model": name, "rows": rows, "seconds": elapsed, "rows_per_s": rows / elapsed,
            "numpy_baseline_s": baseline, "cost_vs_one_numpy_pass": elapsed / baseline}


def bench_training(rows: int = 1_000_000, repeat: int = 3) -> dict:
    from dse.evaluate import evaluate_training
    return bench_model("evaluate_training", evaluate_training, as_user_frame(random_training_points(rows)), repeat)


def bench_inference(rows: int = 1_000_000, repeat: int = 3) -> dict:
    from dse.evaluate import evaluate_inference
    return bench_model("evaluate_inference", evaluate_inference, as_user_frame(random_inference_points(rows)), repeat)


BENCHES = {"training": bench_training, "inference": bench_inference}
