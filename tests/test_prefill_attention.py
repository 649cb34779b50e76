"""Serving and inference prefill attention in the fitted prefill form (dse.perf.roofline): the
per-tile cost short prompts feel and the FP8-KV-cache context FMHA, checked against the measured
TensorRT-LLM context-attention tables (../shared/data/kernels), not against dse's own output."""
import glob
import os

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def decode_measured_s(kernels_dir, gpu, kv_len, kv_dtype, heads, kv_heads):
    """Measured generation-attention latency (s) per batch size at a KV length of `kv_len` tokens."""
    files = glob.glob(os.path.join(kernels_dir, gpu, "attention", "trtllm", "*", "generation_attention_perf.parquet"))
    t = pd.concat([pd.read_parquet(f) for f in files])
    t = t[(t["head_dim"] == 128) & (t["window_size"] == 0) & (t["num_heads"] == heads)
          & (t["num_key_value_heads"] == kv_heads) & (t["kv_cache_dtype"] == kv_dtype)
          & (t["isl"] + t["step"] == kv_len)]
    return t.groupby("batch_size")["latency"].median() * 1e-3


@pytest.mark.parametrize("system", ["h200", "b200"])
@pytest.mark.parametrize("kv", ["bf16", "fp8"])
def test_decode_attention_follows_the_measured_kernels(system, kv, kernels_dir):
    """Serving decode attention takes the fitted decode kernel form: on Llama-3.1-8B's heads (32
    query, 8 KV) and Llama-3.1-70B's at TP 8 (8 query, 1 KV) over 1K-16K cached tokens and 1-256
    sequences, dse is within 20% of the measured kernels at the median (the bare KV-stream roofline
    it replaces missed the kernels' floors and waves: 2.6 us for a 13 us kernel at batch 16)."""
    errors = []
    for model, tp, heads, kv_heads in (("llama3.1-8b", 1, 32, 8), ("llama3.1-70b", 8, 8, 1)):
        for kv_len in (1024, 4096, 16384):
            measured = decode_measured_s(kernels_dir, GPUS[system], kv_len, {"bf16": "bfloat16", "fp8": "fp8"}[kv],
                                         heads, kv_heads)
            for batch in [b for b in (1, 16, 64, 256) if b in measured.index]:
                t = op_table(model, [system], phases=("decode",), batch=batch, isl=kv_len - 1, osl=2, tp=tp,
                             kv_precision=kv)
                modelled = float(t.loc[t["op"] == "attention", "time_s"].iloc[0])
                errors.append(abs(modelled / measured[batch] - 1.0))
    assert len(errors) >= 12
    assert np.median(errors) < 0.2


def test_a_2023_engine_keeps_the_kv_stream_roofline():
    """tensorrt-llm-0.6's decode kernel (masked MHA, a KV read per query head) is not the kernel the
    tables measure: its decode attention stays the KV stream at the decode memory efficiency, the
    basis its preset's overheads were calibrated on; the modern preset adds the kernel's floor."""
    old = op_table("llama2-7b", ["a100-80gb"], phases=("decode",), batch=1, isl=512, osl=2,
                   framework="tensorrt-llm-0.6")
    new = op_table("llama2-7b", ["a100-80gb"], phases=("decode",), batch=1, isl=512, osl=2, framework="tensorrt-llm")
    pick = lambda t: t.loc[t["op"] == "attention"].iloc[0]  # noqa: E731
    o, n = pick(old), pick(new)
    decode_memory_efficiency = 0.85   # dse/catalog/efficiency_projection.csv, ampere
    assert o["time_s"] == pytest.approx(o["bytes"] / (o["memory_bandwidth_bytes_per_s"] * decode_memory_efficiency),
                                        rel=1e-3)
    assert n["time_s"] > 2.0 * o["time_s"]   # a 5 us stream inside a kernel of about 20 us


@settings(max_examples=25, deadline=None, derandomize=True)
@given(model=st.sampled_from(["llama3.1-8b", "llama3.1-70b", "qwen3-8b", "gpt-oss-20b"]),
       system=st.sampled_from(["a100-80gb", "h100-sxm", "h200", "b200", "gb300", "mi300x"]),
       kv=st.sampled_from(["bf16", "fp8"]), tp=st.sampled_from([1, 2, 8]),
       batch=st.integers(1, 256), isl=st.integers(16, 32768), longer=st.floats(1.05, 4.0))
