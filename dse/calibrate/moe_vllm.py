"""Fit the MoE layer time model (`dse.perf.forms.moe`) to vLLM's own MoE kernels (family `moe_vllm`).

Data: `<gpu>/moe/vllm/<version>/moe_perf.parquet`, vLLM's whole MoE layer on one GPU, the same op,
columns and collector as TensorRT-LLM's tables (dse.calibrate.moe), with `kernel_source` naming the
vLLM backend (`vllm_<quant method>_<backend>_<experts class>`). A serving engine runs one kernel per
layer configuration, the one vLLM's MoE oracle selects by default, so each dse precision is fitted,
per GPU, on the kernel that oracle picks for it (labelled `vllm-<precision>`: a model column family of
its own, `moe_vllm_<parameter>_<format>`, which the `moe_kernels vllm` setting reads;
dse.perf.roofline).

vLLM's oracle (vllm-project/vllm vllm/model_executor/layers/fused_moe/oracle/, @edd45a17 nvfp4.py
select_nvfp4_moe_backend, fp8.py select_fp8_moe_backend and _get_priority_backends, unquantized.py
select_unquantized_moe_backend) walks a priority list and takes the first backend whose experts class
supports the configuration: FlashInfer TRT-LLM (its monolithic experts class before the modular one),
then FlashInfer CUTLASS, then Triton. Platform exceptions: on Hopper the unquantized (BF16) kernels
take Triton first, and block FP8 takes Triton under tensor parallelism (ep 1) and FlashInfer CUTLASS
under expert parallelism (ep > 1); FlashInfer TRT-LLM kernels exist on Blackwell only. AIConfigurator's
collector measures what that oracle can pick (on Hopper block FP8: Triton only at ep 1, FlashInfer
CUTLASS only at ep > 1), so the default kernel of a (dtype, ep 1 or not) is the first of ORDER that
the table measures for it: on Blackwell the TRT-LLM monolithic kernels for every fitted dtype; on
Hopper Triton (BF16), FlashInfer CUTLASS (per-tensor FP8), Triton / FlashInfer CUTLASS (block FP8
at ep 1 / ep > 1: one fit over both, as a serving run takes one or the other by its ep).

Fitted: BF16, per-tensor FP8, block FP8, NVFP4 and MXFP4 (the dtypes of DTYPES), a fit kept where it
is physically plausible (PLAUSIBLE: not Hopper's per-tensor FP8). MXFP4 is GPT-OSS's checkpoint, MXFP4
weights and BF16 activations, as vLLM's Mxfp4MoEMethod runs it by default (vllm/model_executor/layers/
quantization/mxfp4.py get_mxfp4_backend: FlashInfer's TRT-LLM MXFP4 x BF16 kernel on Blackwell, OpenAI's
Triton kernel on Hopper; the MXFP8-activation kernels only under an environment flag); its rows are
that method's (MXFP4_METHOD), not compressed-tensors' W4A4 MXFP4 (Marlin). Not fitted: int4_wo.
Only balanced rows are fitted: the routing skew is a property of the traffic, not of the kernels, and stays TensorRT-LLM's
fit (the `moe` family's "all" precision); A100's vLLM table (0.14) has power-law rows only, so A100
gets no vLLM fit. The FlashInfer TRT-LLM kernels are TRTLLM-Gen's: fitted in their token tiles as
TensorRT-LLM's min-latency kernels are (dse.calibrate.moe, `token_tiles` 1 in the Fit, which the
model pads the same way).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from dse.calibrate import Fit
from dse.calibrate import moe
from dse.calibrate.tables import KernelData
from dse.perf.forms.moe import VLLM_MAX_TOKENS

FAMILY = "moe_vllm"
FRAMEWORK = "vllm"
# kernel dtype -> the pseudo dtype its default vLLM kernel is fitted as (moe.DTYPES labels it vllm-<precision>)
DTYPES = {"bfloat16": "vllm_bfloat16", "fp8": "vllm_fp8", "fp8_block": "vllm_fp8_block", "nvfp4": "vllm_nvfp4",
          "w4a16_mxfp4": "vllm_mxfp4"}
# MXFP4 checkpoints vLLM runs with its GPT-OSS MXFP4 method (Mxfp4MoEMethod; compressed-tensors' W4A4
# MXFP4 method, Marlin, is another checkpoint format)
MXFP4_METHOD = "gptossmxfp4moe"
# vLLM's MoE oracle backend priority (module docstring), as kernel_source fragments; within FlashInfer
# TRT-LLM the monolithic experts class is tried before the modular one
ORDER = ("flashinfer_trtllm", "flashinfer_cutlass", "triton")
TILED_BACKEND = "flashinfer_trtllm"   # TRTLLM-Gen kernels: whole token tiles per expert
# A fit whose large grouped GEMMs reach under a fifth of the format's peak, or whose weights stream at
# under half of HBM bandwidth, does not describe its kernel: the form traded its decode and prefill ends
# against each other (Hopper's per-tensor FP8 FlashInfer CUTLASS kernel: efficiency_max 0.18 / 0.11,
# memory_efficiency 0.20 / 1.0, 11% / 18% median error on H100 / H200); the part keeps TensorRT-LLM's fit
# of that format instead. Every other vLLM fit reaches 0.28-0.75 of peak and streams at 0.82-0.94.
PLAUSIBLE = {"efficiency_max": 0.2, "memory_efficiency": 0.5}


def kernel_rank(kernel: str) -> float:
    """Position of a kernel in vLLM's oracle order (ORDER; a modular class after its monolithic one);
    inf for a backend the oracle does not reach by default (Marlin, ...)."""
    for i, backend in enumerate(ORDER):
        if backend in kernel:
            return i + (0.5 if "modular" in kernel else 0.0)
    return float("inf")


def default_rows(t: pd.DataFrame) -> np.ndarray:
    """Rows measured on the kernel vLLM selects by default for their dtype and parallelism: per
    (dtype, ep 1 or not), the measured kernel first in the oracle's order."""
    rank = t["kernel_source"].map({k: kernel_rank(k) for k in t["kernel_source"].unique()}).to_numpy(float)
    group = [t["moe_dtype"].to_numpy(), (t["moe_ep_size"] > 1).to_numpy()]
    best = pd.Series(rank).groupby(group).transform("min").to_numpy()
    return np.isfinite(rank) & (rank == best)


def fit(data: KernelData, gpu: str) -> list[Fit]:
    """The vLLM MoE fits of one GPU (none where it has no vLLM table of a fitted dtype)."""
    t = data.table(gpu, moe.FAMILY, "moe_perf", FRAMEWORK)
    if t.empty:
        return []
    mxfp4_method = (t["moe_dtype"] != "w4a16_mxfp4") | t["kernel_source"].str.contains(MXFP4_METHOD)
    t = t[(t["distribution"] == "balanced") & t["moe_dtype"].isin(DTYPES) & (t["num_tokens"] <= VLLM_MAX_TOKENS)
          & mxfp4_method]
    t = t[default_rows(t)]
    if t.empty:
        return []
    t = t.assign(moe_dtype=t["moe_dtype"].map(DTYPES), _tiled=t["kernel_source"].str.contains(TILED_BACKEND))
    fits = moe.fit_table(t, data.system(gpu), gpu, FAMILY, "vLLM moe_perf, the oracle's default kernel",
                         legacy_before=None)
    for f in fits:   # which form the model must evaluate the fit in (dse.perf.roofline)
        f.params["token_tiles"] = 1.0 if "TRTLLM-Gen" in f.basis else 0.0
    return [f for f in fits if all(f.params[p] >= least for p, least in PLAUSIBLE.items())]
