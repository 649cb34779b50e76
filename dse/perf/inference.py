"""Inference latency, throughput, KV cache and feasibility for N design points at once.

A request batch is served by `dp` replicas of the model, each spread over tp x pp GPUs
(gpus = tp * pp * dp; TP innermost, then EP, then PP, DP outermost, as in dse.perf.collectives).
Experts of MoE layers are sharded over ep x tp GPUs, EP carved out of the replicas (ep | dp),
as in training; tokens reach their experts through an all-to-all (dispatch + combine). An ep of
dp times a divisor of tp spreads the experts over the TP group too (dse.perf.layer.expert_fold):
those ranks hold the same tokens, so no all-to-all among them; the TP all-reduce combines.
Each replica holds batch/dp sequences and runs static batching (TensorRT-LLM
`gptSessionBenchmark`): one prefill of all its sequences, then osl - 1 decode steps.

    ttft   = prefill of b sequences x isl tokens                  (first token comes from it)
    tpot   = one decode step: every sequence adds one token, attending to its KV cache
    e2e    = ttft + (osl - 1) * tpot
    output_tokens_per_s = batch * osl / e2e                        (whole deployment)

One forward pass of one pipeline stage sums, per layer, the roofline time of each op of the
inventory (dse.perf.layer: projections, attention, MLP or router + experts, element-wise; GEMMs in
the fitted kernel form with their floors, dse calibrate), two TP all-reduces, the EP all-to-all, and
the serving engine's fixed overhead per layer (`layer_overhead_s`, framework preset: launches,
enqueue and the small kernels the op inventory does not time one by one); the last stage adds the
LM head on one token per sequence.
Decode reads the weights of the experts the step's tokens actually touch: requests route at random,
so the R (token, expert) pairs of a GPU's E_l local experts land on E_l (1 - (1 - 1/E_l)^R) distinct
experts in expectation (dse.perf.forms.moe.experts_touched). Decode streams
the KV cache at `decode_memory_efficiency`; every collective pays the fitted NCCL floor of its op plus the engine's own
`collective_overhead_s` (framework preset).
`gqa_kv_sharing` (framework preset): the decode attention kernel reads each KV head once for all
the query heads of its group; older kernels (TensorRT-LLM <= v0.6) once per query head.

Pipeline parallelism: the replica batch is split into mb = min(pp, b) micro-batches. Prefill takes
(mb + pp - 1) stage passes of b/mb sequences; a decode step, in steady state, pp passes of b/mb
sequences. Each pass includes the activation send to the next stage. Decode uses the mean KV
length isl + osl/2 (exact for the KV traffic, which is linear in it).
Per-phase breakdowns: `*_compute_s` (ops whose compute side bounds them), `*_memory_s` (ops bound
by memory traffic), `*_comm_s` (collectives and pipeline sends), `*_overhead_s` (kernel launches);
prefill's sum to ttft, decode's to tpot. `prefill_bound` / `decode_bound` name the largest.
"""
from __future__ import annotations

import numpy as np

from dse import catalog, schema
from dse.columns import divides, first_failure, not_positive_integers, real
from dse.perf import layer as L
from dse.perf import memory as M
from dse.perf import mixers as X
from dse.perf import pipeline as P
from dse.perf import roofline as R
from dse.catalog.precision import CODE, WEIGHT_BYTES
from dse.perf.distinct import distinct
from dse.perf.collectives import Network, Placement
from dse.workload import Model

K = catalog.constants()
RC = schema.REASON_CODE
BOUNDS = np.array(["compute", "memory", "network"], dtype=object)


def reason_codes(m, gpus, tp, pp, dp, ep, batch, isl, osl):
    checks = [
        (RC["split"], np.abs(tp * pp * dp - gpus) > 0.5),
        (RC["tp_heads"], ~divides(tp, m.heads) | X.recurrent_heads_indivisible(m, tp)),
        (RC["tp_kv_heads"], ~(divides(tp, m.kv_heads) | divides(m.kv_heads, tp))),
        (RC["pp_layers"], P.layout_infeasible(m.layers, pp, 1.0)),
        (RC["batch"], ~divides(dp, batch)),
        (RC["ep_dp"], ~L.serving_ep_valid(ep, dp, tp)),
        (RC["ep_experts"], m.is_moe & ~divides(ep, m.experts)),
        (RC["ep_dense"], (ep > 1) & ~m.is_moe),
    ]
    return first_failure(checks, not_positive_integers(tp, pp, dp, ep, batch, isl, osl), RC["not_integer"])


