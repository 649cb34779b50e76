"""Pipeline schedules (`pp_schedule`): what a schedule adds to the step beyond its micro-batches.

  1f1b      Megatron's one-forward-one-backward schedule, interleaved over vp model chunks per GPU
            when vp > 1 (Narayanan et al. 2021): pp - 1 stages idle for a micro-batch's forward and
            backward (1/vp of it when interleaved) while the pipeline fills and drains, and the
            activation and its gradient cross the pp - 1 stage boundaries on the way.
  dualpipe  DeepSeek-V3's bidirectional schedule (report Sec. 3.2.1, Table 2): micro-batches enter
            from both ends, each GPU holds the stages i and pp-1-i, and a forward and a backward
            chunk run overlapped. Its bubble is (pp/2 - 1)(F&B + B - 3W) for forward F, backward B
            and weight-gradient W chunk times, with F&B = F + B (overlapping hides the exchange, not
            the compute) and W = B/2 (the weight gradients are half of the backward GEMMs): (pp/2 - 1)
            (F + B/2). The price: two copies of the parameters (and their gradients and optimizer
            states) and pp + 1 micro-batches of activations in flight; pp and the micro-batch count
            must be even, with no interleaving.
"""
from __future__ import annotations

import numpy as np

from dse import schema

DUALPIPE = schema.enum_code("pp_schedule", "dualpipe")


def bubble_s(schedule, pp, vp, t_mb, t_bwd, p2p):
    """Seconds the slowest stage idles per step while the pipeline fills and drains; `t_mb` a
    micro-batch's forward + backward on that stage, `t_bwd` its backward, `p2p` one stage-boundary send."""
    one_f_one_b = (pp - 1) * (t_mb / vp + 2 * p2p)
    dual = schedule == DUALPIPE
    if not np.any(dual):
        return one_f_one_b
    dualpipe = np.maximum(pp / 2 - 1, 0.0) * (t_mb - t_bwd / 2 + 2 * p2p)
    return np.where(dual, dualpipe, one_f_one_b)


def state_copies(schedule):
    """Copies of a stage's parameters (and their gradients and optimizer states) one GPU holds."""
    return np.where(schedule == DUALPIPE, 2.0, 1.0)


def inflight_share(schedule, pp):
    """Micro-batches of activations in flight over the 1F1B schedule's pp."""
    return np.where(schedule == DUALPIPE, (pp + 1) / np.maximum(pp, 1), 1.0)


def unschedulable(schedule, pp, vp, microbatches):
    """DualPipe needs an even pp, an even micro-batch count of at least pp, and no interleaving."""
    dual = schedule == DUALPIPE
    if not np.any(dual):
        return np.zeros(np.broadcast(pp, microbatches).shape, dtype=bool)
    odd = (np.mod(pp, 2) != 0) | (np.mod(microbatches, 2) != 0) | (microbatches < pp) | (vp > 1)
    return dual & (pp > 1) & odd
