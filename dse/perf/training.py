"""Training step time, memory and feasibility for N design points at once (no loop over rows).

One step = m micro-batches through a pipeline of p stages (1F1B, interleaved with vp model chunks
per GPU, or DualPipe), then the data-parallel gradient synchronisation and the optimizer update:

    step = m * t_mb + bubble + pp_comm + dp_comm (exposed) + optimizer
    bubble = (p - 1)(t_mb / vp + 2 sends); DualPipe's in dse.perf.pipeline
    t_mb = the slowest stage's forward + backward (+ recompute) time for one micro-batch,
           including the exposed tensor-, context- and expert-parallel communication;
    the step is at least the host's time to launch the eager layers (host_wait_s)

LoRA fine-tuning (dse.perf.adapters) drops the frozen layers' weight gradients and their state.

The kernels of a layer come from the op inventory (dse.perf.layer), timed by dse.perf.roofline;
collectives and rank placement from dse.perf.collectives. EP is carved out of DP (ep divides dp),
as in Megatron-Core: expert weights are sharded over ep x tp, dense weights replicated over dp.

`training_columns(work)` takes the normalised inputs (dse.evaluate: every model, hardware, mapping
and setting column as an array; enums as codes) and returns the output columns of one row block.
"""
from __future__ import annotations

import numpy as np

from dse import catalog, schema
from dse.columns import divides, first_failure, not_positive_integers, only_where
from dse.perf import adapters as A
from dse.perf import dataparallel as D
from dse.perf import expert_passes as E
from dse.perf import host as H
from dse.perf import layer as L
from dse.perf import memory as M
from dse.perf import pipeline as P
from dse.perf import mixers as X
from dse.perf import recompute as RE
from dse.perf import roofline as R
from dse.perf import tensorparallel as TP
from dse.perf.distinct import distinct
from dse.catalog.precision import TRAINING_QUANTIZE_BYTES, peak_flops_per_s, unsupported
from dse.perf.collectives import Network, Placement, overlapped_s
from dse.perf.context import cp_a2a_group, cp_comm
from dse.workload import Model

K = catalog.constants()
RC = schema.REASON_CODE


def reason_codes(m, w):
    gpus, tp, pp, dp, cp, ep, vp = (w[k] for k in ("gpus", "tp", "pp", "dp", "cp", "ep", "vp"))
    checks = [
        (RC["split"], (np.abs(tp * pp * dp * cp - gpus) > 0.5) | (np.floor(dp) != dp)),
        (RC["tp_heads"], ~divides(tp, m.heads) | X.recurrent_heads_indivisible(m, tp)),
        (RC["tp_kv_heads"], ~(divides(tp, m.kv_heads) | divides(m.kv_heads, tp))),
        (RC["pp_layers"], P.layout_infeasible(m.layers, pp, vp)),
        (RC["global_batch"], ~divides(dp * w["micro_batch"], w["global_batch"])),
        (RC["ep_dp"], ~divides(ep * w["etp"], tp * cp * dp)),
        (RC["ep_experts"], m.is_moe & ~divides(ep, m.experts)),
        (RC["cp_seq_len"], ~divides(cp, m.seq_len)),
        (RC["cp_heads"], only_where(w["cp_comm"] >= 2, lambda: (w["cp_comm"] >= 2) & ~divides(
            cp_a2a_group(w["scaleup_domain"], cp, tp, w["cp_comm"]), m.heads / tp), False)),
        (RC["ep_dense"], (ep > 1) & ~m.is_moe),
        (RC["interleave_microbatches"], (vp > 1) & (pp > 1) & ~divides(pp, w["global_batch"] / (dp * w["micro_batch"]))),
        (RC["dualpipe"], P.unschedulable(w["pp_schedule"], pp, vp, w["global_batch"] / (dp * w["micro_batch"]))),
        (RC["offload"], (w["offload_layers"] > 0) & ((pp > 1) | (w["recompute"] != 0) | (w["offload_layers"] >= m.layers))),
        (RC["recompute_layers"], (w["recompute_layers"] > 0) & (w["recompute"] != 2)),
        (RC["precision_unsupported"], unsupported(w["precision"], w) | (m.is_moe & unsupported(w["expert_precision"], w))),
    ]
    # a global batch defaulted from a fractional dp is the split's fault, not an invalid input
    invalid = not_positive_integers(tp, pp, cp, ep, vp, w["micro_batch"]) | (
        not_positive_integers(w["global_batch"]) & (np.floor(dp) == dp))
    return first_failure(checks, invalid, RC["not_integer"])


