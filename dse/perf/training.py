"""Training step time, memory and feasibility for N design points at once (no loop over rows).

One step = m micro-batches through a pipeline of p stages (1F1B, or interleaved with vp model
chunks per GPU), then the data-parallel gradient synchronisation and the optimizer update:

    step = m * t_mb + bubble + pp_comm + dp_comm (exposed) + optimizer
    bubble = (p - 1) / vp * t_mb
    t_mb = the slowest stage's forward + backward (+ recompute) time for one micro-batch,
           including the exposed tensor-, context- and expert-parallel communication

Placement (see dse.perf.collectives): TP innermost, then CP, then EP, then PP, DP outermost.
EP is carved out of DP (ep divides dp), as in Megatron-Core: expert weights are sharded over
ep x tp, dense weights replicated over dp.
"""
from __future__ import annotations

import numpy as np

from dse import columns as C
from dse.perf import memory as M
from dse.perf import roofline as R
from dse.perf.collectives import Network, ranks_per_domain
from dse.workload import Model

# Reasons a design point is infeasible (index = code; 0 = feasible). First failing check wins.
REASONS = np.array([
    "",
    "tp*pp*dp*cp != gpus: the split must multiply out to the GPU count (tp*pp*cp must divide gpus)",
    "tp must divide heads",
    "tp must divide kv_heads or be a multiple of it",
    "pp*vp must divide layers",
    "dp*micro_batch must divide global_batch",
    "ep must divide dp (experts are sharded inside the data-parallel group)",
    "ep must divide experts",
    "cp must divide seq_len",
    "ep > 1 needs a mixture-of-experts model",
    "degrees must be positive integers",
    "out of memory: weights + gradients + optimizer + activations exceed the GPU's memory",
], dtype=object)
OOM = 11

# Bytes of memory traffic per parameter in the optimizer step: read FP32 grad, master weight,
# Adam m and v (16); write master, m, v (12) and the BF16 weight (2); the grad-norm pass (4).
OPTIMIZER_TRAFFIC_BYTES = 34.0
# Memory the framework holds outside the model state and activations: CUDA context, NCCL and
# cuBLAS workspaces, allocator fragmentation (PyTorch + Megatron typically 1.5-3 GiB on 80 GB parts).
RESERVED_BYTES = 2.0 * 2**30
# Fraction of attention-score FLOPs a causal FlashAttention kernel skips (masked tiles).
CAUSAL_SKIP = 0.5
# Dropless MoE: the most loaded expert (and the rank receiving most tokens) sets the pace. Ratio
# of the busiest expert's load to the mean, an input column (`moe_imbalance`) with this default:
# auxiliary-loss-balanced routers keep it near 1.1-1.3 (Fedus et al. 2022, Switch Transformer
# Sec. 2.2; DeepSeek-V3 Sec. 2.1.2); the DGX Cloud Grok-1 rows, the only MoE training
# measurements in dse/validation, agree with about 1.25.
MOE_IMBALANCE = 1.25
# FlashAttention backward recomputes the scores: 2.5x the forward FLOPs (Dao 2023, Sec. 3.1).
FLASH_BACKWARD_FACTOR = 2.5


def evaluate_training(frame):
    """Add training results to every row of `frame` (DataFrame or mapping of arrays).

    See DESIGN.md for the input columns; outputs are listed in `OUTPUT_COLUMNS`.
    """
    cols, n = C.to_columns(frame)
    work = dict(cols)
    C.resolve_model(work)
    C.resolve_hardware(work)
    inputs = normalized_inputs(work, n)
    with np.errstate(divide="ignore", invalid="ignore"):  # infeasible rows may divide by zero
        out = C.blockwise(training_columns, inputs, n)
    code = out.pop("reason_code")
    hw_bad, out["infeasible_reason"] = C.hardware_reasons(work, code == 0, REASONS[code])
    out["fits"] = out["fits"] & ~hw_bad  # derived accelerators may be impossible to build
    from dse.hardware import workload_costs  # cost columns: capex, energy, cost per run / per Mtoken
    out.update(workload_costs(work, out["step_time_s"], out["tokens_per_step"], inputs["gpus"]))
    return C.pack(frame, out)


