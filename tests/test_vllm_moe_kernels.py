"""The `moe_kernels` engine setting: serving and inference MoE layers at vLLM's own kernel fits
(dse.calibrate.moe_vllm) where the part has them, TensorRT-LLM's fits elsewhere and when off."""
import glob
import os

import numpy as np
import pandas as pd
import pytest

import dse
from dse import catalog
from dse.calibrate import moe_vllm
from dse.catalog.precision import CODE
from dse.perf import layer, roofline
from dse.perf.layer import Shape
from dse.perf.roofline import VLLM_KERNELS, Rates

from test_serving_kernels import burst, hardware, moe_model

SERVING = dict(model="minimax-m2.5", gpus=4, tp=4, isl=1024, osl=1024, concurrency=16, precision="bf16",
               framework="vllm")


def test_vllm_and_sglang_presets_run_vllms_kernels_and_the_others_tensorrt_llms():
    """SGLang's automatic MoE runner picks the kernels vLLM's oracle does (FlashInfer TRTLLM-Gen on
    Blackwell, the Triton fused MoE on Hopper): both presets take the moe_vllm fit."""
    presets = catalog.frameworks()
    assert presets.loc["vllm", "moe_kernels"] == "vllm"
    assert presets.loc["sglang", "moe_kernels"] == "vllm"
    assert presets.loc["default", "moe_kernels"] == "trtllm"
    for other in ("tensorrt-llm", "trtllm-bench"):   # blank: the default's
        assert not isinstance(presets.loc[other, "moe_kernels"], str) or not presets.loc[other, "moe_kernels"].strip()


def _vllm_table(kernels_dir, gpu):
    files = glob.glob(os.path.join(kernels_dir, gpu, "moe", "vllm", "*", "moe_perf.parquet"))
    assert files, gpu
    t = pd.concat([pd.read_parquet(f) for f in files])
    t = t[t["distribution"] == "balanced"]
    return t[moe_vllm.default_rows(t)]


def _fit_p90(system, precision):
    fits = catalog.kernel_fits()
    mine = fits[(fits["system"] == system) & (fits["family"] == "moe_vllm") & (fits["precision"] == precision)]
    return float(mine["p90_abs_error_pct"].iloc[0]) / 100.0


@pytest.mark.parametrize("system,gpu,dtype,precision", [("b200", "b200_sxm", "nvfp4", "nvfp4"),
                                                         ("b300", "b300_sxm", "nvfp4", "nvfp4"),
                                                         ("h200", "h200_sxm", "fp8_block", "fp8-block")])
def test_vllm_moe_layer_matches_vllms_measured_kernels_on_decode_batches(system, gpu, dtype, precision, kernels_dir):
    """MiniMax-M2.5's expert shape (hidden 3072, inter 1536, 256 experts, top-8) at tp 1-4 under balanced
    routing, 1-128 tokens: with moe_kernels vllm the layer is within the vLLM fit's own p90 error of
    vLLM's measured default kernel at the median, and closer than TensorRT-LLM's fit of the format, which
    the setting off takes (on Blackwell NVFP4 TensorRT-LLM's CUTLASS kernel takes 1.5-4x the time of
    vLLM's TRTLLM-Gen one at decode sizes: AIConfigurator's B200 moe_perf tables at 4/16/64 tokens, tp 4,
    95/198/296 us for TensorRT-LLM's CUTLASS kernel against 25/61/99 us for vLLM's)."""
    hw = hardware(system)
    code = np.array([CODE[precision]])
    on = burst(Rates.of(hw, code, moe_kernels=np.array([VLLM_KERNELS])))
    off = burst(Rates.of(hw, code, moe_kernels=np.array([0])))
    t = _vllm_table(kernels_dir, gpu)
    t = t[(t["moe_dtype"] == dtype) & (t["hidden_size"] == 3072) & (t["inter_size"] == 1536)
          & (t["num_experts"] == 256) & (t["topk"] == 8) & (t["moe_ep_size"] == 1) & (t["moe_tp_size"] <= 4)
          & (t["num_tokens"] <= 128)]
    m, errors = moe_model(3072, 1536, 256, 8), []
    weight_bytes = {"nvfp4": 0.5625, "fp8-block": 1.0 + 4.0 / 128 ** 2}[precision]
    for (tp, tokens), latency_ms in t.groupby(["moe_tp_size", "num_tokens"])["latency"].median().items():
        ops = layer.moe_ops(m, Shape(seqs=float(tokens), q_len=1.0, ctx=1.0, tp=float(tp), ep=1.0), 2.0, 1.0, 1.0,
                            spread=True, expert_operand=weight_bytes)
        op = next(o for o in ops if o.name == "experts")
        op.moe["local_tokens"] = float(tokens)
        measured = latency_ms * 1e-3
        errors.append([float(roofline.op_time_s(op, r)[0]) / measured - 1.0 for r in (on, off)])
    errors = np.abs(np.array(errors))
    assert len(errors) >= 20
    vllm, trtllm = np.median(errors, axis=0)
    assert vllm <= _fit_p90(system, f"vllm-{precision}") and vllm < trtllm, (vllm, trtllm)
    if precision == "nvfp4":
        assert trtllm > max(0.5, 5 * vllm), (vllm, trtllm)   # the CUTLASS fit far off: 1.5x the time and more