# quantized checkpoints keep the embedding and the LM head in 16 bits (dse.perf.layer.serving_head_op)
VOCAB_WEIGHT_BYTES = float(WEIGHT_BYTES[CODE["bf16"]])


class Pass:
    """Per-row constants of one evaluation shared by the prefill and decode passes."""

    def __init__(self, w: dict, m: Model, tp, ep, dp):
        self.m, self.tp, self.ep = m, tp, ep
        self.fold = L.expert_fold(ep, dp)   # TP ranks per EP group (1: EP over whole replicas)
        self.a2a = ep / self.fold           # the EP ranks in other replicas, reached by all-to-all
        self.hw = w  # a Block: hardware columns are read (and expanded) where a formula uses them
        self.precision, self.expert_precision = w["precision"], w["expert_precision"]
        self.operand = L.GEMM_OPERAND_BYTES[w["precision"]]
        self.expert_operand = L.GEMM_OPERAND_BYTES[w["expert_precision"]]   # the routed experts' weights
        self.kv_bytes = L.GEMM_OPERAND_BYTES[w["kv_precision"]]
        self.kv_cache_token = M.kv_cache_bytes_per_token(m, tp, self.kv_bytes)
        self.flash = w["flash_attention"]
        # the attention kernel forms by the cache's format (over an 8-bit or narrower cache the context
        # FMHA runs FP8 MMAs); MLA keeps the roofline (its kernels have their own "mla" fits)
        self.prefill_kv = np.where(m.is_mla, 0, np.where(self.kv_bytes < 2.0, 2, 1))
        # the decode kernel form is that of the XQA-era kernels the tables measure: an engine whose
        # decode kernel reads a KV head per query head (2023's masked MHA, gqa_kv_sharing 0) keeps
        # the roofline its preset's overheads were calibrated with
        self.decode_kv = np.where(w["gqa_kv_sharing"], self.prefill_kv, 0)
        # Decode kernels without GQA sharing read a KV head once per query head of its group.
        self.kv_reads = np.where(w["gqa_kv_sharing"], 1.0, m.heads / np.maximum(m.kv_heads, 1))
        self.dense, self.moe = L.layer_shares(m)
        self.peak_gemm = R.gemm_peak_flops_per_s(w["precision"], self.hw)
        self.layer_overhead, self.launch_overhead = real(w["layer_overhead_s"]), real(w["launch_overhead_s"])
        self.imbalance = w["moe_imbalance"]   # busiest expert's load over the mean (1: balanced, EPLB)

    def weights_bytes(self, tp, pp, ep):
        """Weights per GPU: the routed experts in their own format, the layers' other parameters in the
        GEMMs' (a stored weight's block scales: FP8 block scaling keeps one per 128 x 128, not per
        128), and the vocabulary matrices in 16 bits (L.serving_head_op)."""
        dense_params, expert_params = M.parameters_per_gpu(self.m, tp, pp, ep, etp=tp / self.fold)
        vocab = M.vocab_parameters_per_gpu(self.m, tp, pp)
        weight, expert_weight = WEIGHT_BYTES[self.precision], WEIGHT_BYTES[self.expert_precision]
        return (dense_params - vocab) * weight + vocab * VOCAB_WEIGHT_BYTES + expert_params * expert_weight

    def rates(self, decode: bool) -> R.Rates:
        return R.Rates.of(self.hw, self.precision, self.hw["decode_memory_efficiency"] if decode else None,
                          self.peak_gemm, self.expert_precision, moe_min_latency=self.hw["moe_min_latency"],
                          moe_kernels=self.hw["moe_kernels"])

    def ops(self, s: L.Shape, decode: bool) -> list:
        """The kernels of one layer for this pass, from the op inventory."""
        return self.projection_ops(s, decode) + self.attention_ops(s, decode) + self.later_ops(s, decode)

    def projection_ops(self, s: L.Shape, decode: bool) -> list:
        """The kernels ahead of attention (Q, K, V projections)."""
        return X.attention_projection_ops(self.m, s, self.operand, decode)

    def attention_ops(self, s: L.Shape, decode: bool) -> list:
        """The attention kernels: the only ones whose time depends on the context length `s.ctx`."""
        m = self.m
        # a sparse-attention model's indexer scores every cached key in FP8 (DeepGEMM's kernels)
        indexer = [X.indexer_scores_op(m, s, decode, fp8_scores=True)] if np.any(m.has_indexer > 0) else []
        if decode:
            return X.decode_attention_ops(m, s, self.kv_cache_token, self.kv_reads, self.decode_kv) + indexer
        flash = self.flash.astype(np.float32)
        ops = [L.fused_attention_op(m, s, self.kv_cache_token, flash, 1.0, prefill_kv=self.prefill_kv)] + indexer
        if not np.all(self.flash):
            ops += L.unfused_attention_ops(m, s, 0.0, 1.0 - flash)
        return ops

    def later_ops(self, s: L.Shape, decode: bool) -> list:
        """The kernels after attention: recurrent mixers, MLP or experts, element-wise."""
        m = self.m
        ops = X.recurrent_ops(m, s, self.operand, decode)
        ops += L.mlp_ops(m, s, self.operand, self.dense)
        if np.any(m.is_moe):
            ops += L.moe_ops(m, L.experts_shape(s, self.fold), self.operand, self.moe, self.imbalance,
                             spread=False,   # requests route at random
                             expert_operand=self.expert_operand)
        ops.append(L.elementwise_op(m, s, self.dense, self.moe, 1.0, rope=1.0))
        return ops