def test_attention_kernel_time_grows_with_the_work(model, system, kv, tp, batch, isl, longer):
    """Whatever the part, format and shape, a longer prompt's prefill attention and a longer cache's
    (or a larger batch's) decode attention never take less time, but for the split-KV dispatch:
    more keys can buy a sequence more CTAs (TensorRT-LLM's multi-block heuristic), which may save
    a step of the latency chain (at most 3% here)."""
    def attention(phase, b, n):
        t = op_table(model, [system], phases=(phase,), batch=b, isl=n, osl=2, tp=tp, kv_precision=kv)
        return float(t.loc[t["op"] == "attention", "time_s"].iloc[0])
    n = int(isl * longer)
    assert attention("prefill", batch, n) >= attention("prefill", batch, isl)
    assert attention("decode", batch, n) >= 0.97 * attention("decode", batch, isl)
    assert attention("decode", batch + 8, isl) >= 0.97 * attention("decode", batch, isl)


def test_a_pass_without_the_phases_tokens_runs_no_attention_kernel():
    """The kernel forms' fixed costs (a floor per call) belong to passes that run the kernel: a
    decode-only pass (a disaggregated decode pool) has no prefill attention, a prefill-only pass
    no decode attention, so their time is zero, not a floor."""
    from dse import resolve
    from dse.catalog.precision import CODE
    from dse.perf import layer as L
    from dse.perf.roofline import Rates, op_time_s
    cols = {"system": np.array(["h200"], dtype=object)}
    resolve.system(cols)
    hw = {k: v if k == "system" else np.asarray(v) for k, v in cols.items()}
    r = Rates.of(hw, np.array([CODE["fp8"]]))
    no_prompt = L.Op("attention", "attention", "fused", 0.0, 2048.0, 128, flops=np.zeros(1), bytes=np.zeros(1),
                     head_dims=256.0, prefill_kv=np.array([2]))
    no_sequence = L.Op("attention", "attention", "fused", 8.0, 2048.0, 128, flops=np.zeros(1), bytes=np.zeros(1),
                       head_dims=256.0, decode_kv=np.array([1]),
                       decode={"batch": np.zeros(1), "kv_len": np.full(1, 2048.0), "heads": 8.0, "kv_heads": 1.0,
                               "qk_dim": 128.0, "v_dim": 128.0, "kv_head_bytes_per_token": 256.0,
                               "shared": np.array([True])})
    assert float(op_time_s(no_prompt, r)[0]) == 0.0
    assert float(op_time_s(no_sequence, r)[0]) == 0.0
    with_prompt = L.Op("attention", "attention", "fused", 512.0, 512.0, 128, flops=np.full(1, 1e9),
                       bytes=np.full(1, 1e6), head_dims=256.0, prefill_kv=np.array([2]))
    assert float(op_time_s(with_prompt, r)[0]) > float(hw["attention_fp8_floor_s"][0])


def test_a_prompt_chunk_in_a_share_of_iterations_pays_that_share_of_the_launch():
    """TensorRT-LLM launches the context FMHA only in iterations that carry a prompt chunk: a
    steady state with a quarter of a prompt per iteration costs a quarter of one prompt's
    attention, floor included."""
    from dse import resolve
    from dse.catalog.precision import CODE
    from dse.perf import layer as L
    from dse.perf.roofline import Rates, op_time_s
    cols = {"system": np.array(["b200"], dtype=object)}
    resolve.system(cols)
    hw = {k: v if k == "system" else np.asarray(v) for k, v in cols.items()}
    r = Rates.of(hw, np.array([CODE["bf16"]]))

    def prompt(share):
        return L.Op("attention", "attention", "fused", 1024.0, 1024.0, 128, flops=np.full(1, 3e10 * share),
                    bytes=np.full(1, 4e7 * share), head_dims=256.0, prefill_kv=np.array([1]), calls=share)
    assert float(op_time_s(prompt(0.25), r)[0]) == pytest.approx(0.25 * float(op_time_s(prompt(1.0), r)[0]), rel=1e-6)