def test_a_part_without_a_vllm_fit_falls_back_to_tensorrt_llms_exactly():
    """H100 has no vLLM fit of per-tensor FP8 experts (not kept: dse.calibrate.moe_vllm.PLAUSIBLE):
    moe_kernels vllm changes nothing there, while it does change H100's block-FP8 experts and GPT-OSS's
    MXFP4 experts on B200 (vLLM's own MXFP4 x BF16 kernels against TensorRT-LLM's W4A8 fit); on H200,
    which has no TensorRT-LLM MXFP4 MoE fit, both engines take vLLM's MXFP4 fit."""
    rows = [dict(SERVING, system="h100-sxm", precision="fp8", expert_precision="fp8"),
            dict(SERVING, system="h100-sxm", precision="fp8-block", expert_precision="fp8-block"),
            dict(SERVING, model="gpt-oss-120b", system="h200", expert_precision="mxfp4"),
            dict(SERVING, model="gpt-oss-120b", system="b200", expert_precision="mxfp4")]
    frame = pd.DataFrame([dict(r, moe_kernels=k) for r in rows for k in ("vllm", "trtllm")])
    tpot = dse.evaluate_serving(frame)["tpot_s"].to_numpy()
    assert tpot[0] == tpot[1] and tpot[2] != tpot[3] and tpot[4] == tpot[5] and tpot[6] != tpot[7]


def test_tensorrt_llms_hopper_mxfp4_experts_run_near_its_own_measured_kernel(kernels_dir):
    """GPT-OSS-120B's experts (hidden = expert FFN = 2880, 128 experts, top-4, tp 1, ep 1-8) on H200
    under balanced routing, 1-256 tokens: TensorRT-LLM's layer, priced at vLLM's MXFP4 fit (the part
    has no TensorRT-LLM MXFP4 MoE fit), is within 25% of TensorRT-LLM's own measured W4A16 MXFP4
    kernel at the median, and closer to it than the block-FP8 fallback it took before."""
    hw = hardware("h200")
    code = np.array([CODE["mxfp4"]])
    markers = {c: np.asarray(0.0) for c in catalog.fitted.ABSENT if c.startswith("moe_vllm_")}
    now = burst(Rates.of(hw, code, moe_kernels=np.array([0])))
    fallback = burst(Rates.of({**hw, **markers}, code, moe_kernels=np.array([0])))
    files = glob.glob(os.path.join(kernels_dir, "h200_sxm", "moe", "trtllm", "*", "moe_perf.parquet"))
    t = pd.concat([pd.read_parquet(f) for f in files])
    t = t[(t["moe_dtype"] == "w4a16_mxfp4") & (t["distribution"] == "balanced") & (t["num_experts"] == 128)
          & (t["hidden_size"] == 2880) & (t["moe_tp_size"] == 1) & (t["moe_ep_size"] <= 8) & (t["num_tokens"] <= 256)]
    m, errors = moe_model(2880, 2880, 128, 4), []
    for (ep, tokens), latency_ms in t.groupby(["moe_ep_size", "num_tokens"])["latency"].median().items():
        ops = layer.moe_ops(m, Shape(seqs=float(tokens), q_len=1.0, ctx=1.0, tp=1.0, ep=float(ep)), 2.0, 1.0, 1.0,
                            spread=True, expert_operand=0.53125)
        op = next(o for o in ops if o.name == "experts")
        op.moe["local_tokens"] = float(tokens)
        errors.append([float(roofline.op_time_s(op, r)[0]) / (latency_ms * 1e-3) - 1.0 for r in (now, fallback)])
    errors = np.abs(np.array(errors))
    assert len(errors) >= 40
    vllm_fit, block_fp8 = np.median(errors, axis=0)
    assert vllm_fit <= 0.25 and vllm_fit < block_fp8, (vllm_fit, block_fp8)


