"""Fused attention in training (FlashAttention-class forward and backward kernels, cuDNN's as
Transformer Engine runs them): the fraction of the BF16 peak each pass reaches as a function of
the keys a query visits.

    efficiency(keys) = efficiency_max * keys / (keys + half_keys)

Long causal sequences amortise each query tile's prologue, softmax rescale and epilogue and the
ragged last key tiles; short ones (or short windows) do not. `efficiency_max` is the long-sequence
fraction of the BF16 peak, `half_keys` the keys per query at which a pass reaches half of it.
The forward and the backward (2.5x the forward's FLOPs, recomputing the scores) have their own pair:
the backward's dQ/dK/dV accumulations reach a smaller fraction of the peak.

Heads narrower than 128 reach less. The prefill form's head-size scaling (dse.perf.forms.attention,
fitted on TensorRT-LLM's FMHA kernels) applies to both passes; cuDNN's training-path kernels lose
more on narrow heads (each score's exponential and rescale on the special-function units cost the
same whatever the head size while its tensor-core work shrinks with it; GPT-OSS's 64-wide heads also
carry attention sinks), a further

    head_dim_factor(d) = min(1, [d / (d + head_dim_k)] / [128 / (128 + head_dim_k)])

of the efficiency, 1 from d = 128 up, with its own `head_dim_k` per pass, each fitted on cuDNN's
64-wide heads: the backward's is smaller (fitted 1.5-20 against the forward's 41-54), as it runs five
score-sized matrix products per exponential where the forward runs two. Heads wider than 128 cost
the backward instead (its dQ, dK and dV accumulators of d columns each crowd the registers and shared
memory, so its tiles shrink), a further

    wide_head_factor(d) = min(1, (128 + bwd_wide_head_k) / (d + bwd_wide_head_k))

fitted on DeepSeek-V3's MLA heads (q/k 192, v 128: d = 160), 0.87-0.88 of the 128-wide rate; it
predicts 64-66% for 256-wide heads (Qwen3.5's), where cuDNN's own run measures the backward at
4.3-4.6x the forward against 4.7-4.8x in dse. The forward keeps the prefill form's scaling, which the
same runs bear out. Absorbed latent attention (DeepSeek Sparse Attention's MQA over one 576/512-wide
latent) runs kernels of its own and takes no such term. DeepSeek-V4's 512-wide shared K = V head
(0.36-0.39 of the 128-wide backward rate) is an extrapolation: no kernel measurement that wide exists.

How each parameter carries over to an accelerator derived from technology:
  efficiency_max  a property of the kernel on a tensor-core generation: carries over unchanged.
  half_keys       the fixed work per query tile over the work per key: carries over unchanged
                  within a generation (it is in keys, not seconds).
  head_dim_k      (per pass) a score's non-tensor work in head-size units beyond what the prefill
                  scaling holds (cuDNN's narrow-head tiles, sinks): carries over unchanged within a
                  generation (a projection; fitted 41-54 forward, 1.5-20 backward on Hopper and Blackwell).
  bwd_wide_head_k head-size units of the backward's fixed per-tile work against which wider
                  accumulators cost: carries over unchanged within a generation (87-113 on Blackwell).
"""
from __future__ import annotations

import numpy as np

from dse.catalog.fitted import TRAINING_ATTENTION_PARAMS as PARAMS  # noqa: F401 (the form's parameters)


def efficiency(keys, efficiency_max, half_keys):
    """Fraction of the BF16 peak a training attention pass reaches with `keys` keys per query."""
    keys = np.maximum(np.asarray(keys, dtype=float), 1.0)
    return efficiency_max * keys / (keys + half_keys)


def wide_head_factor(head_dim, wide_head_k):
    """Backward efficiency of heads wider than 128 over that of 128-wide ones: (128 + k) / (d + k),
    1 up to d = 128 and where no fit (NaN)."""
    d = np.asarray(head_dim, dtype=float)
    k = np.asarray(wide_head_k, dtype=float)
    return np.where(np.isfinite(k) & (d > 128.0), (128.0 + np.nan_to_num(k)) / np.maximum(d + np.nan_to_num(k), 1e-9), 1.0)


def head_dim_factor(head_dim, head_dim_k):
    """Efficiency of heads of size `head_dim` over that of 128-wide heads (1 where no fit or d >= 128)."""
    d = np.asarray(head_dim, dtype=float)
    k = np.nan_to_num(np.asarray(head_dim_k, dtype=float), nan=0.0)
    return np.minimum(1.0, (d / (d + k)) * ((128.0 + k) / 128.0))
