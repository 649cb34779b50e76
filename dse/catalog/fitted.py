"""Model columns from the fitted kernel parameters (`efficiency.csv`, written by `dse calibrate`).

The performance model reads a few per-GPU columns (schema group `efficiency`); `FITTED` says,
for each, which family, precision and fitted parameters it comes from and how several are pooled
(the median of the per-op values, so one outlying op does not move it). A catalog system with
kernel fits takes these values; a generation without kernel data names in
`efficiency_projection.csv` (`kernels_like`) the fitted system whose values it carries over.

A format a GPU was not measured in takes the nearest measured one (`FORMAT_FALLBACK`): MXFP8 takes
the per-tensor FP8 fit, because Transformer Engine runs MXFP8 GEMMs as cuBLASLt block-scaled kernels
(scales applied in the MMA), the library behind the tables' fp8 GEMMs (TensorRT-LLM torch_flow),
while their fp8_block GEMMs are DeepGEMM's hand-tuned 1x128 kernels (kernel_source deepgemm);
MXFP4 like NVFP4 (the MoE family has its own MXFP4 fit on Blackwell, TensorRT-LLM's W4A8 MXFP4 MoE
kernels, which it takes first); a part without FP4 (or FP8) units runs the format
at its FP8 (or BF16) peak with that format's efficiency (the peak fallback is in dse.catalog)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from dse.catalog.precision import NAMES as FORMATS

_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall")
GEMM_PARAMS = ("efficiency_max", "tiles_per_wave", "k_ramp", "split_k_min_depth", "floor_s", "memory_efficiency")
# the MoE layer's fitted parameters (dse.perf.forms.moe.LAYER_PARAMS; a leaf list here, checked equal by a test)
MOE_PARAMS = ("floor_s", "efficiency_max", "memory_efficiency", "routed_bytes_per_element", "expert_overhead_s",
              "local_expert_overhead_s", "routing_s_per_selection", "routing_step_s")
PREFILL_FORM_PARAMS = ("tile_s", "q_tile_rows", "floor_s", "memory_efficiency")   # dse.perf.forms.attention
# the decode kernel form's parameters (dse.perf.forms.attention.decode_time_s) and its MMA efficiency
DECODE_FORM_PARAMS = ("decode_sm_count", "decode_grouped_min_items", "decode_floor_s", "decode_head_floor_s",
                      "decode_cta_s", "decode_key_s", "decode_query_s", "decode_head_cta_s", "decode_head_key_s",
                      "decode_bandwidth_efficiency", "decode_reread_fraction", "decode_split_s", "decode_head_split_s",
                      "decode_empty_split_s")
# dse.perf.forms.training_attention: (efficiency_max, half_keys) of the forward and of the backward, each
# pass's narrow-head k, the (efficiency_max, half_keys) pairs of cuDNN's FP8 kernels (fp8_attention),
# the backward's wide-head k and the pairs of cuDNN's MXFP8 kernels (fp8_attention under MXFP8, Blackwell)
TRAINING_ATTENTION_PARAMS = ("fwd_efficiency_max", "fwd_half_keys", "bwd_efficiency_max", "bwd_half_keys",
                             "fwd_head_dim_k", "bwd_head_dim_k", "fp8_fwd_efficiency_max", "fp8_fwd_half_keys",
                             "fp8_bwd_efficiency_max", "fp8_bwd_half_keys", "bwd_wide_head_k", "mxfp8_fwd_efficiency_max",
                             "mxfp8_fwd_half_keys", "mxfp8_bwd_efficiency_max", "mxfp8_bwd_half_keys")
MIN_LATENCY = "nvfp4-min-latency"   # the fit of TensorRT-LLM's NVFP4 min-latency MoE kernels (dse calibrate)
# vLLM's own MoE kernels (dse.calibrate.moe_vllm, family moe_vllm, precisions vllm-<format>): the formats
# fitted, their model columns moe_vllm_<parameter>_<format>, and the per-format markers
VLLM_MOE = "moe_vllm"
VLLM_MOE_FORMATS = ("bf16", "fp8", "fp8-block", "nvfp4", "mxfp4")
FORMAT_FALLBACK = {
    "bf16": ("bf16",),
    "fp8": ("fp8", "bf16"),
    "fp8-block": ("fp8-block", "fp8", "bf16"),
    "mxfp8": ("mxfp8", "fp8", "bf16"),
    "nvfp4": ("nvfp4", "fp8-block", "fp8", "bf16"),
    "mxfp4": ("mxfp4", "nvfp4", "fp8-block", "fp8", "bf16"),
}


# model column suffix -> fitted NCCL parameter; the model's op names -> the kernel tables' names
COLLECTIVE_COLUMNS = {"efficiency": "efficiency_max", "floor_s": "floor_s", "half_bytes": "half_bytes",
                      "local_copy_fraction": "local_copy_fraction"}
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
NCCL_NAME = {"all_to_all": "alltoall"}


def gemm_column(param: str, fmt: str, family: str = "gemm") -> str:
    """Model column of one fitted parameter of a per-format family (gemm, moe) for one number
    format, e.g. gemm_efficiency_max_fp8_block, moe_floor_s_nvfp4."""
    return f"{family}_{param}_{fmt.replace('-', '_')}"


def vllm_moe_marker(fmt: str, kind: str = "") -> str:
    """Model column marking a part's vLLM MoE fit of one format: moe_vllm_nvfp4 (has the fit),
    moe_vllm_tiles_nvfp4 (the fit is in TRTLLM-Gen token tiles)."""
    return f"{VLLM_MOE}_{kind + '_' if kind else ''}{fmt.replace('-', '_')}"


def _each(param: str) -> list[str]:
    return [f"{op}_{param}" for op in _COLLECTIVES]


def _attention_fraction(values) -> float:
    """Fraction of the BF16 peak a long causal FlashAttention-class prefill reaches at head_dim 128:
    the fitted MMA efficiency over the softmax's cost in extra head dimensions
    (dse.perf.forms.attention: FLOPs x (qk + v + 2 softmax_dim) / (qk + v) at efficiency_max)."""
    efficiency_max, softmax_dim = values
    return efficiency_max * 256.0 / (256.0 + 2.0 * softmax_dim)   # forms.attention.mma_fraction at 128 + 128


# model column -> (family, precisions tried in order, fitted parameter names, and how their values
# become the column: pooled by their median unless a function is given)
FITTED = {
    "attention_efficiency": ("attention", ("bf16",), ["prefill_efficiency_max", "prefill_softmax_dim"],
                             _attention_fraction),
    "attention_softmax_dim": ("attention", ("bf16",), ["prefill_softmax_dim"]),
    # the rest of the prefill form, over a 16-bit and over an FP8 KV cache (the context FMHA then runs
    # FP8 MMAs, its efficiency a fraction of the FP8 peak): serving and inference prefill (dse.perf.roofline)
    **{f"attention_{p}": ("attention", ("bf16",), [f"prefill_{p}"]) for p in PREFILL_FORM_PARAMS},
    "attention_fp8_efficiency": ("attention", ("fp8",), ["prefill_efficiency_max", "prefill_softmax_dim"],
                                 _attention_fraction),
    "attention_fp8_softmax_dim": ("attention", ("fp8",), ["prefill_softmax_dim"]),
    **{f"attention_fp8_{p}": ("attention", ("fp8",), [f"prefill_{p}"]) for p in PREFILL_FORM_PARAMS},
    # the decode kernel form over a 16-bit and over an FP8 KV cache (serving and inference decode)
    **{f"attention_{kv}{p}": ("attention", (fmt,), [p]) for kv, fmt in (("", "bf16"), ("fp8_", "fp8"))
       for p in ("prefill_efficiency_max", *DECODE_FORM_PARAMS)},
    **{f"train_attention_{p}": ("training_attention", ("bf16",), [p]) for p in TRAINING_ATTENTION_PARAMS},
    # the amax reduction of dynamic per-tensor FP8 scaling, whose floor the fp8 GEMM fit holds
    # (dse.perf.roofline: serving's static scales do not run it)
    "fp8_scale_floor_s": ("quantize", ("fp8",), ["compute_scale_floor_s"]),
    # TensorRT-LLM's custom all-reduce (one-shot / two-shot kernels over NVLink; dse.perf.forms.collective)
    **{f"custom_allreduce_{p}": ("nccl", ("all",), [f"custom_allreduce_{p}"])
       for p in ("floor_s", "oneshot_efficiency", "twoshot_efficiency")},
    # 1 where the part's MXFP4 MoE fit is its own (TRTLLM-Gen kernels, fitted with their token tiles:
    # dse.perf.forms.moe.tiled_peak), 0 where MXFP4 takes another format's fit (FORMAT_FALLBACK)
    "moe_token_tiles_mxfp4": ("moe", ("mxfp4",), ["floor_s"], lambda values: 1.0),
    # TensorRT-LLM's NVFP4 min-latency MoE kernels (TRTLLM-Gen, Blackwell; dse.perf.forms.moe
    # MIN_LATENCY_MAX_TOKENS): 1 where the part has their fit; their parameters fall back to the
    # CUTLASS NVFP4 fit's elsewhere (never used there)
    "moe_min_latency_nvfp4": ("moe", ("nvfp4-min-latency",), ["floor_s"], lambda values: 1.0),
    **{gemm_column(p, MIN_LATENCY, "moe"): ("moe", (MIN_LATENCY,) + FORMAT_FALLBACK["nvfp4"], [p]) for p in MOE_PARAMS},
    # vLLM's own MoE kernels, the default kernel of vLLM's MoE oracle per format (moe_kernels vllm):
    # moe_vllm_<format> 1 where the part has their fit (0 elsewhere: TensorRT-LLM's fit is used),
    # moe_vllm_tiles_<format> 1 where that fit is in TRTLLM-Gen token tiles (FlashInfer TRT-LLM kernels);
    # their parameters fall back to TensorRT-LLM's fit of the format where the part has no vLLM fit (never used there)
    **{vllm_moe_marker(f): (VLLM_MOE, (f"vllm-{f}",), ["floor_s"], lambda values: 1.0) for f in VLLM_MOE_FORMATS},
    **{vllm_moe_marker(f, "tiles"): (VLLM_MOE, (f"vllm-{f}",), ["token_tiles"], lambda values: values[0])
       for f in VLLM_MOE_FORMATS},
    **{gemm_column(p, f, VLLM_MOE): (VLLM_MOE, (f"vllm-{f}",) + tuple(("moe", q) for q in FORMAT_FALLBACK[f]), [p])
       for f in VLLM_MOE_FORMATS for p in MOE_PARAMS},
    # the power-law routing the skewed-serving presets name (alpha 1.01: moe_imbalance 10), as dse
    # calibrate fits it on the part's power-law MoE tables: the busiest expert's load over the mean
    # and the share of the experts that get any traffic (dse.perf.forms.moe.active_fraction)
    "moe_skew_busiest_ratio": ("moe", ("all",), ["power_law_1.01_busiest_expert_ratio"]),
    "moe_skew_active_fraction": ("moe", ("all",), ["power_law_1.01_active_expert_fraction"]),
    # DeepEP's normal dispatch and combine kernels (dse.perf.forms.deepep; the deepep dispatcher)
    **{f"deepep_{d}_{p}": ("deepep", ("all",), [f"normal_{d}_{p}"]) for d in ("dispatch", "combine")
       for p in ("floor_s", "efficiency", "sm_bytes_per_s", "item_overhead_bytes")},
    "scaleup_latency_s": ("nccl", ("bf16",), _each("step_latency_s")),
    **{f"{op}_{column}": ("nccl", ("bf16",), [f"{NCCL_NAME.get(op, op)}_{param}"])
       for op in COLLECTIVE_OPS for column, param in COLLECTIVE_COLUMNS.items()},
    **{gemm_column(p, f): ("gemm", FORMAT_FALLBACK[f], [p]) for f in FORMATS for p in GEMM_PARAMS},
    **{gemm_column(p, f, "moe"): ("moe", FORMAT_FALLBACK[f], [p]) for f in FORMATS for p in MOE_PARAMS},
}


# columns whose absence is a value: no MXFP4 fit of its own (no token tiles), no FP8 amax kernel to
# drop, no custom all-reduce (the NCCL all-reduce)
ABSENT = {**{vllm_moe_marker(f, k): 0.0 for f in VLLM_MOE_FORMATS for k in ("", "tiles")},
          "moe_token_tiles_mxfp4": 0.0, "moe_min_latency_nvfp4": 0.0, "fp8_scale_floor_s": 0.0, "custom_allreduce_floor_s": 0.0,
          "custom_allreduce_oneshot_efficiency": 0.0, "custom_allreduce_twoshot_efficiency": 0.0}   # 0: NCCL's


def columns_from_fits(fits: pd.DataFrame) -> pd.DataFrame:
    """One row per fitted system, one column per model column `FITTED` defines (NaN where that
    system's kernel data lacks the family, the ABSENT value for the columns that have one)."""
    values = {(s, f, p, q): float(v) for s, f, p, q, v in
              zip(fits["system"], fits["family"], fits["precision"], fits["parameter"], fits["value"])}
    systems = sorted(set(fits["system"]))
    out = pd.DataFrame(index=pd.Index(systems, name="system"), columns=list(FITTED), dtype=float)
    for column, (family, precisions, params, *combine) in FITTED.items():
        for system in systems:
            for precision in precisions:   # a (family, precision) pair falls back to another family's fit
                fam, precision = precision if isinstance(precision, tuple) else (family, precision)
                found = [values[(system, fam, precision, p)] for p in params
                         if (system, fam, precision, p) in values]
                if len(found) == len(params) or (found and not combine):
                    out.loc[system, column] = float(combine[0](found) if combine else np.median(found))
                    break
    return out.fillna(ABSENT)


@lru_cache(maxsize=None)
def fitted_columns() -> pd.DataFrame:
    from dse.catalog import kernel_fits
    return columns_from_fits(kernel_fits())
