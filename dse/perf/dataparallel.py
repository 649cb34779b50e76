"""Data parallelism: the model state a GPU holds (weights, gradients, optimizer states under ZeRO
0-3, LoRA adapters) and the data-parallel gradient and parameter collectives of a step, dense and
expert groups apart, with what of them hides behind the backward and forward.
"""
from __future__ import annotations

import numpy as np

from dse.columns import only_where
from dse.perf import adapters as A
from dse.perf import memory as M
from dse.perf.collectives import Network, Placement
from dse.workload import Model


def expert_dp(tp, cp, dp, ep, etp):
    """Ranks holding the same expert shard: a stage's tp x cp x dp ranks over etp x ep."""
    return np.maximum(tp * cp * dp / (ep * etp), 1.0)


def model_state(m, w, tp, pp, dp, cp, ep, etp):
    """((dense, expert) parameters, (dense, expert) trained parameters, weights, grads, optimizer)
    bytes per GPU: with LoRA the base weights are frozen and only the adapters train."""
    dense_params, expert_params = M.parameters_per_gpu(m, tp, pp, ep, etp)
    layer_full = (m.mixer_params + m.dense_mlp_params) / tp
    weights, grads, optimizer = M.model_state_bytes(dense_params, expert_params, w["zero"], dp * cp,
                                                    expert_dp(tp, cp, dp, ep, etp), layer_full, w["main_grad_bytes"],
                                                    w["adam_moment_bytes"])
    trained = (dense_params, expert_params)
    lora = A.frozen(w)
    if np.any(lora):
        adapters = A.adapter_params_per_gpu(m, w["adapter_rank"], tp, pp, w["adapter_modules"])
        _, adapter_grads, adapter_optimizer = M.model_state_bytes(adapters, 0.0, w["zero"], dp * cp, 1.0, 0.0,
                                                                  w["main_grad_bytes"], w["adam_moment_bytes"])
        grads, optimizer = np.where(lora, adapter_grads, grads), np.where(lora, adapter_optimizer, optimizer)
        trained = (np.where(lora, adapters, dense_params), np.where(lora, 0.0, expert_params))
    return (dense_params, expert_params), trained, weights, grads, optimizer


def expert_only(moe, seconds, like):
    """An expert collective's time on MoE rows, 0 elsewhere (a zero-byte collective still pays its
    latency), in the dense terms' float type: a row gets the same answer alone as in a mixed block."""
    return np.where(moe, seconds, 0.0).astype(np.result_type(like), copy=False)


def dp_collectives(net, place, m, w, dp, cp, ep, params, n_expert, trained):
    """(reduce-scatter, all-gather, all-reduce) seconds of the data-parallel gradient and parameter
    collectives (dense and expert, the expert group `n_expert` ranks) of one step: the gradients of
    the `trained` parameters, the `params` gathered. Expert collectives only on MoE rows (a dense row
    in a block with MoE rows sends no zero-byte collective)."""
    dense_params, expert_params = params
    zero, moe = w["zero"], m.is_moe
    n_dense = dp * cp
    # the gradients are reduced in the main-gradient buffer's format
    grad_dense, grad_expert = trained[0] * w["main_grad_bytes"], trained[1] * w["main_grad_bytes"]
    param_dense, param_expert = dense_params * M.WEIGHT_BYTES, expert_params * M.WEIGHT_BYTES
    d_in, e_in = place.dense_dp_in, place.expert_dp_in
    sharded = zero >= 1
    rs = only_where(sharded, lambda: net.reduce_scatter_s(n_dense, d_in, grad_dense)
                     + only_where(moe, lambda: expert_only(moe, net.reduce_scatter_s(n_expert, e_in, grad_expert), grad_dense)))
    ag = only_where(sharded, lambda: net.all_gather_s(n_dense, d_in, param_dense)
                     + only_where(moe, lambda: expert_only(moe, net.all_gather_s(n_expert, e_in, param_expert), grad_dense)))
    ar = only_where(~sharded, lambda: net.all_reduce_s(n_dense, d_in, grad_dense)
                     + only_where(moe, lambda: expert_only(moe, net.all_reduce_s(n_expert, e_in, grad_expert), grad_dense)))
    return rs, ag, ar


# The columns the model state and the data-parallel collectives depend on row by row (besides the
# model and hardware).
STATE_KEYS = ("tp", "pp", "dp", "cp", "ep", "etp", "zero", "topology_code", "dp_hierarchical", "adapter", "adapter_rank", "adapter_modules",
              "main_grad_bytes", "adam_moment_bytes")


class ModelState:
    """model_state (`params`, `trained`, `weights`, `grads`, `optimizer`) and dp_collectives (`rs`, `ag`, `ar`)
    from the block's columns alone: dse.perf.distinct evaluates it once per distinct row of STATE_KEYS."""

    def __init__(self, w):
        m = Model(w)
        tp, pp, dp, cp, ep, etp = (np.maximum(w[k], 1) for k in ("tp", "pp", "dp", "cp", "ep", "etp"))
        self.params, self.trained, self.weights, self.grads, self.optimizer = model_state(m, w, tp, pp, dp, cp, ep, etp)
        place = Placement(w["scaleup_domain"], tp, cp, ep, pp, dp, w["dp_hierarchical"], etp, pp_outermost=True)
        self.rs, self.ag, self.ar = dp_collectives(Network(w), place, m, w, dp, cp, ep, self.params,
                                                   expert_dp(tp, cp, dp, ep, etp), self.trained)


def dp_comm(w, dp, cp, sync: ModelState, microbatches, fwd_mb, bwd_mb, layers_per_stage):
    """Exposed data-parallel communication per step: all-reduce of gradients (ZeRO 0), reduce-scatter
    of gradients and all-gather of parameters (ZeRO 1-3, per micro-batch from ZeRO 2/3), hidden
    behind the backward (gradients) or forward (parameters) except the last layer's bucket."""
    zero, rs, ag, ar = w["zero"], sync.rs, sync.ag, sync.ar
    tail = 1.0 / np.maximum(layers_per_stage, 1)  # the last layer's bucket cannot hide

    def hidden_behind(comm, window):
        return np.where(w["dp_overlap"], np.maximum(comm - window, comm * tail), comm)
    exposed = np.select(
        [zero == 0, zero == 1, zero == 2],
        [hidden_behind(ar, bwd_mb),
         hidden_behind(rs, bwd_mb) + hidden_behind(ag, fwd_mb),
         microbatches * hidden_behind(rs, bwd_mb) + hidden_behind(ag, fwd_mb)],
        microbatches * (hidden_behind(ag, fwd_mb) + hidden_behind(ag + rs, bwd_mb)))
    return np.where(dp * cp > 1, exposed, 0.0)
