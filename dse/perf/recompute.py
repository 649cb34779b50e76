"""Activation recompute: what a layer re-runs in the backward, by recompute mode and module.

  none       nothing.
  full       the whole layer's forward, from its stored input (Megatron-Core 'full', uniform).
  selective  the modules of `recompute_modules` (Megatron-Core --recompute-modules; default
             core_attn). Each frees stored activations (dse.perf.memory.activation_bytes_per_layer)
             and re-runs its forward once in the backward (Megatron-LM d98e8a64dd,
             megatron/core/transformer/transformer_config.py recompute_modules; tensor_parallel/random.py):
    core_attn       the attention core (FlashAttention or the unfused scores, softmax and PV); with
                    fused attention it frees little (Megatron warns), without it the O(s^2) scores;
                    under rematerialisation by name also its output (the out-projection input).
    layernorm       the norms that stand alone (the MoE layers' pre-MLP norm, MLA's input norm; dense
                    layers fuse theirs into the next GEMM, Transformer Engine LayerNormLinear): their
                    outputs, re-run as a norm kernel. Under rematerialisation by name (remat_by_name:
                    XLA's remat policies) every norm stands alone.
    mla_up_proj     MLA's query and KV up-projections: Q, K and V, re-run as the two GEMMs.
    moe_act         the experts' activation output, re-run as one element-wise kernel (and a clamped
                    SwiGLU's eager clamps where the framework runs them apart: expert_clamp).
    mlp             the dense layers' MLP: its hidden activations, re-run as both GEMMs (and their
                    TP communication).
    mlp_up          the dense layers' MLP hidden activations, as mlp, re-run from the up (and gate)
                    projection alone: the down projection's output stays stored (MaxText's remat
                    policies save_dot_except_mlpwi and custom with mlpwo on device).
    shared_experts  the shared experts' hidden activations, re-run as their GEMMs.
    moe             the whole MoE layer: router, dispatch, experts, combine (the expert-parallel
                    exchange runs again: dse.perf.training.ep_exposed).
  op         torchtitan's per-op selective checkpointing (activation_checkpoint mode 'selective',
             selective_ac_option 'op'): inside each layer's forward it saves the outputs of the
             matmuls, attention, reduce-scatters and amax reductions (for low-precision scaling),
             except every second matmul, and re-runs everything else in the backward
             (pytorch/torchtitan e7c0cae, torchtitan/models/llama3/parallelize_llama.py _save_list
             and _custom_policy; same policy at b5bcd76c6, torchtitan/distributed/activation_checkpoint.py
             SelectiveAC). In a GQA layer the matmuls run wq, wk, wv, wo, w1, w3, w2, so wk, wo and w3
             re-run (op_sac_shares); the router gate always re-runs (force_recompute_mm_shapes_by_fqns);
             the routed experts' grouped GEMMs re-run (aten._grouped_mm is in no save list: neither
             torchtitan's nor PyTorch's compute-intensive ops, torch/_functorch/partitioners.py);
             the norms, RoPE, activations and residual adds re-run; the attention core and the
             expert-parallel exchange (all_to_all_single, saved at b5bcd76c6) do not.
"""
from __future__ import annotations

import numpy as np

from dse.perf.layer import Op
from dse.schema import RECOMPUTE_MODULES, module_bit

CORE_ATTN, LAYERNORM, MLA_UP_PROJ, MOE_ACT, MLP, MOE, SHARED_EXPERTS, MLP_UP = (module_bit(n) for n in RECOMPUTE_MODULES)
OP_SAC = 1 << len(RECOMPUTE_MODULES)   # recompute 'op': a policy over ops, not a Megatron module

