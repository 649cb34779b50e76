"""Serving kernels as engines run them, checked against the measured kernel tables
(../shared/data/kernels): per-tensor FP8 GEMMs with static activation scales, NVFP4 GEMMs at an
autotuned schedule, MXFP4 MoE layers in TensorRT-LLM's TRTLLM-Gen token tiles and its NVFP4 MoE
layers of few tokens on its min-latency kernels."""
import glob
import os

import numpy as np
import pandas as pd
import pytest

from dse import resolve
from dse.catalog.precision import CODE
from dse.perf import layer, roofline
from dse.perf.layer import Op, Shape
from dse.perf.forms.gemm import FORMATS
from dse.perf.roofline import GemmParams, Rates
from dse.workload import Model


def hardware(system: str) -> dict:
    cols = {"system": np.array([system], dtype=object)}
    resolve.system(cols)
    return {k: v if k == "system" else np.asarray(v) for k, v in cols.items()}


def table(kernels_dir, gpu, family, name) -> pd.DataFrame:
    files = glob.glob(os.path.join(kernels_dir, gpu, family, "trtllm", "*", name))
    assert files, (gpu, family, name)
    return pd.concat([pd.read_parquet(f) for f in files])


def burst(r: Rates) -> Rates:
    """The rates at the clock the kernel benchmarks ran at (a long run holds a lower, sustained one)."""
    r.clock = 1.0
    return r


def gemm_s(r: Rates, m, n, k, operand_bytes=1.0) -> float:
    """A serving GEMM in the rates' format (FP8 unless told) as dse prices it."""
    op = Op("g", "gemm", "gemm", float(m), float(n), float(k), operand_bytes=operand_bytes, low_precision=True)
    return float(roofline.op_time_s(op, r)[0])


@pytest.mark.parametrize("system,gpu", [("h200", "h200_sxm"), ("b200", "b200_sxm")])
def test_static_scale_fp8_gemm_is_the_measured_gemm_less_its_amax_kernel(system, gpu, kernels_dir):
    """The tables time per-tensor FP8 Linear layers without an input scale, so every call also runs
    the amax reduction of dynamic scaling (aiconfigurator's collector says so and derives the
    static-scale GEMM by subtracting the measured compute-scale kernel). dse's serving GEMM must
    match that difference on small-batch decode shapes, and a training GEMM keeps the kernel."""
    hw = hardware(system)
    serving = burst(Rates.of(hw, np.array([CODE["fp8"]])))
    training = burst(Rates.of(hw, np.array([CODE["fp8"]]), training=True))
    gemms = table(kernels_dir, gpu, "gemm", "gemm_perf.parquet")
    scale = table(kernels_dir, gpu, "quantize", "computescale_perf.parquet")
    gemms = gemms[(gemms["gemm_dtype"] == "fp8") & gemms["m"].isin([1, 4, 16]) & gemms["n"].isin([1024, 4096, 8192])
                  & gemms["k"].isin([1024, 4096, 8192])]
    errors = []
    for (m, n, k), rows in gemms.groupby(["m", "n", "k"]):
        amax = scale[(scale["m"] == m) & (scale["k"] == k)]["latency"].median()
        static_s = (rows["latency"].median() - amax) * 1e-3
        errors.append(gemm_s(serving, m, n, k) / static_s - 1.0)
        assert gemm_s(training, m, n, k) > gemm_s(serving, m, n, k)
    assert len(errors) >= 20
    assert np.median(np.abs(errors)) < 0.15


@pytest.mark.parametrize("system,gpu", [("b200", "b200_sxm"), ("gb300", "gb300")])
def test_serving_nvfp4_gemm_takes_a_tuned_schedule_not_the_tables_fallback_tactic(system, gpu, kernels_dir):
    """The GEMM collector times `trtllm::nvfp4_gemm` outside an autotune() pass, so at its default
    tactic: on decode shapes the measured NVFP4 GEMM is slower than BF16's at 3.6x fewer bytes. The
    table fit reproduces that; a serving engine, which tunes its tactics, must price a decode GEMM
    well below it (and below BF16 once the weight is 4096 x 8192), above its weight stream at full
    HBM bandwidth, and large GEMMs at the tables' schedule with cuBLASLt's throughput per tile."""
    hw = hardware(system)
    nvfp4, bf16 = np.array([CODE["nvfp4"]]), np.array([CODE["bf16"]])
    serving, serving_bf16 = burst(Rates.of(hw, nvfp4)), burst(Rates.of(hw, bf16))
    fallback = burst(Rates.of(hw, nvfp4))
    fallback.gemm = GemmParams.of(hw, nvfp4)   # the tables' schedule
    nv_bytes = FORMATS["nvfp4"][0]
    t = table(kernels_dir, gpu, "gemm", "gemm_perf.parquet")
    measured = t.groupby(["gemm_dtype", "m", "n", "k"])["latency"].median() * 1e-3
    k, shapes = 8192, [(m, n) for m in (1, 4, 16) for n in (1024, 4096)]
    for m, n in shapes:
        assert measured["nvfp4", m, n, k] > measured["bfloat16", m, n, k]
        tuned, table_fit = gemm_s(serving, m, n, k, nv_bytes), gemm_s(fallback, m, n, k, nv_bytes)
        assert table_fit == pytest.approx(measured["nvfp4", m, n, k], rel=0.2)
        assert n * k * nv_bytes / float(hw["memory_bandwidth_bytes_per_s"][0]) < tuned < 0.75 * table_fit
        if n >= 4096:   # where the weight stream, not the extra quantize kernel's floor, dominates
            assert tuned < gemm_s(serving_bf16, m, n, k, 2.0)
    # large GEMMs: the table fit matches the measured fallback; the tuned engine runs them at least at
    # cuBLASLt's speed, Transformer Engine's B300 profile against the tables (nvfp4_tuned_gemm_speedup)
    speedup = float(hw["nvfp4_tuned_gemm_speedup"][0])
    assert speedup > 1.1
    for m in (4096, 8192):
        big, table_fit = gemm_s(serving, m, 8192, k, nv_bytes), gemm_s(fallback, m, 8192, k, nv_bytes)
        assert table_fit == pytest.approx(measured["nvfp4", m, 8192, k], rel=0.15)
        assert big == pytest.approx(table_fit / speedup, rel=0.05)


