"""Memory-bound passes over the routed experts' rows that a training framework runs outside the fused
MoE layer (dse.perf.layer.moe_ops): Megatron-Core's per-expert bias and eager clamps (GPT-OSS) and
its all-to-all dispatcher's sort by local expert. Each is one stream op over every routed pair on
the GPU, its bytes per element from dse/catalog/constants.csv."""
import numpy as np

from dse import catalog, schema
from dse.perf.layer import Op, Shape

K = catalog.constants()


def framework_passes(m, w, experts: Shape, moe_share, load, ep) -> list:
    """The passes a row's framework runs on its MoE layers (none where no row has any): GPT-OSS's
    expert bias and clamps where the framework leaves them unfused (Megatron-Core), and the
    all-to-all dispatcher's sort where a GPU holds more than one expert. `load`: the busiest rank's
    routed rows over the mean, times the capacity's token scale."""
    bias = moe_share * m.expert_bias * w["expert_bias_unfused"]
    clamp = moe_share * m.expert_clamp * w["expert_clamp_unfused"]
    all_to_all = w["moe_dispatcher"] == schema.enum_code("moe_dispatcher", "alltoall")
    sort = moe_share * (all_to_all & (m.experts / ep > 1))
    if not (np.any(bias) or np.any(clamp) or np.any(sort)):
        return []
    return [expert_bias_op(m, experts, (bias * load).astype(np.float32)),
            expert_clamp_op(m, experts, (clamp * load).astype(np.float32)),
            expert_sort_op(m, experts, (sort * load).astype(np.float32))]


def expert_bias_op(m, s: Shape, weight) -> Op:
    """The routed experts' down-projection bias where the framework adds it outside the grouped GEMM
    (Megatron-Core: per local expert, weighted by the FP32 routing probability, then concatenated
    and cast back): memory-bound over every routed pair's hidden-wide output, its backward the
    autograd of the same ops (constants expert_bias_fwd_bytes, expert_bias_bwd_bytes). `weight`: the
    MoE share times the busiest rank's load, 0 where the model's experts have no bias or the
    framework fuses it."""
    return _routed_pass("expert_bias", s.tokens * m.top_k, m.expert_width, "expert_bias", weight)


def expert_clamp_op(m, s: Shape, weight) -> Op:
    """A clamped SwiGLU's clamps where the framework runs them apart from the fused activation
    (Megatron-Core: each half of the routed experts' gated hidden layer clamped, then concatenated,
    eagerly): memory-bound over every routed pair's gated hidden layer, its backward the clamps'
    masked gradients (constants expert_clamp_fwd_bytes, expert_clamp_bwd_bytes). `weight`: the MoE
    share times the busiest rank's load, 0 where the experts do not clamp or the framework compiles the
    clamps into the activation (expert_clamp_unfused)."""
    return _routed_pass("expert_clamp", s.tokens * m.top_k, (m.mlp_mats - 1) * m.moe_ffn / s.tp, "expert_clamp", weight)


def expert_sort_op(m, s: Shape, weight) -> Op:
    """The all-to-all dispatcher's sort of the tokens it received by local expert, and the unsort
    before the combine (Megatron-Core sort_chunks_by_idxs; padded capacity copies the same rows in a
    transpose): memory-bound over every routed pair's hidden-wide row (constants expert_sort_fwd_bytes,
    expert_sort_bwd_bytes). `weight`: the MoE share times the busiest rank's load, 0 where another
    dispatcher runs or a GPU holds one expert."""
    return _routed_pass("expert_sort", s.tokens * m.top_k, m.expert_width, "expert_sort", weight)


def _routed_pass(name, pairs, width, constant, weight) -> Op:
    """A memory-bound pass over `width` elements of every routed pair, `<constant>_fwd_bytes` per
    element forward and `<constant>_bwd_bytes` backward (dse/catalog/constants.csv)."""
    forward = K[f"{constant}_fwd_bytes"]
    return Op(name, "elementwise", "stream", pairs, width, 1.0, bytes=pairs * width * forward, weight=weight,
              backward=K[f"{constant}_bwd_bytes"] / forward)