class Layer:
    """Forward and backward seconds of one layer (and of the head) for one micro-batch, by kind.
    `chunks`: (scattered, gathered), the pieces each overlapped TP GEMM runs in (dse.perf.tensorparallel
    overlap_chunks; 1 where TP does not overlap): each piece a GEMM of its own over 1/chunks of the
    tokens, with its own floor and wave quantization."""

    def __init__(self, m, w, rates, tp, ep, cp, b, etp, chunks=(1.0, 1.0)):
        s = L.Shape(seqs=b, q_len=m.seq_len / cp, ctx=m.seq_len, tp=tp, ep=ep)
        # the experts see the TP group's tokens split over tp/etp ranks, each expert over etp
        experts = L.Shape(seqs=b * etp / tp, q_len=m.seq_len / cp, ctx=m.seq_len, tp=etp, ep=ep)
        flash, precision, expert_precision = w["flash_attention"], w["precision"], w["expert_precision"]
        operand, expert_operand = L.GEMM_OPERAND_BYTES[precision], L.GEMM_OPERAND_BYTES[expert_precision]
        dense, moe = L.layer_shares(m)
        hidden_split = np.where(w["sp"], tp, 1.0)
        backward = np.where(flash, np.float32(K["flash_backward_factor"]), np.float32(K["unfused_backward_factor"]))
        ops = X.attention_projection_ops(m, s, operand) + L.mlp_ops(m, s, operand, dense)
        # (busiest expert's load, tokens every expert computes) over the mean, under any capacity
        self.routing = busiest, full = L.routing_load(m, w, ep)
        if np.any(m.is_moe):
            ops += L.moe_ops(m, experts, operand, moe, busiest, token_scale=full, per_expert_gemms=True,
                             expert_operand=expert_operand, expert_gemm_efficiency=w["expert_gemm_efficiency"])
            ops += E.framework_passes(m, w, experts, moe, L.busiest_rank_load(m, busiest, ep) * full, ep)
        ops.append(L.fused_attention_op(m, s, 0.0, flash.astype(np.float32), backward, w["document_tokens"]))
        if np.any(m.has_indexer > 0):
            ops.append(X.indexer_scores_op(m, s, decode=False, fp8_scores=False, training=True))
        ops.append(X.rope_op(m, s, (m.yarn_rope > 0) & w["yarn_rope_unfused"]))
        if not np.all(flash):
            ops += L.unfused_attention_ops(m, s, m.dropout.astype(np.float32), (~flash).astype(np.float32))
        ops += X.recurrent_ops(m, s, operand, decode=False)
        if np.any(A.frozen(w)):
            ops.append(A.adapter_op(m, s, w))
        ops.append(L.elementwise_op(m, s, dense, moe, hidden_split, dropout=m.dropout.astype(np.float32),
                                    quantize_bytes=TRAINING_QUANTIZE_BYTES[precision],
                                    expert_quantize_bytes=TRAINING_QUANTIZE_BYTES[expert_precision]))
        # the linear layers' backward: data gradients, and weight gradients unless frozen (LoRA)
        wgrad_share = A.weight_grad_share(w)
        self.gemm_fwd = self.attn_fwd = self.attn_bwd = self.scan_fwd = self.scan_bwd = self.elementwise_fwd = self.elementwise_bwd = 0.0
        self.moe_fwd = self.moe_bwd = self.gemm_wgrad = self.gemm_dgrad = 0.0
        op_fwd, op_flops = {}, {}   # forward seconds and FLOPs by op name: what selective recompute re-runs
        live_rows = {}
        for op in ops:
            if not np.any(op.weight):
                continue
            if op.timing == "fused":   # training attention: forward and backward kernels of their own
                t, attn_bwd = L.weighted(R.training_attention_s, op, rates, live_rows)
            else:
                t = dgrad = L.weighted(R.op_time_s, op, rates, live_rows)
                if op.kind == "gemm":
                    t, dgrad = TP.gemm_fwd_dgrad_s(op, rates, t, chunks, live_rows)
            if op.name in RE.RERUN_NAMES:
                op_fwd[op.name] = op_fwd.get(op.name, 0.0) + t
                op_flops[op.name] = op_flops.get(op.name, 0.0) + R.op_flops_bytes(op)[0] * op.weight
            if op.timing == "moe":  # its backward: the grouped GEMMs twice, the token streams once
                self.moe_fwd = self.moe_fwd + t
                dgrad, wgrad = L.weighted(R.moe_backward_s, op, rates, live_rows)
                self.moe_bwd = self.moe_bwd + dgrad + wgrad_share * wgrad
            elif op.kind == "gemm":
                self.gemm_fwd = self.gemm_fwd + t
                self.gemm_dgrad = self.gemm_dgrad + dgrad
                self.gemm_wgrad = self.gemm_wgrad + L.weighted(R.wgrad_s, op, rates, live_rows)
            elif op.kind == "attention" and op.timing == "fused":
                self.attn_fwd, self.attn_bwd = self.attn_fwd + t, self.attn_bwd + attn_bwd
            elif op.kind == "attention":   # unfused: two GEMMs per forward GEMM, the softmax twice
                self.attn_fwd = self.attn_fwd + t
                self.attn_bwd = self.attn_bwd + t * 2.0
            elif op.kind == "scan":  # Mamba-2 / Gated DeltaNet chunked scans
                self.scan_fwd = self.scan_fwd + t
                self.scan_bwd = self.scan_bwd + t * op.backward
            else:   # norms, residuals, activations, casts: their backward in units of the forward
                self.elementwise_fwd = self.elementwise_fwd + t
                self.elementwise_bwd = self.elementwise_bwd + t * op.backward
        self.fwd = self.gemm_fwd + self.moe_fwd + self.attn_fwd + self.scan_fwd + self.elementwise_fwd
        self.gemm_bwd = self.gemm_dgrad + wgrad_share * self.gemm_wgrad
        self.bwd = self.gemm_bwd + self.moe_bwd + self.attn_bwd + self.scan_bwd + self.elementwise_bwd
        logits, loss = L.training_head_ops(m, s.tokens, tp)
        self.logits = R.op_time_s(logits, rates)
        self.head = 2 * self.logits + wgrad_share * R.wgrad_s(logits, rates) + 2 * R.op_time_s(loss, rates)
        proj, norms = L.mtp_projection_ops(m, s.tokens, tp)   # an MTP module's projection, forward and backward
        self.mtp_proj = 2 * R.op_time_s(proj, rates) + wgrad_share * R.wgrad_s(proj, rates) + 2 * R.op_time_s(norms, rates)
        self.tokens, self.blocks = s.tokens, m.blocks_per_layer   # sub-blocks per layer (2 in a transformer)
        self.dense_share = dense
        reruns = RE.rerun_stream_ops(m, s, experts, moe, hidden_split, w["remat_by_name"])
        streams = {bit: R.op_time_s(op, rates) for bit, op in reruns.items()}
        shares = RE.op_sac_shares(m)
        self.rerun_s, self.rerun_flops = RE.by_module(op_fwd, streams, shares), RE.by_module(op_flops, None, shares)