def op_times(ops, rates) -> list:
    """[(compute-bound seconds, memory-bound seconds)] of the weighted ops that run on some row."""
    live_rows = {}
    return [L.weighted(R.op_time_split_s, op, rates, live_rows)   # both times the weight
            for op in ops if np.asarray(op.weight).any()]


def summed(times, start=(0.0, 0.0)):
    """(compute, memory) seconds: `start` plus the op_times, in their order."""
    compute, memory = start
    for c, mem in times:
        compute, memory = compute + c, memory + mem
    return compute, memory


def split_by_bound(ops, rates, start=(0.0, 0.0)):
    """(compute-bound seconds, memory-bound seconds) summed over weighted ops (after `start`)."""
    return summed(op_times(ops, rates), start)


def stage_pass(p: Pass, net: Network, place: Placement, s: L.Shape, decode: bool, layers_per_stage, pp):
    """(compute, memory, comm, overhead) seconds of one forward pass of the slowest (last) stage."""
    rates = p.rates(decode)
    compute, memory = split_by_bound(p.ops(s, decode), rates)
    hc, hm = split_by_bound([L.serving_head_op(p.m, s.seqs, s.tp)], rates)
    compute, memory = compute * layers_per_stage + hc, memory * layers_per_stage + hm
    return (compute, memory) + stage_comm(p, net, place, s, layers_per_stage, pp)


def stage_comm(p: Pass, net: Network, place: Placement, s: L.Shape, layers_per_stage, pp):
    """(comm, overhead) seconds of one forward pass of a stage: TP all-reduces, the EP all-to-all,
    the logits gather and the send to the next stage; the engine's per-layer and launch overheads."""
    m, tp, ep = p.m, s.tp, s.ep
    act_msg = s.tokens * m.hidden * M.ACT_BYTES
    all_reduce = np.where(tp > 1, net.all_reduce_s(tp, place.tp_in, act_msg), 0.0)
    if np.any(p.a2a > 1):
        dispatch = s.tokens * m.top_k * m.expert_width * M.ACT_BYTES / tp * L.busiest_rank_load(m, p.imbalance, ep)
        all_to_all = np.where(p.a2a > 1, net.all_to_all_s(p.a2a, place.ep_in, dispatch), 0.0)
    else:
        all_to_all = 0.0
    gather = np.where(tp > 1, net.all_gather_s(tp, place.tp_in, s.seqs * m.vocab * M.LOGITS_BYTES), 0.0)
    send = np.where(pp > 1, net.p2p_s(place.pp_stride, act_msg / tp), 0.0)
    norms = L.qk_norm_exchange_s(net, place.tp_in, m, tp, s.tokens)
    comm = layers_per_stage * (m.blocks_per_layer * all_reduce + norms + p.moe * 2 * all_to_all) + gather + send
    overhead = p.layer_overhead * layers_per_stage + p.launch_overhead * K["kernels_per_pass"]
    return comm, overhead


