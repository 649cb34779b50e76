"""Fused attention in training (FlashAttention-class forward and backward kernels, cuDNN's as
Transformer Engine runs them): the fraction of the BF16 peak each pass reaches as a function of
the keys a query visits.

    efficiency(keys) = efficiency_max * keys / (keys + half_keys)

Long causal sequences amortise each query tile's prologue, softmax rescale and epilogue and the
ragged last key tiles; short ones (or short windows) do not. `efficiency_max` is the long-sequence
fraction of the BF16 peak, `half_keys` the keys per query at which a pass reaches half of it.
The forward and the backward (2.5x the forward's FLOPs, recomputing the scores) have their own pair:
the backward's dQ/dK/dV accumulations reach a smaller fraction of the peak.

How each parameter carries over to an accelerator derived from technology:
  efficiency_max  a property of the kernel on a tensor-core generation: carries over unchanged.
  half_keys       the fixed work per query tile over the work per key: carries over unchanged
                  within a generation (it is in keys, not seconds).
"""
from __future__ import annotations

import numpy as np

from dse.catalog.fitted import TRAINING_ATTENTION_PARAMS as PARAMS  # noqa: F401 (the form's parameters)


def efficiency(keys, efficiency_max, half_keys):
    """Fraction of the BF16 peak a training attention pass reaches with `keys` keys per query."""
    keys = np.maximum(np.asarray(keys, dtype=float), 1.0)
    return efficiency_max * keys / (keys + half_keys)