# the forward ops of the inventory (dse.perf.layer, dse.perf.mixers) each module re-runs
RERUN_OPS = {
    CORE_ATTN: ("attention", "attention_scores", "attention_av", "attention_softmax"),
    MLA_UP_PROJ: ("mla_q_up", "mla_kv_up", "q_up"),   # q_up: a GQA query rank's (DeepSeek-V4, an MLA subclass in Megatron-Core)
    MLP: ("mlp_up_gate", "mlp_down"),
    MLP_UP: ("mlp_up_gate",),
    SHARED_EXPERTS: ("shared_expert_up_gate", "shared_expert_down"),
    MOE_ACT: ("expert_clamp",),
    MOE: ("router", "latent_down", "experts", "latent_up", "expert_bias", "expert_clamp", "expert_sort", "shared_expert_up_gate",
          "shared_expert_down"),
}


def op_sac_shares(m) -> dict:
    """Share of each forward op torchtitan's per-op policy re-runs (op name -> share), the even
    matmuls in a layer's forward order. GQA attention runs wq, wk, wv, wo: of the fused Q/K/V
    projection the K part and the out projection re-run. MLA with a query LoRA (DeepSeek-V3's
    wq_a, wq_b, wkv_a, wkv_b, wo) re-runs its two up projections and leaves the MLP starting on an
    even count. The MLP then runs w1, w3, w2 (gated) or fc1, fc2: after GQA w3 or fc2 re-run, after
    MLA w1 and w2 or fc1; a shared expert likewise (the router gate, always re-run, and the grouped
    GEMMs are not counted). The router, the routed experts, RoPE and the element-wise ops re-run
    whole."""
    mla = np.asarray(m.is_mla, dtype=bool)
    gated = m.mlp_mats > 2
    wk = m.kv_dim / (m.q_dim * (1.0 + m.output_gate) + m.kv_dim + m.v_dim)
    up = np.where(gated, 0.5, np.where(mla, 1.0, 0.0))     # w3 (after GQA) or w1 (after MLA) of two; fc1
    down = np.where(gated, np.where(mla, 1.0, 0.0), np.where(mla, 0.0, 1.0))
    return {"qkv_proj": wk, "attn_out_proj": np.where(mla, 0.0, 1.0), "mla_q_up": 1.0, "mla_kv_up": 1.0,
            "mlp_up_gate": up, "mlp_down": down, "shared_expert_up_gate": up, "shared_expert_down": down,
            "router": 1.0, "experts": 1.0, "rope": 1.0, "elementwise": 1.0}


# the ops op_sac_shares names (a test keeps the two alike)
OP_SAC_NAMES = ("qkv_proj", "attn_out_proj", "mla_q_up", "mla_kv_up", "mlp_up_gate", "mlp_down",
                "shared_expert_up_gate", "shared_expert_down", "router", "experts", "rope", "elementwise")

# the op names any module re-runs: all a layer needs to keep of its forward times and FLOPs
RERUN_NAMES = frozenset([name for names in RERUN_OPS.values() for name in names] + list(OP_SAC_NAMES))


def selected(recompute, modules):
    """The module bits each row re-runs: its recompute_modules under selective recompute, OP_SAC
    under torchtitan's per-op policy, else 0."""
    return np.where(recompute == 1, modules, np.where(recompute == 3, OP_SAC, 0))


def full_share(w, layers, pp, vp):
    """Share of a pipeline stage's layers that full recompute re-runs (0 without it): every layer, or
    under Megatron-Core's block method the first `recompute_layers` of each model chunk, the others
    keeping their activations (megatron/core/recompute.py @d98e8a64dd: the TransformerBlock of a
    chunk checkpoints layer_idx < recompute_num_layers)."""
    chunk = layers / (pp * vp)
    n = w["recompute_layers"]
    return np.where(w["recompute"] == 2, np.where(n > 0, np.minimum(n / chunk, 1.0), 1.0), 0.0)


def modules_on(chosen, bit):
    """Rows whose chosen modules (`selected`) include the module `bit` (False where no row does)."""
    if np.ndim(chosen) and not int(np.bitwise_or.reduce(chosen, axis=None)) & bit:
        return False
    return (chosen & bit) != 0


