"""vLLM's own MoE kernel fits (dse.calibrate.moe_vllm, family moe_vllm) against vLLM's measured tables."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import of

from dse.calibrate import error_stats, moe, moe_vllm

BLACKWELL = ["b200_sxm", "b300_sxm", "gb200", "gb300"]
HOPPER = ["h100_sxm", "h200_sxm"]
# the bound on the fit error per GPU (all precisions pooled), met on the decode-sized layers the
# fits cover (VLLM_MAX_TOKENS); over prefill-sized layers too, one form per precision missed whole
# shapes by 30-45% (p90 28-31%)
MEDIAN_TARGET, P90_TARGET = 10.0, 25.0


@pytest.fixture(scope="module")
def fits(all_fits, data):
    return {g: {f.precision: f for f in of(all_fits, "moe_vllm", g)} for g in data.gpus}


@pytest.mark.parametrize("gpu", BLACKWELL + HOPPER)
def test_error_per_gpu(fits, gpu):
    by = fits[gpu]
    pooled = error_stats("moe_vllm", gpu, np.concatenate([f.measured_s for f in by.values()]),
                         np.concatenate([f.predicted_s for f in by.values()]))
    assert pooled["points"] > 2000
    assert pooled["median_abs_error_pct"] <= MEDIAN_TARGET, pooled
    assert pooled["p90_abs_error_pct"] <= P90_TARGET, pooled


def test_precisions_labelled_apart_and_tiled_where_trtllm_gen(fits):
    for gpu in BLACKWELL:
        assert set(fits[gpu]) == {"vllm-bf16", "vllm-fp8", "vllm-fp8-block", "vllm-nvfp4", "vllm-mxfp4"}, gpu
        assert all(f.params["token_tiles"] == 1.0 and "TRTLLM-Gen" in f.basis for f in fits[gpu].values())
    for gpu in HOPPER:   # no FP4 units, no FlashInfer TRT-LLM kernels: Triton / CUTLASS, untiled; the
        # per-tensor FP8 fit is implausible (large grouped GEMMs at 11-18% of peak) and not kept
        assert set(fits[gpu]) == {"vllm-bf16", "vllm-fp8-block", "vllm-mxfp4"}, gpu
        assert all(f.params["token_tiles"] == 0.0 for f in fits[gpu].values())
    # A100's vLLM table holds power-law rows only: the routing is TensorRT-LLM's fit, so none is fitted
    assert not fits.get("a100_sxm")
    for by in fits.values():
        for f in by.values():
            assert f.family == "moe_vllm" and "vLLM moe_perf" in f.basis
            assert set(f.params) == set(moe.LAYER) | {"token_tiles"}, f.params   # no routing skew of its own


def test_default_kernel_follows_the_oracle_order():
    # FlashInfer TRT-LLM (monolithic before modular), then FlashInfer CUTLASS, then Triton; Marlin never
    rank = moe_vllm.kernel_rank
    assert (rank("vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_trtllmnvfp4expertsmonolithic")
            < rank("vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_trtllmnvfp4expertsmodular")
            < rank("vllm_compressedtensorsw4a4nvfp4moe_flashinfer_cutlass_flashinferexperts")
            < rank("vllm_fp8moe_triton_tritonexperts") < rank("vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts"))
    t = pd.DataFrame({"moe_dtype": ["nvfp4"] * 3 + ["fp8_block"] * 2,
                      "moe_ep_size": [1, 1, 1, 1, 8],
                      "kernel_source": ["vllm_x_flashinfer_cutlass_flashinferexperts",
                                        "vllm_x_flashinfer_trtllm_trtllmnvfp4expertsmodular",
                                        "vllm_x_flashinfer_trtllm_trtllmnvfp4expertsmonolithic",
                                        "vllm_fp8moe_triton_tritonexperts",   # Hopper block FP8 at ep 1
                                        "vllm_fp8moe_flashinfer_cutlass_flashinferexperts"]})   # ... at ep > 1
    assert moe_vllm.default_rows(t).tolist() == [False, False, True, True, True]


def test_fitted_rows_are_the_default_kernels(data):
    """B200 NVFP4: the TRT-LLM monolithic kernel only (the table also times CUTLASS and the modular
    class on the same shapes); H100 block FP8: Triton at ep 1 and FlashInfer CUTLASS at ep > 1."""
    t = data.table("b200_sxm", "moe", "moe_perf", "vllm")
    t = t[t["distribution"] == "balanced"]
    picked = t[moe_vllm.default_rows(t)]
    assert set(picked.loc[picked["moe_dtype"] == "nvfp4", "kernel_source"]) == {
        "vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_trtllmnvfp4expertsmonolithic"}
    h = data.table("h100_sxm", "moe", "moe_perf", "vllm")
    h = h[(h["distribution"] == "balanced") & (h["moe_dtype"] == "fp8_block")]
    h = h[moe_vllm.default_rows(h)]
    assert set(h.loc[h["moe_ep_size"] == 1, "kernel_source"]) == {"vllm_fp8moe_triton_tritonexperts"}
    assert set(h.loc[h["moe_ep_size"] > 1, "kernel_source"]) == {"vllm_fp8moe_flashinfer_cutlass_flashinferexperts"}


@pytest.mark.parametrize("gpu", ["b200_sxm", "h200_sxm"])
def test_fit_is_deterministic(data, fits, gpu):
    again = {f.precision: (f.params, f.predicted_s.tolist()) for f in moe_vllm.fit(data, gpu)}
    assert again == {p: (f.params, f.predicted_s.tolist()) for p, f in fits[gpu].items()}


def test_the_moe_family_keeps_tensorrt_llms_precisions_only(all_fits):
    """The moe family fits TensorRT-LLM's tables only (vLLM's are the moe_vllm family's)."""
    assert {f.precision for f in of(all_fits, "moe", "b200_sxm")} == {
        "bf16", "fp8", "fp8-block", "nvfp4", "mxfp4", "nvfp4-min-latency", "all"}


def test_mxfp4_is_gpt_oss_method_default_kernel(data):
    """GPT-OSS's MXFP4 checkpoint: vLLM's Mxfp4MoEMethod runs FlashInfer's TRT-LLM MXFP4 x BF16 kernel on
    Blackwell and OpenAI's Triton kernel on Hopper by default (mxfp4.py get_mxfp4_backend); the
    compressed-tensors W4A4 MXFP4 method (Marlin) and the MXFP8-activation kernels are not it."""
    for gpu, kernel in (("b200_sxm", "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic"),
                        ("h100_sxm", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic")):
        t = data.table(gpu, "moe", "moe_perf", "vllm")
        t = t[(t["distribution"] == "balanced") & (t["moe_dtype"] == "w4a16_mxfp4")
              & t["kernel_source"].str.contains(moe_vllm.MXFP4_METHOD)]
        assert set(t.loc[moe_vllm.default_rows(t), "kernel_source"]) == {kernel}, gpu