def test_setting_off_is_tensorrt_llms_fits_bit_for_bit():
    """moe_kernels trtllm gives exactly what a part without any vLLM fit gives with it on (the markers
    zeroed: the catalog's TensorRT-LLM MoE fits as before the setting existed), serving and inference."""
    base = [dict(SERVING, system=s, expert_precision=e) for s, e in (("b200", "nvfp4"), ("b300", "fp8-block"),
                                                                      ("h200", "fp8-block"))]
    markers = {c: 0.0 for c in catalog.fitted.ABSENT if c.startswith("moe_vllm_")}
    off = pd.DataFrame([dict(r, moe_kernels="trtllm") for r in base])
    absent = pd.DataFrame([dict(r, moe_kernels="vllm", **markers) for r in base])
    on = pd.DataFrame([dict(r, moe_kernels="vllm") for r in base])
    serve = lambda f: dse.evaluate_serving(f)["tpot_s"].to_numpy()
    np.testing.assert_array_equal(serve(off), serve(absent))
    assert np.all(serve(on) != serve(off))
    batch = [{k: v for k, v in r.items() if k != "concurrency"} | dict(batch=8) for r in base]
    infer = lambda rows, **kw: dse.evaluate_inference(pd.DataFrame([dict(r, **kw) for r in rows]))["tpot_s"].to_numpy()
    np.testing.assert_array_equal(infer(batch, moe_kernels="trtllm"), infer(batch, moe_kernels="vllm", **markers))
    assert np.all(infer(batch, moe_kernels="vllm") != infer(batch, moe_kernels="trtllm"))


def test_training_ignores_the_setting():
    """Training's MoE layers are its frameworks' grouped GEMMs, not a serving engine's kernels."""
    hw = hardware("b200")
    code = np.array([CODE["nvfp4"]])
    trained = Rates.of(hw, code, training=True)
    assert trained.vllm_moe is False and trained.vllm_params is None
    assert Rates.of(hw, code, moe_kernels=np.array([VLLM_KERNELS])).vllm_moe.all()


def test_prefill_sized_layers_keep_tensorrt_llms_fit():
    """The vLLM fits cover decode-sized layers (up to VLLM_MAX_TOKENS tokens, where they were fitted);
    a larger layer, grouped-GEMM bound, takes TensorRT-LLM's fit of its format whatever the setting."""
    from dse.perf.forms.moe import VLLM_MAX_TOKENS
    hw = hardware("b200")
    code = np.array([CODE["nvfp4"]])
    on = burst(Rates.of(hw, code, moe_kernels=np.array([VLLM_KERNELS])))
    off = burst(Rates.of(hw, code, moe_kernels=np.array([0])))
    m = moe_model(3072, 1536, 256, 8)

    def layer_s(tokens, r):
        ops = layer.moe_ops(m, Shape(seqs=float(tokens), q_len=1.0, ctx=1.0, tp=4.0, ep=1.0), 2.0, 1.0, 1.0,
                            spread=True, expert_operand=0.5625)
        op = next(o for o in ops if o.name == "experts")
        op.moe["local_tokens"] = float(tokens)
        return float(roofline.op_time_s(op, r)[0])
    assert layer_s(VLLM_MAX_TOKENS, on) != layer_s(VLLM_MAX_TOKENS, off)
    assert layer_s(2 * VLLM_MAX_TOKENS, on) == layer_s(2 * VLLM_MAX_TOKENS, off)
