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

Layouts (`stage_layout`): how the decoder layers and the output head (with any multi-token-
prediction modules) spread over the pp x vp model chunks, as Megatron-Core lays them out:
  even      pp x vp divides the layers: an equal share per stage, the head on the last stage.
  slots     pp x vp divides layers + 2: the embedding and the loss each count as a layer slot
            (account_for_embedding_in_pipeline_split / account_for_loss_in_pipeline_split, as the
            Megatron-Bridge recipes of Qwen3-235B-A22B and Llama 3.1 405B set them): the first and
            last stage hold one layer fewer.
  balanced  otherwise an explicit pipeline_model_parallel_layout balanced around the head, as the
            DeepSeek-V3 and Kimi-K2 recipes write them (pp 16: four layers a stage, one layer with the
            MTP module and the loss on the last).
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


def layout_infeasible(layers, pp, vp):
    """A layout needs a decoder layer, the embedding or the loss in every model chunk."""
    return pp * vp > layers + 2


def stage_layout(layers, pp, vp, per_layer_s, tail_s):
    """(decoder layers on the slowest pipeline stage, 1.0 where that stage also runs the tail else
    0.0, the most decoder layers any stage holds) for per-layer micro-batch time `per_layer_s` and
    output head (+ MTP) time `tail_s`. The most-loaded stage is the one whose host launches take
    longest: the host's time goes by kernels (the head's few aside), not by GPU time."""
    chunks = pp * vp
    even = (np.floor(layers / chunks) * chunks == layers) | (pp <= 1)
    share = layers / pp
    if np.all(even):
        return share, np.ones_like(share), share
    flag = np.result_type(share)   # the tail indicator in the layers' float type, whichever branch
    slots = np.floor((layers + 2) / chunks) * chunks == layers + 2
    # slots: first stage embedding + vp*n - 1 layers, middle ones vp*n, last vp*n - 1 and the head
    n = (layers + 2) / pp
    middle = np.where(pp > 2, n, n - 1)
    slot_tail = (n - 1) * per_layer_s + tail_s >= middle * per_layer_s
    slot_layers = np.where(slot_tail, n - 1, middle)
    if np.all(even | slots):
        return (np.where(even, share, slot_layers).astype(flag),
                np.where(even, 1.0, slot_tail).astype(flag), np.where(even, share, middle).astype(flag))
    # balanced: k layers share the last stage with the tail, the others ceil((layers - k)/(pp - 1))
    others = np.maximum(pp - 1, 1)
    k0 = np.floor((layers - others * tail_s / np.maximum(per_layer_s, 1e-30)) / pp)
    best_t, best_layers, best_tail, best_most = np.inf, layers, 1.0, layers
    for dk in (-1, 0, 1, 2):
        k = np.clip(k0 + dk, 0, layers)
        rest = np.ceil((layers - k) / others - 1e-9)
        last_t, rest_t = k * per_layer_s + tail_s, rest * per_layer_s
        t = np.maximum(last_t, rest_t)
        better = t < best_t
        best_layers = np.where(better, np.where(last_t >= rest_t, k, rest), best_layers)
        best_tail = np.where(better, last_t >= rest_t, best_tail)
        best_most = np.where(better, np.maximum(k, rest), best_most)
        best_t = np.minimum(t, best_t)
    layers_out = np.where(even, share, np.where(slots, slot_layers, best_layers))
    tail_out = np.where(even, 1.0, np.where(slots, slot_tail, best_tail))
    most_out = np.where(even, share, np.where(slots, middle, best_most))
    return layers_out.astype(flag), tail_out.astype(flag), most_out.astype(flag)


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
