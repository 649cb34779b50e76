"""Fit DeepSeek multi-head latent attention (`mla_prefill_time_s`, `mla_decode_time_s` in
`dse.perf.forms.attention`) to TensorRT-LLM's measured MLA kernels (`mla/trtllm/*/context_mla_perf`
and `generation_mla_perf`, DeepSeek-V3 dimensions).

One Fit per GPU and KV-cache precision ("bf16", "fp8"; the MLA math itself is bf16 in the tables),
both phases in one Fit (`prefill_*`, `decode_*`). `num_heads` in the tables is the heads on one GPU
(128 / tp_size); a decode row attends from one new token to `step` cached tokens plus itself.

Decode runs as the form's grouped kernel with one KV head (no per-head kernel, no gate); the fit
chooses its split mode (`decode_split_keys`: XQA-like 128-key splits for Hopper's bf16 cache,
coarse 3000-key splits for Blackwell and Hopper's FP8 cache, none for the A100 tables, whose SM80
path runs one CTA per sequence at about 120 ns per key) and the effective SM count, refitting at a
few SM counts per mode (the tables are small). The MLA tables pin the SM count only loosely
(64-160): it trades off against the per-CTA costs.

Not fitted: the `mla_*_module_perf` tables time the whole DeepSeek-V3 attention module (the q/kv
LoRA down- and up-projections, the absorbed kv_b BMMs, RoPE, norms, o_proj and this kernel), for
bf16, fp8-block and nvfp4 GEMMs. They are a composition of the gemm family's forms and this one;
they belong in a cross-family check once both are fitted, not in a fit of their own.
"""
from __future__ import annotations

import numpy as np

from dse.calibrate import Fit
from dse.calibrate.attention import DECODE_PARAMS as ATTENTION_DECODE_PARAMS
from dse.calibrate.attention import KV_PRECISIONS, fit_decode, fit_prefill, has_units, read_table
from dse.calibrate.tables import KernelData
from dse.perf.forms import attention as form

FAMILY = "mla"
# Every head shares the one latent KV head, so no per-head kernel runs (no `decode_head_*` or
# re-read parameters), and without a sliding window no split is ever empty.
PER_HEAD_ONLY = {"decode_head_floor_s", "decode_head_cta_s", "decode_head_key_s", "decode_reread_fraction",
                 "decode_head_split_s", "decode_empty_split_s"}
DECODE_PARAMS = tuple(p for p in ATTENTION_DECODE_PARAMS if p[0] not in PER_HEAD_ONLY)
# SM counts the decode fit tries for each split mode (the tables are small enough to refit).
SM_REFIT = (64.0, 108.0, 160.0)
# Whether and how finely the kernel splits long KV over several CTAs, chosen by the fit (module
# docstring): like XQA (128 keys), much more coarsely, or not at all.
SPLIT_MODES = ({"decode_split_keys": form.SPLIT_KEYS}, {"decode_split_keys": 3000.0},
               {"decode_split_keys": 0.0, "decode_split_s": 0.0})


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
        terms = lambda x, f: form.decode_shape_terms(
            x["b"], x["kv_len"], x["h"], 1.0, form.MLA_LATENT_DIM, form.MLA_KV_LORA_RANK, 0.0,
            form.MLA_LATENT_DIM * kv_bytes, True, f["decode_sm_count"], split_keys=f["decode_split_keys"], per_head=False)
        combine = lambda t, q, gradient=False: form.decode_from_terms(t, peak, bandwidth, p_pre["prefill_efficiency_max"],
                                                                      q, gradient)
        p_dec, _ = fit_decode(terms, combine, dec, g["latency_s"].to_numpy(), DECODE_PARAMS, SPLIT_MODES, SM_REFIT)
        dec_s = form.mla_decode_time_s(dec["b"], dec["kv_len"], dec["h"], kv_bytes, peak, bandwidth, p_pre | p_dec)
        fits.append(Fit(FAMILY, gpu, precision, p_pre | p_dec,
                        np.concatenate([c["latency_s"].to_numpy(), g["latency_s"].to_numpy()]),
                        np.concatenate([pre_s, dec_s]),
                        basis=f"{len(c)} prefill + {len(g)} decode TensorRT-LLM MLA kernels "
                              f"(DeepSeek-V3 dims, kv cache {kv_dtype})"))
    return fits