def ep_comm(net, place, m, w, ep, tokens, hidden_split, routing):
    """Forward token exchange of one layer (dispatch + combine on MoE layers, by the framework's
    dispatcher, paced by the most loaded rank, or of capacity-sized buffers where experts run full:
    `routing`, Layer.routing); the backward repeats it."""
    _, moe = L.layer_shares(m)
    busiest, full = routing
    row_bytes = m.expert_width * M.ACT_BYTES / hidden_split
    token_bytes = tokens * row_bytes * L.busiest_rank_load(m, busiest, ep) * full
    return only_where(ep > 1, lambda: moe * net.expert_exchange_s(ep, place.ep_in, token_bytes, m.top_k,
                                                                   w["moe_dispatcher"], m.routed_groups,
                                                                   m.group_top_k, row_bytes, m.experts,
                                                                   w["moe_routing"]))


def ep_exposed(w, layer, ep_fwd, full):
    """Exposed expert-parallel communication of one layer per micro-batch (forward, backward and a
    full recompute's forward). With the all-to-all overlapped (Megatron-Core's 1F1B all-to-all
    overlap, DualPipe) a layer's forward of one micro-batch runs beside its backward of another,
    each token exchange beside one compute chunk of the other micro-batch, as Megatron-Core's
    schedule_layer_1f1b pairs them (models/common/model_chunk_schedule_plan.py, d98e8a64dd):

        comm stream:  combine bwd    | dispatch fwd | dispatch bwd | combine fwd
        comp stream:  attention fwd  | experts bwd  | experts fwd  | attention bwd

    An exchange longer than its partner chunk shows by the difference (a chunk cannot lend its
    slack to another exchange: each waits for its data), and the overlapped compute runs slower on
    the SMs the communication kernels hold. The exchanges are taken as equal halves of a layer's
    dispatch + combine; a full recompute's re-run exchange stays exposed."""
    rerun = full * ep_fwd
    comm = 2 * ep_fwd + rerun
    if not np.any(w["moe_a2a_overlap"]):
        return comm
    exchange = ep_fwd / 2.0
    partners = (layer.fwd - layer.moe_fwd, layer.moe_bwd, layer.moe_fwd, layer.bwd - layer.moe_bwd)
    overlapped = sum(overlapped_s(exchange, chunk, K["comm_sm_fraction"]) for chunk in partners) + rerun
    return np.where(w["moe_a2a_overlap"], overlapped, comm)


