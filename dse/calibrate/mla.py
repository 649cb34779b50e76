"""Fit DeepSeek multi-head latent attention (`mla_prefill_time_s`, `mla_decode_time_s` in
`dse.perf.forms.attention`) to TensorRT-LLM's measured MLA kernels (`mla/trtllm/*/context_mla_perf`
and `generation_mla_perf`, DeepSeek-V3 dimensions).

One Fit per GPU and KV-cache precision ("bf16", "fp8"; the MLA math itself is bf16 in the tables),
both phases in one Fit (`prefill_*`, `decode_*`). `num_heads` in the tables is the heads on one GPU
(128 / tp_size); a decode row attends from one new token to `step` cached tokens plus itself.

Not fitted: the `mla_*_module_perf` tables time the whole DeepSeek-V3 attention module (the q/kv
LoRA down- and up-projections, the absorbed kv_b BMMs, RoPE, norms, o_proj and this kernel), for
bf16, fp8-block and nvfp4 GEMMs. They are a composition of the gemm family's forms and this one;
they belong in a cross-family check once both are fitted, not in a fit of their own.
"""
from __future__ import annotations

import numpy as np

from dse.calibrate import Fit
from dse.calibrate.attention import DECODE_PARAMS as ATTENTION_DECODE_PARAMS
from dse.calibrate.attention import KV_PRECISIONS, fit_log, fit_prefill, has_units, read_table
from dse.calibrate.tables import KernelData
from dse.perf.forms import attention as form

FAMILY = "mla"
# Every head shares the one latent KV head, so no per-head kernel (and no `decode_head_item_s`) runs.
DECODE_PARAMS = tuple(p for p in ATTENTION_DECODE_PARAMS if p[0] != "decode_head_item_s")


def _col(t, c):
    return t[c].to_numpy(float)


def fit(data: KernelData, gpu: str) -> list[Fit]:
    system = data.system(gpu)
    bandwidth = float(system["memory_bandwidth_bytes_per_s"])
    ctx = read_table(data, gpu, FAMILY, "context_mla_perf")
    gen = read_table(data, gpu, FAMILY, "generation_mla_perf")
    fits = []
    for kv_dtype, (precision, kv_bytes, peak_col) in KV_PRECISIONS.items():
        c = ctx[ctx.kv_cache_dtype == kv_dtype] if len(ctx) else ctx
        g = gen[gen.kv_cache_dtype == kv_dtype] if len(gen) else gen
        peak = float(system[peak_col])
        if len(c) == 0 or len(g) == 0 or not has_units(system, peak_col):
            continue
        pre = {"b": _col(c, "batch_size"), "s": _col(c, "isl"), "h": _col(c, "num_heads")}
        p_pre, pre_s = fit_prefill(lambda q, x: form.mla_prefill_time_s(x["b"], x["s"], x["h"], kv_bytes, peak,
                                                                         bandwidth, q),
                                   pre, c["latency_s"].to_numpy())
        dec = {"b": _col(g, "batch_size"), "kv_len": _col(g, "isl") + _col(g, "step"), "h": _col(g, "num_heads")}
        p_dec, dec_s = fit_log(lambda q, x: form.mla_decode_time_s(x["b"], x["kv_len"], x["h"], kv_bytes, peak,
                                                                   bandwidth, p_pre | q),
                               DECODE_PARAMS, dec, g["latency_s"].to_numpy())
        fits.append(Fit(FAMILY, gpu, precision, p_pre | p_dec,
                        np.concatenate([c["latency_s"].to_numpy(), g["latency_s"].to_numpy()]),
                        np.concatenate([pre_s, dec_s]),
                        basis=f"{len(c)} prefill + {len(g)} decode TensorRT-LLM MLA kernels "
                              f"(DeepSeek-V3 dims, kv cache {kv_dtype})"))
    return fits
