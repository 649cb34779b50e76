"""Random rows, many of them invalid, through the evaluators: no row with an input outside its
declared domain is feasible, and no feasible row has a non-finite or negative output."""
from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse import schema

MODELS = ["gpt3-175b", "llama3.1-70b", "llama3.1-8b", "mixtral-8x7b", "deepseek-v3", "gpt-22b"]
SYSTEMS = ["a100-80gb", "h100-sxm", "b200", "gb200", "mi300x", "l40s"]
ROWS = 50_000  # per evaluator and example; two examples each: 100,000 rows


def _numbers(rng, n, good, bad_share=0.05):
    """Mostly plausible values, a share replaced by hostile ones (0, negative, fractional, huge, NaN, inf)."""
    v = np.asarray(good, dtype=float)
    hostile = rng.choice(np.array([0.0, -1.0, -4096.0, 0.5, 3.7, 2.0**62, np.nan, np.inf, -np.inf]), n)
    return np.where(rng.random(n) < bad_share, hostile, v)


def _training_rows(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = ROWS
    p2 = lambda lo, hi: 2.0 ** rng.integers(lo, hi, n)  # noqa: E731
    tp, pp, cp, ep = p2(0, 5), p2(0, 4), p2(0, 2), p2(0, 3)
    dp = p2(0, 8)
    return pd.DataFrame({
        "model": rng.choice(MODELS, n), "system": rng.choice(SYSTEMS, n),
        "tp": _numbers(rng, n, tp), "pp": _numbers(rng, n, pp), "cp": _numbers(rng, n, cp),
        "ep": _numbers(rng, n, ep), "gpus": _numbers(rng, n, tp * pp * cp * dp),
        "micro_batch": _numbers(rng, n, p2(0, 3)), "global_batch": _numbers(rng, n, dp * p2(0, 6)),
        "zero": _numbers(rng, n, rng.integers(0, 4, n)), "seq_len": _numbers(rng, n, p2(10, 15)),
        "recompute": rng.choice(["none", "selective", "full"], n), "precision": rng.choice(["bf16", "fp8"], n),
        "offload_layers": _numbers(rng, n, np.where(rng.random(n) < 0.2, rng.integers(1, 100, n), 0)),
        "train_tokens": 1e12,
    })


def _inference_rows(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = ROWS
    p2 = lambda lo, hi: 2.0 ** rng.integers(lo, hi, n)  # noqa: E731
    tp, pp = p2(0, 4), p2(0, 3)
    return pd.DataFrame({
        "model": rng.choice(MODELS, n), "system": rng.choice(SYSTEMS, n),
        "tp": _numbers(rng, n, tp), "pp": _numbers(rng, n, pp), "gpus": _numbers(rng, n, tp * pp),
        "batch": _numbers(rng, n, p2(0, 9)), "isl": _numbers(rng, n, p2(6, 14)), "osl": _numbers(rng, n, p2(4, 12)),
        "precision": rng.choice(["bf16", "fp8"], n), "kv_precision": rng.choice(["bf16", "fp8"], n),
    })


def _check(frame: pd.DataFrame, out: pd.DataFrame, evaluator: str, outputs: list) -> None:
    invalid = np.zeros(len(frame), dtype=bool)
    for _, bad in schema.domain_violations({c: frame[c].to_numpy() for c in frame.columns}, evaluator):
        invalid |= bad
    fits = out["fits"].to_numpy()
    assert invalid.any() and fits.any()
    assert not (fits & invalid).any(), "a row with an out-of-domain input came out feasible"
    assert (out["infeasible_code"].to_numpy()[invalid] != 0).all()
    for col in outputs:
        v = out[col].to_numpy(dtype=float)[fits]
        assert np.isfinite(v).all() and (v >= 0).all(), col


@settings(max_examples=2, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1))
def test_fuzzed_training_rows(seed):
    frame = _training_rows(seed)
    out = dse.evaluate_training(frame)
    _check(frame, out, "training", ["step_time_s", "tokens_per_s", "mfu", "mem_per_gpu_bytes", "compute_s",
                                    "dp_comm_s", "cost_per_run_usd", "cost_per_million_tokens_usd"])


@settings(max_examples=2, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1))
def test_fuzzed_inference_rows(seed):
    frame = _inference_rows(seed)
    out = dse.evaluate_inference(frame)
    _check(frame, out, "inference", ["ttft_s", "tpot_s", "e2e_latency_s", "output_tokens_per_s", "kv_cache_bytes",
                                     "mem_per_gpu_bytes", "cost_per_million_tokens_usd"])


def _hardware_rows(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = ROWS
    return pd.DataFrame({
        "node": rng.choice(["n7", "n5", "n3", "n2", "a16", "a14", "a10"], n),
        "die_area_mm2": _numbers(rng, n, rng.uniform(100, 900, n)),
        "compute_dies": _numbers(rng, n, 2.0 ** rng.integers(0, 4, n)),
        "memory": rng.choice(["hbm3", "hbm3e", "hbm4", "gddr7"], n),
        "memory_stacks": _numbers(rng, n, rng.integers(0, 13, n)),
        "package": rng.choice(["organic", "si-interposer", "cowos-l", "hybrid-bond"], n),
        "power_w": _numbers(rng, n, rng.uniform(200, 2000, n)),
        "defect_density_per_cm2": _numbers(rng, n, rng.uniform(0.05, 0.3, n)),
        "gross_margin": _numbers(rng, n, rng.uniform(0, 0.9, n)),
    })


@settings(max_examples=2, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1))
def test_fuzzed_hardware_rows(seed):
    frame = _hardware_rows(seed)
    out = dse.evaluate_hardware(frame)
    invalid = np.zeros(len(frame), dtype=bool)
    for _, bad in schema.domain_violations({c: frame[c].to_numpy() for c in frame.columns}, "hardware"):
        invalid |= bad
    fits = out["hw_fits"].to_numpy()
    assert invalid.any() and fits.any() and not (fits & invalid).any()
    for col in ("peak_bf16_flops_per_s", "memory_bandwidth_bytes_per_s", "tdp_w", "accelerator_cost_usd",
                "die_yield", "dies_per_wafer"):
        v = out[col].to_numpy(dtype=float)[fits]
        assert np.isfinite(v).all() and (v > 0).all(), col
