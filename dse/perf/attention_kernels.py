"""Serving and inference attention kernels in the forms `dse calibrate` fits to TensorRT-LLM's
measured context and generation attention (dse.perf.forms.attention), at the KV cache's format:
the prefill form (a floor per call, the passes outside the MMAs, the MMAs at the fitted fraction of
the format's peak, a fixed cost per query tile) and the decode kernel form (grouped XQA or per-head
kernel, CTAs in waves, split keys, the KV stream). `r` is the pass's dse.perf.roofline.Rates, whose
`attention_forms` holds the COLUMNS, read per row. MLA keeps the roofline: its kernels have their
own fits."""
from __future__ import annotations

import numpy as np

from dse import catalog
from dse.catalog.fitted import DECODE_FORM_PARAMS, PREFILL_FORM_PARAMS
from dse.perf.forms import attention as A

CAUSAL_SKIP = catalog.constant("causal_skip")

# the forms' hardware columns (dse.catalog.fitted): over a 16-bit KV cache, and over an FP8 one (blank
# where a part has no FP8-cache fit)
COLUMNS = ("peak_fp8_flops_per_s", "attention_fp8_efficiency", "attention_fp8_softmax_dim",
           *(f"attention_{kv}{p}" for kv in ("", "fp8_")
             for p in (*PREFILL_FORM_PARAMS, "prefill_efficiency_max", *DECODE_FORM_PARAMS)))


def _prefill_form_s(op, r, mma_s, peak, efficiency, p: dict, prefix: str):
    """dse.perf.forms.attention.prefill_time_s from the op's MMA seconds `mma_s` (at `efficiency`
    of `peak`): one kernel floor per launch (a serving iteration carries a prompt chunk in a share
    `op.calls` of the iterations), the passes outside the MMAs (the op's bytes) at their fitted share
    of HBM bandwidth, and each query tile's fixed cost beside its MMAs over `span` keys, which
    makes a prompt of span keys per query run at span / (span + span_0) of the long-prompt speed."""
    span = op.n * CAUSAL_SKIP   # keys a query row visits (dse.perf.layer.kernel_keys units)
    span_0 = p[f"{prefix}tile_s"] * peak * efficiency / (2.0 * p[f"{prefix}q_tile_rows"] * op.head_dims)
    moved = op.bytes / (r.bandwidth * p[f"{prefix}memory_efficiency"])
    return p[f"{prefix}floor_s"] * op.calls + moved + mma_s * (1.0 + span_0 / np.maximum(span, 1.0))


def decode_attention_sides_s(op, r, compute, memory):
    """(compute, memory, None) seconds of a serving/inference decode attention op (`op.decode_kv` as
    `op.prefill_kv`) in the fitted decode kernel form (dse.perf.forms.attention.decode_time_s:
    TensorRT-LLM's grouped XQA or per-head kernel, CTAs in waves over the SMs, split keys, the KV
    stream, a floor per call) of the cache's format, all of it on the memory side (the KV stream
    bounds it); MLA keeps the roofline sides."""
    p, kv, d = r.attention_forms, np.asarray(op.decode_kv), op.decode
    # one evaluation: each row takes its cache format's fit (a part without an FP8-cache fit the 16-bit one)
    fp8 = (kv == 2) & np.isfinite(p["attention_fp8_decode_floor_s"]) if np.any(kv == 2) else False
    pick = (lambda name: np.where(fp8, p[f"attention_fp8_{name}"], p[f"attention_{name}"])) if np.any(fp8) \
        else (lambda name: p[f"attention_{name}"])
    grouped = d["shared"] & A.gqa_grouped(d["heads"], d["kv_heads"])
    f32 = lambda x: np.asarray(x, dtype=np.float32)   # noqa: E731  (the form's arrays are the pass's costliest)
    running = np.asarray(d["batch"]) > 0   # a pass without decode sequences runs no kernel (timed at 1, then 0)
    seconds = A.decode_time_s(f32(np.where(running, d["batch"], 1.0)),
                              *(f32(d[k]) for k in ("kv_len", "heads", "kv_heads", "qk_dim", "v_dim")),
                              np.float32(0.0), f32(d["kv_head_bytes_per_token"]), grouped,
                              f32(np.where(fp8, p["peak_fp8_flops_per_s"], r.peak_bf16) * r.clock), f32(r.bandwidth),
                              f32(pick("prefill_efficiency_max")),
                              {name: f32(pick(name)) for name in DECODE_FORM_PARAMS})
    seconds = np.where(running, seconds, 0.0)
    form_rows = kv > 0
    return np.where(form_rows, 0.0, compute), np.where(form_rows, seconds, memory), None


def prefill_attention_s(op, r, pooled_s, efficiency):
    """Seconds of a serving/inference prefill attention op (`op.prefill_kv`: 1 over a 16-bit KV
    cache, 2 over an FP8 one, 0 the pooled efficiency: MLA) in the fitted prefill form at the
    cache's format: TensorRT-LLM's context FMHA runs FP8 MMAs over an FP8 cache (1.2-1.5x the
    16-bit kernel's speed on long prompts in the measured tables), at the FP8 fit's fraction of
    the FP8 peak; a part without an FP8-cache fit takes the 16-bit one. `pooled_s` is the MMA time at
    the 16-bit fit's `efficiency` of the BF16 peak (dse.perf.roofline)."""
    p, kv = r.attention_forms, np.asarray(op.prefill_kv)
    bf16 = _prefill_form_s(op, r, pooled_s, r.peak_bf16, efficiency, p, "attention_")
    out = np.where(kv == 1, bf16, pooled_s)
    if np.any(kv == 2):
        fitted = np.isfinite(p["attention_fp8_efficiency"])
        sd = np.where(fitted, p["attention_fp8_softmax_dim"], 0.0)
        eff = np.where(fitted, p["attention_fp8_efficiency"], 1.0) * A.head_dims_scale(sd, op.head_dims)
        peak = np.where(fitted, p["peak_fp8_flops_per_s"], 1.0)
        fp8 = _prefill_form_s(op, r, op.flops / (peak * r.clock * eff), peak, eff, p, "attention_fp8_")
        out = np.where(kv == 2, np.where(fitted, fp8, bf16), out)
    return np.where(op.flops > 0, out, 0.0)   # a pass without prompt tokens runs no kernel