def micro_batch_seqs(seqs, pp):
    """(micro-batches, sequences per micro-batch) of a replica's `seqs` sequences over pp stages."""
    micro = np.maximum(np.minimum(pp, np.floor(seqs)), 1)
    return micro, seqs / micro


# The columns a pass depends on row by row (besides the model, the hardware and, for the prefill,
# the prompt length): dse.perf.distinct evaluates Prefill and DecodeRest once per distinct row.
PASS_KEYS = ("tp", "pp", "dp", "ep", "batch", "precision", "expert_precision", "kv_precision", "flash_attention", "gqa_kv_sharing",
             "layer_overhead_s", "launch_overhead_s", "collective_overhead_s", "custom_all_reduce", "moe_min_latency", "moe_kernels",
             "topology_code")


class PassSetup:
    """The model, pass constants, network, placement and micro-batching of a block, from its columns."""

    def __init__(self, w):
        self.m = m = Model(w)
        self.tp, self.pp, dp, self.ep, batch = (np.maximum(w[k], 1) for k in ("tp", "pp", "dp", "ep", "batch"))
        self.p = Pass(w, m, self.tp, self.ep, dp)
        self.net = Network(w, overhead_s=real(w["collective_overhead_s"]), custom_all_reduce=w["custom_all_reduce"])
        self.place = Placement(self.p.hw["scaleup_domain"], self.tp, 1.0, self.p.a2a, self.pp, dp)
        self.layers_per_stage = np.ceil(m.layers / self.pp - 1e-9)  # engines split unevenly: the slowest stage
        _, self.mb_seqs = micro_batch_seqs(batch / dp, self.pp)


class Prefill:
    """stage_pass of the prefill (compute, memory, comm, overhead) from the block's columns alone."""

    def __init__(self, w):
        u, isl = PassSetup(w), np.maximum(w["isl"], 1)
        self.compute, self.memory, self.comm, self.overhead = stage_pass(
            u.p, u.net, u.place, L.Shape(u.mb_seqs, isl, isl, u.tp, u.ep), False, u.layers_per_stage, u.pp)


class DecodeRest:
    """The decode pass apart from its attention kernels (the only ones that read the context
    length): the summed op times before attention, each later op's, the LM head's, communication
    and overheads, from the block's columns alone."""

    def __init__(self, w):
        u = PassSetup(w)
        s = L.Shape(u.mb_seqs, 1.0, None, u.tp, u.ep)   # no context: attention is timed row by row
        rates = u.p.rates(True)
        self.before = split_by_bound(u.p.projection_ops(s, True), rates)
        self.after = op_times(u.p.later_ops(s, True), rates)
        self.head = split_by_bound([L.serving_head_op(u.m, s.seqs, s.tp)], rates)
        self.comm, self.overhead = stage_comm(u.p, u.net, u.place, s, u.layers_per_stage, u.pp)


def decode_pass(p: Pass, rest: DecodeRest, s: L.Shape, layers_per_stage):
    """stage_pass of the decode: DecodeRest and the attention kernels of shape `s`, summed in op order."""
    compute, memory = summed(rest.after, split_by_bound(p.attention_ops(s, True), p.rates(True), rest.before))
    hc, hm = rest.head
    return compute * layers_per_stage + hc, memory * layers_per_stage + hm, rest.comm, rest.overhead


def memory_parts(p: Pass, m, tp, pp, ep, seqs, mb_seqs, isl, osl, layers_per_stage):
    """(weights, KV cache, activations) bytes per GPU: weights, the decode cache at full length (KV
    of the attention layers, capped at their window or chunk, and the recurrent state of Mamba-2 /
    Gated DeltaNet layers: dse.perf.memory.cache_bytes_per_sequence) and the prefill working set
    (peak live tensors of one layer: buffers are reused layer to layer)."""
    weights = p.weights_bytes(tp, pp, ep)
    kv_cache = seqs * layers_per_stage * M.cache_bytes_per_sequence(m, tp, p.kv_bytes, isl + osl)
    tokens = mb_seqs * isl
    q_local = m.q_dim * (1.0 + m.output_gate) / tp
    ffn_local = np.maximum(m.ffn, m.moe_ffn * (m.top_k + m.shared_experts)) / tp
    widest = np.maximum(q_local + L.kv_pair_local(m, tp), m.mlp_mats * ffn_local)
    for mixer in (m.mamba, m.linear):
        if mixer is not None:
            widest = np.maximum(widest, mixer.in_proj / tp)
    working = tokens * (2 * m.hidden + widest)
    scores = np.where(p.flash, 0.0, mb_seqs * (m.heads / tp) * isl * isl * 2.0)
    activations = (working + scores) * M.ACT_BYTES + mb_seqs * m.vocab / tp * M.LOGITS_BYTES
    return weights, kv_cache, activations


