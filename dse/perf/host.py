"""The host's side of a training step: the CPU time to launch a layer's kernels eagerly (outside CUDA
graphs), and the GPU time lost waiting for it after a synchronisation. Where the host takes longer
than the GPUs, it paces the step (dse.perf.training)."""
import numpy as np

from dse import catalog
from dse.perf import layer as L

K = catalog.constants()


def static_expert_sizes(w):
    """Rows whose routed experts run padded to a fixed capacity, or receive into fixed per-rank
    buffers (moe_rank_capacity_factor: Megatron-Core's static-shape mode, 'CUDA-graph capturable',
    transformer_config.py @d98e8a64dd): their sizes are known before the step, so neither the
    host's sync on the token counts nor its per-expert launches are needed."""
    return ((w["moe_capacity_factor"] > 0) & w["moe_pad_to_capacity"]) | (w["moe_rank_capacity_factor"] > 0)


def host_time(m, w, ep):
    """Host (CPU) time to launch one layer's forward and backward, on average over the layers: the
    eager part of the layer (none of it under CUDA graphs) and the routed experts, which stay eager
    (their token counts change every step), per local expert, unless they are padded to a fixed
    capacity: static shapes, which CUDA graphs capture too."""
    _, moe = L.layer_shares(m)
    eager = np.where(w["cuda_graphs"], 0.0, w["host_layer_s"])
    expert = w["host_expert_s"]
    static = static_expert_sizes(w)
    if np.any(static):
        expert = np.where(w["cuda_graphs"] & static, 0.0, expert)
    return eager + moe * m.experts / ep * expert


def sync_wait_s(m, w, ep, layer, ep_fwd):
    """GPU time lost per layer and micro-batch waiting for the host after a dropless MoE layer's
    forward synchronises the two: its dispatcher needs the token counts on the host (the all-to-all
    splits, the grouped GEMM's per-expert sizes: Megatron-Core's all-to-all dispatcher syncs
    'before_ep_alltoall', the flex dispatcher takes DeepEP's num_recv_tokens_per_expert_list, the
    all-gather one copies tokens_per_expert to the CPU), so the host cannot run ahead across it and the
    GPU then waits while the host launches the local experts' forward, where that takes longer than
    the GPU runs them and their exchange. The forward's share of the per-expert host time is
    `host_expert_forward_share` (one grouped GEMM forward, two backward). No sync where experts run
    padded to a fixed capacity (static sizes) or under the all-to-all overlap schedule (the other
    micro-batch's queued backward keeps the GPU busy)."""
    _, moe = L.layer_shares(m)
    launch = moe * m.experts / ep * w["host_expert_s"] * K["host_expert_forward_share"]
    return np.where(m.is_moe & ~static_expert_sizes(w) & ~w["moe_a2a_overlap"], np.maximum(launch - layer.moe_fwd - ep_fwd, 0.0), 0.0)


def host_chunk_time(m, w):
    """Host time per micro-batch and model chunk, forward and backward, outside the layers: under the
    all-to-all overlap Megatron-Core's combined 1F1B builds, for every micro-batch and chunk, a
    schedule plan of per-layer sub-module callables with their events and stream switches."""
    return np.where(w["moe_a2a_overlap"] & m.is_moe, w["host_chunk_s"], 0.0)
