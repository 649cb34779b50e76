"""Serving and inference prefill attention in the fitted prefill form (dse.perf.roofline): the
per-tile cost short prompts feel and the FP8-KV-cache context FMHA, checked against the measured
TensorRT-LLM context-attention tables (../shared/data/kernels), not against dse's own output."""
import glob
import os

import numpy as np
import pandas as pd
import pytest

from dse.optable import op_table

# catalog system -> kernel-table directory; each has both a 16-bit and an FP8-cache fit
GPUS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "gb200": "gb200", "b300": "b300_sxm"}


def attention_s(system, isl, kv_precision, batch=1):
    """dse's prefill attention seconds per layer of Llama-3.1-8B (32 query heads, 8 KV heads, head
    size 128: a shape the tables measure) on one GPU, `batch` prompts of `isl` tokens."""
    t = op_table("llama3.1-8b", [system], phases=("prefill",), isl=isl, batch=batch, kv_precision=kv_precision)
    return float(t.loc[t["op"] == "attention", "time_s"].iloc[0])


def measured_s(kernels_dir, gpu, isl, kv_dtype):
    """Measured latency (s) of that shape's context attention over a `kv_dtype` cache per batch
    size (median over the attention dtypes an FP8 cache runs with, as the fit pools them)."""
    files = glob.glob(os.path.join(kernels_dir, gpu, "attention", "trtllm", "*", "context_attention_perf.parquet"))
    t = pd.concat([pd.read_parquet(f) for f in files])
    t = t[(t["head_dim"] == 128) & (t["window_size"] == 0) & (t["num_heads"] == 32) & (t["num_key_value_heads"] == 8)
          & (t["isl"] == isl) & (t["kv_cache_dtype"] == kv_dtype)]
    if kv_dtype == "bfloat16":
        t = t[t["attn_dtype"] == "bfloat16"]
    assert len(t), (gpu, isl, kv_dtype)
    return t.groupby("batch_size")["latency"].median() * 1e-3


@pytest.mark.parametrize("system", sorted(GPUS))
def test_fp8_cache_speeds_long_prefill_as_measured(system, kernels_dir):
    """Over an FP8 KV cache the context FMHA runs FP8 MMAs: 16K-token prompts' attention is
    1.2-1.5x faster than over a BF16 cache in the tables (median over their batch sizes); dse's
    ratio is within 12% of theirs."""
    gpu = GPUS[system]
    measured = (measured_s(kernels_dir, gpu, 16384, "bfloat16") / measured_s(kernels_dir, gpu, 16384, "fp8")).median()
    modelled = attention_s(system, 16384, "bf16") / attention_s(system, 16384, "fp8")
    assert measured > 1.15
    assert modelled == pytest.approx(measured, rel=0.12)


@pytest.mark.parametrize("system", sorted(GPUS))
@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_short_prompts_reach_less_of_the_peak_as_measured(system, kv, kernels_dir):
    """Per-tile fixed costs: the attention FLOPs of 16 prompts of 2K tokens run at 60-80% of the
    speed of one 16K prompt's in the tables (16 x 2K^2 is a quarter of 16K^2's causal FLOPs; the
    16K speed the median over its batch sizes); dse's time ratio is within 15% of theirs."""
    gpu, dtype = GPUS[system], {"bf16": "bfloat16", "fp8": "fp8"}[kv]
    per_flop = lambda short, long: (short * 4.0) / long   # noqa: E731
    long_s = measured_s(kernels_dir, gpu, 16384, dtype)
    measured = per_flop(measured_s(kernels_dir, gpu, 2048, dtype)[16], (long_s / long_s.index).median())
    modelled = per_flop(attention_s(system, 2048, kv, batch=16), attention_s(system, 16384, kv))
    assert measured > 1.1
    assert modelled == pytest.approx(measured, rel=0.15)


def test_training_attention_keeps_its_own_fit():
    """The prefill form is for serving and inference passes: a training micro-batch's attention
    does not change with the KV-cache format (it has none)."""
    a = op_table("llama3.1-8b", ["h200"], phases=("train",), kv_precision="bf16")
    b = op_table("llama3.1-8b", ["h200"], phases=("train",), kv_precision="fp8")
    pick = lambda t: float(t.loc[t["op"] == "attention", "time_s"].iloc[0])  # noqa: E731
    assert pick(a) == pick(b)


def test_mla_prefill_keeps_the_pooled_efficiency():
    """MLA prompts (DeepSeek) keep the pooled efficiency: their kernels have their own fits."""
    a = op_table("deepseek-v3", ["h200"], phases=("prefill",), isl=8192, tp=8, kv_precision="bf16")
    b = op_table("deepseek-v3", ["h200"], phases=("prefill",), isl=8192, tp=8, kv_precision="fp8")
    pick = lambda t: float(t.loc[t["op"] == "attention", "time_s"].iloc[0])  # noqa: E731
    assert np.isclose(pick(a), pick(b), rtol=0.02)