def _bound(c, mm, nn):
    """Index into BOUNDS of the largest of compute, memory and network time."""
    return np.where((nn > c) & (nn > mm), 2, np.where(mm > c, 1, 0)).astype(np.int8)


def inference_columns(w: dict) -> dict:
    m = Model(w)
    gpus, tp, pp, dp, ep, batch, isl, osl = (w[k] for k in ("gpus", "tp", "pp", "dp", "ep", "batch", "isl", "osl"))
    reason = reason_codes(m, gpus, tp, pp, dp, ep, batch, isl, osl)
    # Keep the arithmetic finite on infeasible rows; they are flagged, not dropped.
    tp, pp, dp, ep, batch, isl, osl = (np.maximum(x, 1) for x in (tp, pp, dp, ep, batch, isl, osl))
    p = Pass(w, m, tp, ep, dp)
    layers_per_stage = m.layers / pp
    seqs = batch / dp                                    # sequences per replica
    micro, mb_seqs = micro_batch_seqs(seqs, pp)

    prefill = distinct(Prefill, w, PASS_KEYS + ("isl",))
    pc, pm, pn, po = ((micro + pp - 1) * x for x in (prefill.compute, prefill.memory, prefill.comm, prefill.overhead))
    decode = decode_pass(p, distinct(DecodeRest, w, PASS_KEYS), L.Shape(mb_seqs, 1.0, isl + osl / 2.0, tp, ep),
                         layers_per_stage)
    dc, dm, dn, do = (pp * x for x in decode)
    ttft, tpot = pc + pm + pn + po, dc + dm + dn + do
    e2e = ttft + (osl - 1) * tpot

    weights, kv_cache, activations = memory_parts(p, m, tp, pp, ep, seqs, mb_seqs, isl, osl, layers_per_stage)
    mem = weights + kv_cache + activations
    oom = (reason == 0) & (mem + K["reserved_bytes"] > p.hw["memory_capacity_bytes"])
    reason = np.where(oom, RC["out_of_memory"], reason).astype(np.int8)
    return {
        "ttft_s": ttft, "tpot_s": tpot, "e2e_latency_s": e2e, "output_tokens_per_s": batch * osl / e2e,
        "kv_cache_bytes": kv_cache, "mem_per_gpu_bytes": mem, "fits": reason == 0, "infeasible_code": reason,
        "prefill_bound": _bound(pc, pm, pn), "decode_bound": _bound(dc, dm, dn),
        "prefill_compute_s": pc, "prefill_memory_s": pm, "prefill_comm_s": pn, "prefill_overhead_s": po,
        "decode_compute_s": dc, "decode_memory_s": dm, "decode_comm_s": dn, "decode_overhead_s": do,
        "weights_bytes": weights, "activations_bytes": activations,
        "params": m.total_params, "active_params": m.active_params,
    }


OUTPUT_COLUMNS = (
    "ttft_s", "tpot_s", "e2e_latency_s", "output_tokens_per_s", "kv_cache_bytes", "mem_per_gpu_bytes",
    "fits", "infeasible_code", "infeasible_reason", "prefill_bound", "decode_bound",
    "prefill_compute_s", "prefill_memory_s", "prefill_comm_s", "prefill_overhead_s",
    "decode_compute_s", "decode_memory_s", "decode_comm_s", "decode_overhead_s",
    "weights_bytes", "activations_bytes", "params", "active_params",
    "accelerator_cost_usd", "system_capex_usd", "energy_j", "cost_per_run_usd", "cost_per_million_tokens_usd",
)