# The columns a layer's micro-batch times and communication depend on row by row (besides the
# model and hardware).
LAYER_KEYS = ("tp", "ep", "etp", "cp", "micro_batch", "sp", "flash_attention", "attention_fa2", "fp8_attention", "precision", "expert_precision",
              "expert_gemm_efficiency", "moe_imbalance",
              "moe_capacity_factor", "moe_pad_to_capacity", "moe_rank_capacity_factor", "adapter", "adapter_modules", "document_tokens", "remat_by_name",
              "tp_overlap", "tp_overlap_aggregate", "moe_dispatcher", "moe_routing", "cp_comm", "topology_code", "dp_hierarchical", "main_grad_bytes")


class LayerComm:
    """One layer's micro-batch times (`layer`) and its exposed TP, EP and CP communication, from the
    block's columns alone: dse.perf.distinct evaluates it once per distinct row of LAYER_KEYS."""

    def __init__(self, w):
        m = Model(w)
        tp, ep, cp, b, etp = (np.maximum(w[k], 1) for k in ("tp", "ep", "cp", "micro_batch", "etp"))
        rates = R.Rates.of(w, w["precision"], expert_precision=w["expert_precision"], training=True)
        rates.wgrad_output_bytes = 2.0 * w["main_grad_bytes"]   # read and written: accumulated over micro-batches
        if rates.experts is not None:
            rates.experts.wgrad_output_bytes = rates.wgrad_output_bytes
        net = Network(w)
        place = Placement(w["scaleup_domain"], tp, cp, ep, None, None, w["dp_hierarchical"], etp)  # no PP or DP group
        self.layer = layer = Layer(m, w, rates, tp, ep, cp, b, etp, TP.overlap_chunks(w, tp, place.tp_in))
        act_msg = layer.tokens * m.hidden * M.ACT_BYTES
        gather_msg = layer.tokens * m.hidden * L.GEMM_OPERAND_BYTES[w["precision"]]
        self.tp_fwd, self.tp_bwd, self.all_gather = TP.tp_comm(net, place, w, tp, layer, act_msg, gather_msg)
        # a QK-norm over all heads all-reduces its sums of squares forward and their gradients backward
        norms = L.qk_norm_exchange_s(net, place.tp_in, m, tp, layer.tokens)
        self.tp_fwd, self.tp_bwd = self.tp_fwd + norms, self.tp_bwd + norms
        self.ep_fwd = ep_comm(net, place, m, w, ep, layer.tokens, np.where(w["sp"], tp, 1.0), layer.routing)
        self.cp_fwd, self.cp_bwd = cp_comm(net, place, m, w, cp, tp, layer.tokens, layer)