def moe_model(hidden, inter, experts, top_k) -> Model:
    cols = {k: np.array([float(v)]) for k, v in dict(layers=1, hidden=hidden, heads=32, vocab=32000, experts=experts,
                                                      top_k=top_k, moe_ffn_hidden=inter, gated_mlp=1).items()}
    resolve.model(cols)
    return Model({k: np.asarray(v, dtype=float) for k, v in cols.items()})


@pytest.mark.parametrize("system,gpu", [("b200", "b200_sxm"), ("gb200", "gb200")])
def test_mxfp4_moe_layers_run_in_token_tiles_as_measured(system, gpu, kernels_dir):
    """Serving's MXFP4 experts (GPT-OSS) take the part's own W4A8 MXFP4 MoE fit, with the token
    tiles it was fitted with: within 20% at the median of TensorRT-LLM's measured layers under
    balanced routing, decode to prefill sizes, and within 15% on decode batches, where the NVFP4 fit
    it used to borrow (no tiles, its own floors) is more than 40% too slow."""
    hw = hardware(system)
    own, borrowed = (burst(Rates.of(hw, np.array([CODE[f]]))) for f in ("mxfp4", "nvfp4"))
    t = table(kernels_dir, gpu, "moe", "moe_perf.parquet")
    t = t[(t["moe_dtype"] == "w4a8_mxfp4_mxfp8") & (t["distribution"] == "balanced") & (t["moe_tp_size"] == 1)]
    errors, decode = [], []
    for (h, inter, e, k, ep), rows in t.groupby(["hidden_size", "inter_size", "num_experts", "topk", "moe_ep_size"]):
        m = moe_model(h, inter, e, k)
        for tokens, latency_ms in rows.groupby("num_tokens")["latency"].median().items():
            # the table's num_tokens enter every EP GPU (attention data parallel): tokens / ep per rank
            ops = layer.moe_ops(m, Shape(seqs=tokens / ep, q_len=1.0, ctx=1.0, tp=1.0, ep=float(ep)), 2.0, 1.0, 1.0,
                                spread=True, expert_operand=0.53125)
            op = next(o for o in ops if o.name == "experts")
            op.moe["local_tokens"] = float(tokens)   # and each GPU routes, reads and writes all of them
            errors.append(float(roofline.op_time_s(op, own)[0]) / (latency_ms * 1e-3) - 1.0)
            if tokens <= 16:   # decode batches: the tile floor, where the borrowed fit's untiled GEMMs are slow
                decode.append((errors[-1], float(roofline.op_time_s(op, borrowed)[0]) / (latency_ms * 1e-3) - 1.0))
    assert len(errors) >= 100 and len(decode) >= 20
    assert np.median(np.abs(errors)) < 0.20
    own_decode, borrowed_decode = np.abs(np.array(decode)).T
    assert np.median(own_decode) < 0.15 and np.median(borrowed_decode) > 0.4