def normalized_inputs(work: dict, n: int) -> dict:
    """Every input the model reads as a numeric array (enums as codes, defaults filled), once
    for the whole batch, so the row blocks only do arithmetic."""
    gpus, tp, pp, dp, cp, ep, vp, micro_batch, global_batch = _degrees(work, n)
    numeric = {k: work[k].astype(C.MODEL_FLOAT) if isinstance(work[k], C.CatalogColumn)
               else np.asarray(work[k], dtype=C.MODEL_FLOAT) for k in C.MODEL_COLUMNS + C.HARDWARE_COLUMNS}
    degrees = dict(gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=vp, micro_batch=micro_batch,
                   global_batch=global_batch, zero=C.as_float(work, "zero", 0),
                   moe_imbalance=C.as_float(work, "moe_imbalance", MOE_IMBALANCE))
    numeric.update({k: v.astype(C.MODEL_FLOAT) for k, v in degrees.items()})
    numeric.update(
        precision=C.enum_codes(work, "precision", "bf16"),
        recompute=C.enum_codes(work, "recompute", "none"),
        # Sequence parallelism is on with TP unless said otherwise (Megatron-Core and NeMo recipes).
        sp=C.as_bool(work, "sp", False) if "sp" in work else tp > 1,
        flash_attention=C.as_bool(work, "flash_attention", True),
        dp_overlap=C.as_bool(work, "dp_overlap", True),
        tp_overlap=C.as_bool(work, "tp_overlap", False),
        dp_hierarchical=C.as_bool(work, "dp_hierarchical", True),
        topology_code=C.enum_codes(work, "topology", "fat-tree"),
    )
    return numeric


OUTPUT_COLUMNS = (
    "step_time_s", "tokens_per_s", "mfu", "hfu", "mem_per_gpu_bytes", "fits", "infeasible_reason",
    "compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s",
    "bubble_s", "optimizer_s", "weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes",
    "model_flops_per_step", "hardware_flops_per_step", "params", "tokens_per_step",
    # economics (dse.hardware.economics): capex, energy per step, cost per run / per Mtoken
    "accelerator_cost_usd", "system_capex_usd", "energy_j", "cost_per_run_usd", "cost_per_million_tokens_usd",
)


def _degrees(work, n):
    """Parallel degrees and batch sizes; dp from gpus (or gpus from dp) when one is missing."""
    f = lambda k, d: C.as_float(work, k, d)  # noqa: E731
    tp, pp, cp, ep, vp = f("tp", 1), f("pp", 1), f("cp", 1), f("ep", 1), f("vp", 1)
    if "dp" in work:
        dp = f("dp", 1)
        gpus = f("gpus", np.nan)
        gpus = np.where(np.isnan(gpus), tp * pp * dp * cp, gpus)
    else:
        gpus = f("gpus", np.nan)
        if np.isnan(gpus).any():
            raise C.ConfigError("gpus: missing; give `gpus` or `dp`")
        dp = gpus / (tp * pp * cp)
    micro_batch = f("micro_batch", 1)
    global_batch = f("global_batch", np.nan)
    global_batch = np.where(np.isnan(global_batch), dp * micro_batch, global_batch)
    return gpus, tp, pp, dp, cp, ep, vp, micro_batch, global_batch


def _reason_codes(m, gpus, tp, pp, dp, cp, ep, vp, micro_batch, global_batch):
    divides = C.divides
    checks = [
        (np.abs(tp * pp * dp * cp - gpus) > 0.5) | (np.floor(dp) != dp),
        ~divides(tp, m.heads),
        ~(divides(tp, m.kv_heads) | divides(m.kv_heads, tp)),
        ~divides(pp * vp, m.layers),
        ~divides(dp * micro_batch, global_batch),
        ~divides(ep, dp),
        m.is_moe & ~divides(ep, m.experts),
        ~divides(cp, m.seq_len),
        (ep > 1) & ~m.is_moe,
    ]
    return C.first_failure(checks, C.not_positive_integers(tp, pp, cp, ep, vp, micro_batch, global_batch), 10)