def recomputed_norms(m, moe_share, by_name=False):
    """Norms per layer layernorm recompute re-runs and frees: those that stand alone (the MoE layers'
    pre-MLP norm, MLA's input norm), or every sub-block's under rematerialisation by name."""
    alone = moe_share + m.attention_fraction * m.is_mla
    return np.where(by_name, m.blocks_per_layer, alone) if np.any(by_name) else alone


def rerun_stream_ops(m, s, experts, moe_share, hidden_split, by_name=False) -> dict:
    """The element-wise kernels layernorm and moe_act re-run, as stream ops of the inventory (16-bit):
    a norm reads and writes the hidden state of the tokens it holds (1/tp of them under sequence
    parallelism); the activation reads the gated pair and writes the hidden layer of every routed
    copy on the GPU (`experts`: the experts' Shape, each expert's FFN split over its tp)."""
    norms = recomputed_norms(m, moe_share, by_name)
    act = experts.tokens * m.top_k * m.mlp_mats * m.moe_ffn / experts.tp * 2.0 * moe_share
    return {LAYERNORM: Op("norm_rerun", "elementwise", "stream", bytes=s.tokens / hidden_split * 4.0 * m.hidden * norms),
            MOE_ACT: Op("moe_act_rerun", "elementwise", "stream", bytes=act)}


def by_module(per_op: dict, streams: dict | None = None, op_shares: dict | None = None) -> dict:
    """Seconds or FLOPs each module re-runs (bit -> value) from a layer's values by op name, plus the
    element-wise kernels of `streams` (bit -> value), and the per-op policy's shares of its ops
    (`op_shares`, op_sac_shares): summed once per distinct layer, not per row."""
    out = {bit: sum(per_op.get(n, 0.0) for n in names) for bit, names in RERUN_OPS.items()}
    if op_shares is not None:
        out[OP_SAC] = sum(share * per_op.get(name, 0.0) for name, share in op_shares.items())
    for bit, value in (streams or {}).items():
        out[bit] = out.get(bit, 0.0) + value
    return out


def _rerun(chosen, per_module: dict):
    """Sum of `per_module` (bit -> seconds or FLOPs) over each row's `chosen` modules; the shared
    experts count once where `moe` re-runs them with the rest of the layer, the up projection once
    where `mlp` re-runs the whole MLP."""
    total = 0.0
    for bit, value in per_module.items():
        on = modules_on(chosen, bit)
        if bit == SHARED_EXPERTS:
            on = on & ~modules_on(chosen, MOE)
        if bit == MLP_UP:
            on = on & ~modules_on(chosen, MLP)
        if np.any(on):
            total = total + np.where(on, value, 0.0)
    return total


def layer_recompute_s(full, chosen, layer, tp_fwd):
    """Seconds one layer re-runs in the backward for one micro-batch, on average over a stage's
    layers (`full`: full_share; `layer`: training.Layer, its rerun_s by module; `chosen`: the rows'
    `selected` modules)."""
    seconds = full * layer.fwd
    if not np.any(chosen):
        return seconds
    seconds = seconds + _rerun(chosen, layer.rerun_s)
    # the dense MLP's TP all-gather and reduce-scatter: one of the layer's two sub-blocks (the
    # all-gather alone, half of it, ahead of a re-run up projection)
    mlp, up = modules_on(chosen, MLP), modules_on(chosen, MLP_UP)
    if not (np.any(mlp) or np.any(up)):
        return seconds
    tp_mlp = tp_fwd * layer.dense_share / layer.blocks
    return seconds + np.where(mlp, tp_mlp, np.where(up, 0.5 * tp_mlp, 0.0))


def layer_recompute_flops(chosen, layer):
    """FLOPs one GPU's layer re-runs per micro-batch under selective recompute (its rerun_flops)."""
    return _rerun(chosen, layer.rerun_flops) if np.any(chosen) else 0.0