@pytest.mark.parametrize("system,gpu", [("b200", "b200_sxm"), ("gb200", "gb200")])
def test_tensorrt_llm_small_nvfp4_moe_layers_run_its_min_latency_kernels_as_measured(system, gpu, kernels_dir):
    """With the engine setting (tensorrt-llm preset), an NVFP4 DeepSeek-V3 MoE layer of at most 128
    tokens takes the fit of TensorRT-LLM's min-latency (TRTLLM-Gen) kernels: within 20% at the median
    of those measured kernels under balanced routing, where the CUTLASS fit is more than 50% too slow;
    without the setting, and above 128 tokens, it is the CUTLASS kernel's, within 15% of it."""
    hw = hardware(system)
    nvfp4 = np.array([CODE["nvfp4"]])
    engine, cutlass = burst(Rates.of(hw, nvfp4, moe_min_latency=np.array([True]))), burst(Rates.of(hw, nvfp4))
    t = table(kernels_dir, gpu, "moe", "moe_perf.parquet")
    t = t[(t["moe_dtype"] == "nvfp4") & (t["distribution"] == "balanced") & (t["hidden_size"] == 7168)
          & (t["inter_size"] == 2048) & (t["num_experts"] == 256) & (t["topk"] == 8) & (t["num_tokens"] <= 512)]
    m, errors = moe_model(7168, 2048, 256, 8), {}
    for (kernel, tp, ep), rows in t.groupby(["kernel_source", "moe_tp_size", "moe_ep_size"]):
        for tokens, latency_ms in rows.groupby("num_tokens")["latency"].median().items():
            ops = layer.moe_ops(m, Shape(seqs=tokens / ep, q_len=1.0, ctx=1.0, tp=float(tp), ep=float(ep)), 2.0, 1.0,
                                1.0, spread=True, expert_operand=0.5625)
            op = next(o for o in ops if o.name == "experts")
            op.moe["local_tokens"] = float(tokens)
            on, off = (float(roofline.op_time_s(op, r)[0]) for r in (engine, cutlass))
            if tokens > 128:
                assert on == off
            errors.setdefault((kernel, tokens <= 128), []).append((on / (latency_ms * 1e-3) - 1, off / (latency_ms * 1e-3) - 1))
    small = np.abs(np.array(errors["moe_torch_flow_min_latency", True]))
    assert len(small) >= 50 and np.median(small[:, 0]) < 0.2 and np.median(small[:, 1]) > 0.5
    default = np.abs(np.concatenate([errors["moe_torch_flow_cutlass", True], errors["moe_torch_flow_cutlass", False]]))
    assert np.median(default[:, 1]) < 0.15


def test_vllm_on_trtllm_kernels_runs_small_nvfp4_moe_layers_on_the_trtllm_gen_fit_and_sglang_on_cutlass():
    """vLLM's NVFP4 MoE oracle tries FlashInfer's TRT-LLM (TRTLLM-Gen) kernels first on Blackwell, so
    the vllm preset on TensorRT-LLM's kernel fits (moe_kernels trtllm) takes their min-latency fit for
    layers of at most 128 tokens; SGLang keeps the CUTLASS fit. On a part without that fit (B300) the
    setting changes nothing. (The preset itself runs vLLM's own kernels: test_vllm_moe_kernels.py.)"""
    import pandas as pd
    import dse
    from dse import catalog
    presets = catalog.frameworks()
    assert int(presets.loc["vllm", "moe_min_latency"]) == 1 and not presets.loc["sglang", "moe_min_latency"] == 1
    row = dict(model="minimax-m2.5", gpus=4, tp=4, isl=1024, osl=1024, concurrency=16, precision="bf16",
               expert_precision="nvfp4", framework="vllm", moe_kernels="trtllm")
    out = dse.evaluate_serving(pd.DataFrame([dict(row, system=s, moe_min_latency=on)
                                             for s in ("b200", "b300") for on in (True, False)]))["tpot_s"].to_numpy()
    assert out[0] < 0.9 * out[1] and out[2] == pytest.approx(out[3], rel=1e-9)


@pytest.mark.parametrize("system,gpu", [("h200", "h200_sxm"), ("b200", "b200_sxm")])
def test_decode_all_reduce_is_the_engines_custom_kernel_as_measured(system, gpu, kernels_dir):
    """A serving engine's tensor-parallel all-reduce of a decode batch's activations inside the
    NVLink domain is TensorRT-LLM's custom kernel (AUTO strategy): within 15% of its measured
    latency from 8 to 1024 tokens of hidden 8192 on 2-8 GPUs, and faster than NCCL's there; a 2023
    preset keeps NCCL's."""
    from dse.perf.collectives import Network
    hw = hardware(system)
    engine, nccl = Network(hw, custom_all_reduce=np.array([True])), Network(hw)
    t = table(kernels_dir, gpu, "comm", "custom_allreduce_perf.parquet")
    t = t[(t["allreduce_dtype"] == "bfloat16") & t["message_size"].isin([8192 * b for b in (8, 64, 1024)])]
    errors = []
    for (n, elements), rows in t.groupby(["num_gpus", "message_size"]):
        message = np.array([2.0 * elements])   # the table counts bf16 elements
        group = np.array([float(n)])
        custom_s = float(engine.all_reduce_s(group, group, message)[0])
        errors.append(custom_s / (rows["latency"].median() * 1e-3) - 1.0)
        assert custom_s <= float(nccl.all_reduce_s(group, group, message)[0])
    assert len(errors) >= 6 and np.median(np.abs(errors)) < 0.15
    eight, message = np.array([8.0]), np.array([131072.0])
    assert Network(hw, custom_all_reduce=np.array([False])).all_reduce_s(eight, eight, message)[0] == \
        nccl.all_reduce_s(eight, eight, message)[0]