def layer_activation_bytes(m, w, chosen, tp, cp, b, full):
    """Stored activation bytes of one layer for one micro-batch on one GPU, on average over a stage's
    layers: under the block method (`full` below 1) the layers that do not re-run keep all of theirs."""
    _, moe = L.layer_shares(m)
    # FP8 attention saves its FP8 Q, K and V for the backward (Transformer Engine FusedAttnFunc)
    qkv_bytes = np.where(R.fp8_attention_rows(w, w["precision"]), 1.0, 2.0) if np.any(w["fp8_attention"]) else 2.0
    stored = lambda recompute: M.activation_bytes_per_layer(  # noqa: E731
        m, b, m.seq_len / cp, tp, w["sp"], recompute, w["flash_attention"], moe, chosen,
        L.GEMM_OPERAND_BYTES[w["precision"]], L.GEMM_OPERAND_BYTES[w["expert_precision"]], w["remat_by_name"],
        qkv_bytes)
    kept, partial = stored(w["recompute"]), (w["recompute"] == 2) & (full < 1.0)
    mixed = lambda: full * kept + (1.0 - full) * stored(np.zeros_like(w["recompute"]))  # noqa: E731
    return only_where(partial, lambda: np.where(partial, mixed(), kept), kept)


def activations_and_offload(m, w, chosen, tp, pp, cp, vp, b, microbatches, layer, full):
    """(activation bytes per GPU, exposed offload seconds per step): the in-flight micro-batches'
    stored layer activations less what goes to host memory (whole layers, offload_layers; or the
    offload_modules' inputs of every in-flight layer but the last forward one, whose backward comes
    first: Megatron-Core keeps that group on the GPU so the reload does not stall), plus the logits
    on a single stage; and the host-link copies that outlast the layers' compute."""
    act_layer = layer_activation_bytes(m, w, chosen, tp, cp, b, full)
    link = w["host_link_bandwidth_bytes_per_s"] * K["host_link_efficiency"]
    offloading, fine = w["offload_layers"] > 0, w["offload_modules"] != 0
    inflight = M.inflight_layers(m.layers, pp, vp, microbatches)
    resident = only_where(offloading, lambda: inflight - np.minimum(w["offload_layers"], m.layers), inflight)
    offload = only_where(offloading, lambda: microbatches * M.offload_exposed_s(
        w["offload_layers"], act_layer, link, m.layers, layer.fwd, layer.bwd), np.zeros(np.shape(offloading), np.float32))
    stored = act_layer * resident
    if np.any(fine):
        moved = M.offloaded_bytes_per_layer(m, b, m.seq_len / cp, tp, w["sp"], w["recompute"], chosen,
                                            w["offload_modules"], L.layer_shares(m)[1],
                                            L.GEMM_OPERAND_BYTES[w["precision"]], L.GEMM_OPERAND_BYTES[w["expert_precision"]])
        stage = m.layers / pp
        stored = stored - moved * np.maximum(inflight - 1.0, 0.0)
        offload = offload + microbatches * M.offload_exposed_s(stage, moved, link, stage, layer.fwd, layer.bwd)
    return stored + np.where(pp == 1, layer.tokens * m.vocab / tp * M.LOGITS_BYTES, 0.0), offload


def optimizer_step_s(w, state, tp, cp, dp, ep, etp):
    """The optimizer step: its traffic over the parameters this GPU updates (sharded from ZeRO 1)."""
    dense_params, expert_params = state.trained
    sharded = w["zero"] >= 1
    opt_params = (np.where(sharded, dense_params / (dp * cp), dense_params)
                  + np.where(sharded, expert_params / D.expert_dp(tp, cp, dp, ep, etp), expert_params))
    per_param = K["optimizer_traffic_bytes"] + 4.0 * w["adam_moment_bytes"]   # each moment read and written
    return R.stream_time_s(opt_params * per_param, w["memory_bandwidth_bytes_per_s"], w["memory_efficiency"])


def flops_and_utilisation(m, w, hw, step, tokens_per_step, selective_flops, full):
    """(model FLOPs, hardware FLOPs, MFU, HFU) of one step; MFU against the training precision's peak.
    Recompute adds the layers' forward (full) or `selective_flops`, the modules' re-run FLOPs of a step."""
    fwd_token = m.forward_flops_per_token(m.seq_len)
    model_flops = (2 + A.weight_grad_share(w)) * fwd_token * tokens_per_step   # LoRA: no weight gradients
    recompute = np.where(full > 0, full * (fwd_token - 2 * m.vocab * m.hidden) * tokens_per_step, selective_flops)
    hardware_flops = model_flops + recompute
    peak = peak_flops_per_s(w["precision"], hw)
    return model_flops, hardware_flops, model_flops / (step * w["gpus"] * peak), hardware_flops / (step * w["gpus"] * peak)