def _only_where(mask, compute, otherwise=C.MODEL_FLOAT(0.0)):
    """compute() if any row of the block needs it, else a constant: whole branches (MoE, CP,
    unfused attention, ...) cost nothing in blocks that have no such rows."""
    return compute() if np.any(mask) else otherwise


def training_columns(work: dict) -> dict:
    m = Model(work)
    gpus, tp, pp, dp, cp, ep, vp, b, global_batch = (work[k] for k in (
        "gpus", "tp", "pp", "dp", "cp", "ep", "vp", "micro_batch", "global_batch"))
    reason = _reason_codes(m, gpus, tp, pp, dp, cp, ep, vp, b, global_batch)
    # Keep the arithmetic finite on infeasible rows; they are flagged, not dropped.
    tp, pp, dp, cp, ep, vp, b = (np.maximum(x, 1) for x in (tp, pp, dp, cp, ep, vp, b))
    microbatches = np.maximum(global_batch / (dp * b), 1)

    precision, recompute, zero, sp = work["precision"], work["recompute"], work["zero"], work["sp"]
    flash, dp_overlap, tp_overlap = work["flash_attention"], work["dp_overlap"], work["tp_overlap"]

    hw = {k: work[k] for k in C.HARDWARE_COLUMNS}
    peak_bf16 = hw["peak_bf16_flops_per_s"]
    peak_gemm = R.gemm_peak_flops_per_s(precision, hw)
    operand = C.GEMM_OPERAND_BYTES[precision]
    bw, mem_eff = hw["memory_bandwidth_bytes_per_s"], hw["memory_efficiency"]
    eff_max, half = hw["gemm_efficiency_max"], hw["gemm_half_dim"]
    net = Network(work)
    domain = hw["scaleup_domain"]

    def gemm(mm, nn, kk, count=1.0, peak=peak_gemm, ob=operand):
        return R.gemm_time_s(mm, nn, kk, count, ob, peak, bw, eff_max, half, mem_eff)

    def stream(nbytes):
        return R.stream_time_s(nbytes, bw, mem_eff)

    h, s = m.hidden, m.seq_len
    tokens = b * s / cp                       # tokens of one micro-batch on one GPU
    moe_fraction = np.where(m.layers > 0, m.moe_layers / m.layers, 0.0)
    rep_div = np.where(sp, tp, 1.0)           # replicated activations are split by SP

    # ---- forward GEMMs of one layer (dense MLP and MoE layers weighted by their share) ----
    up_mats = m.mlp_mats - 1
    attn_proj = gemm(tokens, (m.q_dim + 2 * m.kv_dim) / tp, h) + gemm(tokens, h, m.q_dim / tp)
    dense_mlp = gemm(tokens, up_mats * m.ffn / tp, h) + gemm(tokens, h, m.ffn / tp)
    local_experts = np.maximum(m.experts / ep, 1)
    expert_tokens = tokens * m.top_k / local_experts
    imbalance = work["moe_imbalance"]
    moe_mlp = _only_where(m.is_moe, lambda: (
        imbalance * (gemm(expert_tokens, up_mats * m.moe_ffn / tp, h, local_experts)
                     + gemm(expert_tokens, h, m.moe_ffn / tp, local_experts))
        + gemm(tokens, up_mats * m.shared_experts * m.moe_ffn / tp, h)
        + gemm(tokens, h, m.shared_experts * m.moe_ffn / tp)
        + gemm(tokens, m.experts, h, peak=peak_bf16, ob=2.0)))
    mlp = (1 - moe_fraction) * dense_mlp + moe_fraction * moe_mlp
    gemm_fwd = attn_proj + mlp

    # ---- attention core: unfused (scores GEMM, softmax, dropout, x V) or FlashAttention ----
    heads_local = m.heads / tp
    q_len = s / cp
    drop = m.dropout.astype(h.dtype)
    unfused = _only_where(~flash, lambda: (
        gemm(q_len, s, m.head_dim, b * heads_local, peak=peak_bf16, ob=2.0)
        + gemm(q_len, m.head_dim, s, b * heads_local, peak=peak_bf16, ob=2.0)
        + stream(b * heads_local * q_len * s * (4.0 + 5.0 * drop))))
    flash_flops = 4.0 * b * heads_local * q_len * s * m.head_dim * CAUSAL_SKIP
    flash_bytes = tokens * (2 * m.q_dim + 2 * m.kv_dim) / tp * M.ACT_BYTES
    flash_fwd = R.fused_attention_time_s(flash_flops, flash_bytes, peak_bf16, bw,
                                         hw["attention_efficiency"], mem_eff)
    attn_fwd = np.where(flash, flash_fwd, unfused)
    attn_bwd = np.where(flash, FLASH_BACKWARD_FACTOR * attn_fwd, 2.0 * attn_fwd)

    # ---- memory-bound elementwise kernels (norms, residuals, dropout, activation, FP8 casts) ----
    act_ffn = 2 * m.mlp_mats  # GeLU: read f, write f; gated: read 2f, write f (x 2 bytes)
    act_traffic = ((1 - moe_fraction) * act_ffn * m.ffn
                   + moe_fraction * act_ffn * m.moe_ffn * (m.top_k + m.shared_experts)) / tp
    residual_traffic = (8.0 + 12.0 + 2.0 * drop) * h / rep_div
    cast_traffic = np.where(precision > 0, 3.0 * (2 * h / rep_div + (m.q_dim + m.ffn) / tp), 0.0)
    elementwise_fwd = stream(tokens * (act_traffic + residual_traffic + cast_traffic))

    # ---- tensor-parallel communication (2 all-reduces, or 2 all-gathers + 2 reduce-scatters) ----
    tp_in = ranks_per_domain(tp, 1, domain)
    act_msg = tokens * h * M.ACT_BYTES
    all_gather = _only_where(tp > 1, lambda: net.all_gather_s(tp, tp_in, act_msg))
    tp_fwd = np.where(sp, 2 * (all_gather + _only_where(sp & (tp > 1), lambda: net.reduce_scatter_s(tp, tp_in, act_msg))),
                      _only_where(~sp & (tp > 1), lambda: 2 * net.all_reduce_s(tp, tp_in, act_msg)))
    # With SP the GEMM inputs are stored sharded, so the backward all-gathers them again for the
    # weight gradients (Korthikanti et al. 2022, Sec. 4.2.2): two more all-gathers.
    tp_bwd = tp_fwd + np.where(sp, 2 * all_gather, 0.0)
    # Overlapped TP (ring-exchange split into tp chunks): the first chunk is never hidden.
    tp_fwd_exposed = np.where(tp_overlap, np.maximum(tp_fwd - gemm_fwd, tp_fwd / tp), tp_fwd)
    tp_bwd_exposed = np.where(tp_overlap, np.maximum(tp_bwd - 2 * gemm_fwd, tp_bwd / tp), tp_bwd)

    # ---- expert-parallel all-to-all: dispatch + combine per MoE layer ----
    ep_in = ranks_per_domain(ep, tp * cp, domain)
    dispatch_msg = tokens * m.top_k * h * M.ACT_BYTES / rep_div
    ep_fwd = _only_where(ep > 1, lambda: moe_fraction * 2 * net.all_to_all_s(ep, ep_in, dispatch_msg * imbalance))

    # ---- context parallelism: ring attention passes K and V around, overlapped with attention ----
    kv_msg = tokens * 2 * m.kv_dim / tp * M.ACT_BYTES
    cp_ring = _only_where(cp > 1, lambda: (cp - 1) * net.p2p_s(tp, kv_msg))
    cp_fwd = np.where(cp > 1, np.maximum(cp_ring - attn_fwd, 0.0), 0.0)
    cp_bwd = np.where(cp > 1, np.maximum(2 * cp_ring - attn_bwd, 0.0), 0.0)

    # ---- one layer, one micro-batch ----
    compute_fwd = gemm_fwd + attn_fwd + elementwise_fwd
    compute_bwd = 2 * gemm_fwd + attn_bwd + 2 * elementwise_fwd
    comm_fwd_tp, comm_fwd_cp, comm_fwd_ep = tp_fwd_exposed, cp_fwd, ep_fwd
    full = recompute == 2
    selective = recompute == 1
    recompute_layer = np.where(full, compute_fwd, np.where(selective & ~flash, attn_fwd, 0.0))
    tp_layer = tp_fwd_exposed + tp_bwd_exposed + np.where(full, comm_fwd_tp, 0.0)
    ep_layer = 2 * ep_fwd + np.where(full, comm_fwd_ep, 0.0)
    cp_layer = comm_fwd_cp + cp_bwd + np.where(full, comm_fwd_cp, 0.0)

    # ---- logits and loss (last stage) ----
    logits = gemm(tokens, m.vocab / tp, h, peak=peak_bf16, ob=2.0)
    loss_traffic = stream(tokens * m.vocab / tp * 4.0 * 3.0)  # FP32 logits: write, softmax read/write
    head_compute = 3 * logits + 2 * loss_traffic

    layers_per_stage = m.layers / pp
    stage_compute = layers_per_stage * (compute_fwd + compute_bwd) + head_compute
    stage_recompute = layers_per_stage * recompute_layer
    stage_tp, stage_cp, stage_ep = layers_per_stage * tp_layer, layers_per_stage * cp_layer, layers_per_stage * ep_layer
    t_mb = stage_compute + stage_recompute + stage_tp + stage_cp + stage_ep

    # ---- pipeline: bubble and point-to-point ----
    # Scatter-gather optimisation (Narayanan et al. 2021, Sec. 4.1): each TP rank sends 1/tp of
    # the boundary activation and the receiver all-gathers it over the scale-up links.
    pp_stride = tp * cp * ep
    p2p = _only_where(pp > 1, lambda: net.p2p_s(pp_stride, act_msg / tp) + np.where(sp, 0.0, all_gather))
    pp_comm = np.where(pp > 1, 2 * vp * microbatches * p2p, 0.0)
    bubble = (pp - 1) / vp * t_mb

    # ---- memory ----
    dense_params, expert_params = M.parameters_per_gpu(m, tp, pp, ep)
    dp_dense = dp * cp
    dp_expert = np.maximum(dp / ep, 1) * cp
    layer_full = (m.attention_params + m.dense_mlp_params) / tp
    weights, grads, optimizer = M.model_state_bytes(dense_params, expert_params, zero, dp_dense, dp_expert, layer_full)
    act_layer = M.activation_bytes_per_layer(m, b, s / cp, tp, sp, recompute, flash, moe_fraction)
    activations = act_layer * M.inflight_layers(m.layers, pp, vp, microbatches)
    activations = activations + np.where(pp == 1, tokens * m.vocab / tp * 4.0, 0.0)  # FP32 logits
    mem = weights + grads + optimizer + activations

    # ---- data parallelism: gradient reduction and parameter gathers, overlapped with compute ----
    # Dense DP group = cp x dp ranks (CP at stride tp, EP ranks at stride tp*cp, outer DP at
    # stride tp*cp*ep*pp); the expert DP group is the outer DP ranks only.
    outer_stride = tp * cp * ep * pp
    # A framework that runs DP collectives as flat rings over all ranks (no reduce-scatter inside
    # the scale-up domain first) sends each GPU's full ring traffic through its own NIC.
    hierarchical = work["dp_hierarchical"]
    dense_in = np.where(hierarchical, ranks_per_domain(cp * ep, tp, domain)
                        * np.where(outer_stride < domain, ranks_per_domain(dp / ep, outer_stride, domain), 1.0), 1.0)
    expert_in = np.where(hierarchical, ranks_per_domain(dp / ep, outer_stride, domain), 1.0)
    n_dense, n_expert = dp_dense, dp / ep
    grad_dense, grad_expert = dense_params * M.GRAD_BYTES, expert_params * M.GRAD_BYTES
    param_dense, param_expert = dense_params * M.WEIGHT_BYTES, expert_params * M.WEIGHT_BYTES
    moe = m.is_moe
    sharded = zero >= 1
    rs = _only_where(sharded, lambda: net.reduce_scatter_s(n_dense, dense_in, grad_dense)
                     + _only_where(moe, lambda: net.reduce_scatter_s(n_expert, expert_in, grad_expert)))
    ag = _only_where(sharded, lambda: net.all_gather_s(n_dense, dense_in, param_dense)
                     + _only_where(moe, lambda: net.all_gather_s(n_expert, expert_in, param_expert)))
    ar = _only_where(~sharded, lambda: net.all_reduce_s(n_dense, dense_in, grad_dense)
                     + _only_where(moe, lambda: net.all_reduce_s(n_expert, expert_in, grad_expert)))
    fwd_mb = layers_per_stage * (compute_fwd + tp_fwd_exposed) + logits
    bwd_mb = t_mb - fwd_mb
    tail = 1.0 / np.maximum(layers_per_stage, 1)  # the last layer's bucket cannot hide
    def hidden_behind(comm, window):
        return np.where(dp_overlap, np.maximum(comm - window, comm * tail), comm)
    dp_comm = np.select(
        [zero == 0, zero == 1, zero == 2],
        [hidden_behind(ar, bwd_mb),
         hidden_behind(rs, bwd_mb) + hidden_behind(ag, fwd_mb),
         microbatches * hidden_behind(rs, bwd_mb) + hidden_behind(ag, fwd_mb)],
        microbatches * (hidden_behind(ag, fwd_mb) + hidden_behind(ag + rs, bwd_mb)))
    dp_comm = np.where(dp * cp > 1, dp_comm, 0.0)

    # ---- optimizer step: memory-bound over the (ZeRO-1+ sharded) parameters ----
    opt_params = (np.where(zero >= 1, dense_params / dp_dense, dense_params)
                  + np.where(zero >= 1, expert_params / dp_expert, expert_params))
    optimizer_s = stream(opt_params * OPTIMIZER_TRAFFIC_BYTES)

    compute_s = microbatches * stage_compute
    recompute_s = microbatches * stage_recompute
    step = (microbatches * t_mb + bubble + pp_comm + dp_comm + optimizer_s)

    # ---- FLOPs, utilisation ----
    tokens_per_step = global_batch * s
    fwd_token = m.forward_flops_per_token(s)
    model_flops = 3 * fwd_token * tokens_per_step
    attn_token = 4.0 * m.layers * m.q_dim * s
    recompute_token = np.where(full, fwd_token - 2 * m.vocab * h, np.where(selective & ~flash, attn_token, 0.0))
    hardware_flops = model_flops + recompute_token * tokens_per_step
    peak_train = np.choose(precision, [peak_bf16, hw["peak_fp8_flops_per_s"], hw["peak_fp4_flops_per_s"]])
    mfu = model_flops / (step * gpus * peak_train)
    hfu = hardware_flops / (step * gpus * peak_train)

    capacity = hw["memory_capacity_bytes"]
    reason = np.where((reason == 0) & (mem + RESERVED_BYTES > capacity), OOM, reason).astype(np.int8)
    fits = reason == 0

    return {
        "step_time_s": step,
        "tokens_per_s": tokens_per_step / step,
        "mfu": mfu,
        "hfu": hfu,
        "mem_per_gpu_bytes": mem,
        "fits": fits,
        "reason_code": reason,
        "compute_s": compute_s,
        "recompute_s": recompute_s,
        "tp_comm_s": microbatches * stage_tp,
        "cp_comm_s": microbatches * stage_cp,
        "ep_comm_s": microbatches * stage_ep,
        "pp_comm_s": pp_comm,
        "dp_comm_s": dp_comm,
        "bubble_s": bubble,
        "optimizer_s": optimizer_s,
        "weights_bytes": weights,
        "grads_bytes": grads,
        "optimizer_bytes": optimizer,
        "activations_bytes": activations,
        "model_flops_per_step": model_flops,
        "hardware_flops_per_step": hardware_flops,
        "params": m.total_params,
        "tokens_per_step": tokens_per_step,
    }