class SlowestStage:
    """One micro-batch's forward and backward on the slowest pipeline stage under Megatron-Core's
    layout (dse.perf.pipeline.stage_layout), by term: compute, recompute, exposed TP, CP and EP
    communication, and the GPU's wait for the host after MoE syncs. The output head and the
    multi-token-prediction modules sit on the last stage; an MTP module is a transformer layer (a
    mixer block and an MLP/MoE block: two of a hybrid's one-block layers, Nemotron 3's "*E"), with
    its recompute and communication, and an output head."""

    def __init__(self, m, w, comm, full, chosen, ep, pp, vp):
        layer, tp_fwd, tp_bwd, cp_fwd, cp_bwd = comm.layer, comm.tp_fwd, comm.tp_bwd, comm.cp_fwd, comm.cp_bwd
        recompute_layer = RE.layer_recompute_s(full, chosen, layer, tp_fwd)
        moe_rerun = np.maximum(full, RE.modules_on(chosen, RE.MOE))   # re-runs the exchange and its host sync
        ep_layer = ep_exposed(w, layer, comm.ep_fwd, moe_rerun)
        sync_layer = (1.0 + moe_rerun) * H.sync_wait_s(m, w, ep, layer, comm.ep_fwd)
        tp_layer = tp_fwd + tp_bwd + full * tp_fwd
        cp_layer = cp_fwd + cp_bwd + full * cp_fwd
        per_layer = layer.fwd + layer.bwd + recompute_layer + tp_layer + cp_layer + ep_layer + sync_layer
        mtp = w["mtp_layers"] * 2.0 / np.maximum(m.blocks_per_layer, 1e-6)
        heads = (1.0 + w["mtp_layers"]) * layer.head + w["mtp_layers"] * layer.mtp_proj
        self.layers, on_last, self.most_layers = P.stage_layout(m.layers, pp, vp, per_layer, heads + mtp * per_layer)
        decoder = self.layers + on_last * mtp   # the transformer layers the slowest stage runs
        self.compute = decoder * (layer.fwd + layer.bwd) + on_last * heads
        self.recompute, self.tp, self.cp = decoder * recompute_layer, decoder * tp_layer, decoder * cp_layer
        self.ep, self.sync = decoder * ep_layer, decoder * sync_layer


def training_columns(w: dict) -> dict:
    m = Model(w)
    reason = reason_codes(m, w)
    # Keep the arithmetic finite on infeasible rows; they are flagged, not dropped.
    tp, pp, dp, cp, ep, vp, b, etp = (np.maximum(w[k], 1) for k in ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch", "etp"))
    microbatches = np.maximum(w["global_batch"] / (dp * b), 1)
    hw = w  # a Block: hardware columns are read (and expanded) where a formula uses them
    net = Network(w)
    place = Placement(hw["scaleup_domain"], tp, cp, ep, pp, dp, w["dp_hierarchical"], etp, pp_outermost=True)
    comm = distinct(LayerComm, w, LAYER_KEYS)
    layer, tp_fwd, all_gather = comm.layer, comm.tp_fwd, comm.all_gather
    act_msg = layer.tokens * m.hidden * M.ACT_BYTES

    full = RE.full_share(w, m.layers, pp, vp)   # the share of a stage's layers full recompute re-runs
    chosen = RE.selected(w["recompute"], w["recompute_modules"])   # selective recompute's module bits
    stage = SlowestStage(m, w, comm, full, chosen, ep, pp, vp)
    layers_per_stage = stage.layers
    t_mb = stage.compute + stage.recompute + stage.tp + stage.cp + stage.ep + stage.sync

    # Pipeline: scatter-gather sends (Narayanan et al. 2021, Sec. 4.1): each TP rank sends 1/tp of
    # the boundary activation and the receiver all-gathers it over the scale-up links.
    p2p = only_where(pp > 1, lambda: net.p2p_s(place.pp_stride, act_msg / tp) + np.where(w["sp"], 0.0, all_gather))
    pp_comm = np.where(pp > 1, 2 * vp * microbatches * p2p, 0.0)
    # Fill and drain: pp - 1 stages idle for a micro-batch's forward and backward (1/vp of it when
    # interleaved), and the activation and its gradient cross the pp - 1 stage boundaries on the way.
    bubble = P.bubble_s(w["pp_schedule"], pp, vp, t_mb, layers_per_stage * layer.bwd, p2p)

    state = distinct(D.ModelState, w, D.STATE_KEYS)
    weights, grads, optimizer = state.weights, state.grads, state.optimizer
    activations, offload = activations_and_offload(m, w, chosen, tp, pp, cp, vp, b, microbatches, layer, full)
    if np.any(w["pp_schedule"] == P.DUALPIPE):   # two stages' parameters, one more micro-batch in flight
        copies = P.state_copies(w["pp_schedule"])
        weights, grads, optimizer = weights * copies, grads * copies, optimizer * copies
        activations = activations * P.inflight_share(w["pp_schedule"], pp)
    mem = weights + grads + optimizer + activations
    fwd_mb = layers_per_stage * (layer.fwd + tp_fwd) + layer.logits
    dp_s = D.dp_comm(w, dp, cp, state, microbatches, fwd_mb, t_mb - fwd_mb, layers_per_stage)
    optimizer_s = optimizer_step_s(w, state, tp, cp, dp, ep, etp)
    gpu_step = microbatches * t_mb + bubble + pp_comm + dp_s + optimizer_s + offload
    # The host launches every kernel: where that takes longer than the GPUs run them (small
    # micro-batches of fine-grained MoE layers, eager), the host paces every micro-batch and bubble.
    # Its slowest stage is the one with the most layers, whichever stage the GPUs find slowest.
    host_mb = stage.most_layers * H.host_time(m, w, ep) + vp * H.host_chunk_time(m, w)
    host_step = (microbatches + (pp - 1) / vp) * host_mb + optimizer_s
    step = np.maximum(gpu_step, host_step)

    tokens_per_step = w["global_batch"] * m.seq_len
    model_flops, hardware_flops, mfu, hfu = flops_and_utilisation(
        m, w, hw, step, tokens_per_step, RE.layer_recompute_flops(chosen, layer) * m.layers * microbatches * w["gpus"] / pp, full)
    oom = (reason == 0) & (mem + K["reserved_bytes"] > hw["memory_capacity_bytes"])
    reason = np.where(oom, RC["out_of_memory"], reason).astype(np.int8)
    return {
        "step_time_s": step, "tokens_per_s": tokens_per_step / step, "mfu": mfu, "hfu": hfu,
        "mem_per_gpu_bytes": mem, "fits": reason == 0, "infeasible_code": reason,
        "compute_s": microbatches * stage.compute, "recompute_s": microbatches * stage.recompute,
        "tp_comm_s": microbatches * stage.tp, "cp_comm_s": microbatches * stage.cp,
        "ep_comm_s": microbatches * stage.ep, "host_wait_s": step - gpu_step + microbatches * stage.sync, "offload_s": offload, "pp_comm_s": pp_comm,
        "dp_comm_s": dp_s, "bubble_s": bubble,
        "optimizer_s": optimizer_s, "weights_bytes": weights, "grads_bytes": grads,
        "optimizer_bytes": optimizer, "activations_bytes": activations,
        "model_flops_per_step": model_flops, "hardware_flops_per_step": hardware_flops,
        "params": m.total_params, "tokens_per_step": tokens_per_step,
    }


OUTPUT_COLUMNS = (
    "step_time_s", "tokens_per_s", "mfu", "hfu", "mem_per_gpu_bytes", "fits", "infeasible_code",
    "infeasible_reason", "compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "host_wait_s", "offload_s", "pp_comm_s",
    "dp_comm_s", "bubble_s", "optimizer_s", "weights_bytes", "grads_bytes", "optimizer_bytes",
    "activations_bytes", "model_flops_per_step", "hardware_flops_per_step", "params", "tokens_per_step",
    "accelerator_cost_usd", "system_capex_usd", "energy_j", "cost_per_run_usd", "cost_per_million_tokens_usd",
)
