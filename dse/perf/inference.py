"""Inference latency, throughput, KV cache and feasibility for N design points at once.

A request batch is served by `dp` replicas of the model, each spread over tp x pp GPUs
(gpus = tp * pp * dp; TP innermost, then EP, then PP, DP outermost, as in dse.perf.collectives).
Experts of MoE layers are sharded over ep x tp GPUs, EP carved out of the replicas (ep | dp),
as in training; tokens reach their experts through an all-to-all (dispatch + combine).
Each replica holds batch/dp sequences and runs static batching (TensorRT-LLM
`gptSessionBenchmark`): one prefill of all its sequences, then osl - 1 decode steps.

    ttft   = prefill of b sequences x isl tokens                  (first token comes from it)
    tpot   = one decode step: every sequence adds one token, attending to its KV cache
    e2e    = ttft + (osl - 1) * tpot
    output_tokens_per_s = batch * osl / e2e                        (whole deployment)

One forward pass of one pipeline stage sums, per layer, the roofline time of each GEMM (size-
dependent efficiency, dse.perf.roofline), the attention kernel (FlashAttention roofline in prefill;
in decode a kernel that streams the KV cache, GQA aware), the memory-bound element-wise kernels,
two TP all-reduces, the EP all-to-all, and a fixed overhead per layer (`layer_overhead_s`: launch,
enqueue, ramp and tail of its ~`KERNELS_PER_LAYER` kernels; falls back to `launch_overhead_s` x
`KERNELS_PER_LAYER`); the last stage adds the LM head on one token per sequence. Decode
reads the weights of the experts the step's tokens actually touch: with T routed tokens and
top-k of E experts, E (1 - (1 - k/E)^T) distinct experts in expectation.
Decode uses `decode_memory_efficiency` (streaming weights and KV cache through small GEMV-like
kernels) and every collective pays `collective_overhead_s` (NCCL kernel launch and
synchronisation, which dominates at decode's few-KB messages): per GPU generation in
catalog/efficiency.csv with their basis (explicit columns of the same names win).
`gqa_kv_sharing` (default true): the decode attention kernel reads each KV head once for all the
query heads of its group (FlashDecoding, XQA); false models older kernels that read it once per
query head (used for TensorRT-LLM <= v0.6 in `dse validate`).

Pipeline parallelism: the replica batch is split into mb = min(pp, b) micro-batches. Prefill takes
(mb + pp - 1) stage passes of b/mb sequences; a decode step, in steady state, pp passes of b/mb
sequences (each micro-batch visits every stage once per token, and the stages work on different
micro-batches at the same time). Each pass includes the activation send to the next stage.

Decode uses the mean KV length isl + osl/2 (exact for the KV traffic, which is linear in it).
Per-phase breakdowns: `*_compute_s` (ops whose compute side bounds them), `*_memory_s` (ops bound
by memory traffic), `*_comm_s` (collectives and pipeline sends), `*_overhead_s` (kernel launches);
prefill's sum to ttft, decode's to tpot. `prefill_bound` / `decode_bound` name the largest of
compute, memory and network.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse import catalog
from dse import columns as C
from dse.perf import memory as M
from dse.perf import roofline as R
from dse.perf.collectives import Network, all_gather_flat_s, all_reduce_flat_s, ranks_per_domain
from dse.workload import Model

# Reasons a design point is infeasible (index = code; 0 = feasible). First failing check wins.
REASONS = np.array([
    "",
    "tp*pp*dp != gpus: the split must multiply out to the GPU count",
    "tp must divide heads",
    "tp must divide kv_heads or be a multiple of it",
    "pp must divide layers",
    "dp must divide batch (each replica serves batch/dp sequences)",
    "ep must divide dp (experts are sharded over ep replicas x tp)",
    "ep must divide experts",
    "ep > 1 needs a mixture-of-experts model",
    "degrees, batch, isl and osl must be positive integers",
    "out of memory: weights + KV cache + activations exceed the GPU's memory",
    "",  # slot for hardware reasons (derived accelerators)
], dtype=object)
OOM = 10
HARDWARE_INFEASIBLE = 11

BOUNDS = np.array(["compute", "memory", "network"], dtype=object)

# Kernels one decoder layer launches in a TensorRT-LLM / vLLM style engine (CUDA graphs or TRT
# engine, all-reduces counted separately): input RMSNorm, QKV GEMM, RoPE + attention, output
# projection, residual + post-attention norm, gate/up GEMM, activation (SiLU x up), down GEMM,
# residual add, plus one for quantisation/bias epilogues that are not fused = 10.
KERNELS_PER_LAYER = 10.0
# Per forward pass outside the layers: embedding lookup, final norm, LM head, sampling/top-k.
KERNELS_PER_PASS = 4.0
# Memory the serving runtime holds outside weights, KV cache and activations (CUDA context,
# cuBLAS/NCCL workspaces, allocator slack): the same reserve as in training.
RESERVED_BYTES = 2.0 * 2**30
# Fraction of attention-score FLOPs a causal prefill kernel skips (masked tiles).
CAUSAL_SKIP = 0.5
# Bytes of element-wise traffic per token per layer, in units of the hidden size: two RMSNorms
# (read + write, 2 x 4h), two residual adds (read 2, write 1: 2 x 6h), RoPE on Q/K (~2h).
ELEMENTWISE_HIDDEN_BYTES = 22.0

OUTPUT_COLUMNS = (
    "ttft_s", "tpot_s", "e2e_latency_s", "output_tokens_per_s", "kv_cache_bytes", "mem_per_gpu_bytes",
    "fits", "infeasible_reason", "prefill_bound", "decode_bound",
    "prefill_compute_s", "prefill_memory_s", "prefill_comm_s", "prefill_overhead_s",
    "decode_compute_s", "decode_memory_s", "decode_comm_s", "decode_overhead_s",
    "weights_bytes", "activations_bytes", "params", "active_params",
    # economics (dse.hardware.economics), per output token of the whole deployment
    "accelerator_cost_usd", "system_capex_usd", "energy_j", "cost_per_run_usd", "cost_per_million_tokens_usd",
)

def evaluate_inference(frame):
    """Add inference results to every row of `frame` (DataFrame or mapping of arrays).

    Inputs: the model (`model` or its columns), the system (`system` or hardware columns; `memory`
    + `memory_stacks` replace a catalog system's memory), `gpus, tp, pp, dp, ep, batch, isl, osl,
    precision` (weights and activations: bf16 / fp8 / fp4), `kv_precision` (default: bf16),
    `flash_attention` (default true). Outputs: `OUTPUT_COLUMNS` (see the module docstring).
    """
    cols, n = C.to_columns(frame)
    work = dict(cols)
    C.resolve_model(work)
    C.resolve_hardware(work)
    resolved = dict(work)  # before _prepare drops the names: prices are looked up by system
    _prepare(work, n)
    out = C.blockwise(inference_columns, work, n)
    # Economics of serving: one batch run (prefill + decode of `batch` sequences) is the step,
    # its output tokens the tokens; cost_per_run_usd needs `serve_tokens`.
    from dse.hardware import workload_costs
    output_tokens = C.as_float(work, "batch", 1) * C.as_float(work, "osl", 1)
    out.update(workload_costs(resolved, out["e2e_latency_s"], output_tokens, C.as_float(work, "gpus", 1)))
    return C.pack(frame, out)


def _prepare(work: dict, n: int) -> None:
    """Enum codes and per-generation inference efficiencies, on whole columns (fast for
    Categoricals), then plain numpy arrays for the block-wise evaluation."""
    work["precision"] = C.enum_codes(work, "precision", "bf16")
    if "kv_precision" in work:
        kv = dict(work)
        kv["precision"] = work["kv_precision"]
        work["kv_precision"] = C.enum_codes(kv, "precision", "bf16")
    else:
        work["kv_precision"] = np.zeros(n, dtype=np.int8)
    work["flash_attention"] = C.as_bool(work, "flash_attention", True)
    work["gqa_kv_sharing"] = C.as_bool(work, "gqa_kv_sharing", True)
    for k, v in list(work.items()):
        if k in ("model", "system", "memory"):  # resolved into numeric columns above
            del work[k]
        elif isinstance(v, C.CatalogColumn):  # looked up per block, in the model's float type
            work[k] = v.astype(C.MODEL_FLOAT)
        else:  # the block-wise arithmetic runs in float32 (see dse.columns.MODEL_FLOAT)
            v = np.asarray(v)
            work[k] = v.astype(C.MODEL_FLOAT) if v.dtype.kind == "f" else v


def _degrees(work):
    f = lambda k, d: C.as_float(work, k, d)  # noqa: E731
    tp, pp, ep = f("tp", 1), f("pp", 1), f("ep", 1)
    gpus = f("gpus", np.nan)
    dp = f("dp", np.nan)
    dp = np.where(np.isnan(dp), np.where(np.isnan(gpus), 1.0, gpus / (tp * pp)), dp)
    gpus = np.where(np.isnan(gpus), tp * pp * dp, gpus)
    return gpus, tp, pp, dp, ep


def _reason_codes(m, gpus, tp, pp, dp, ep, batch, isl, osl):
    divides = C.divides
    checks = [
        np.abs(tp * pp * dp - gpus) > 0.5,
        ~divides(tp, m.heads),
        ~(divides(tp, m.kv_heads) | divides(m.kv_heads, tp)),
        ~divides(pp, m.layers),
        ~divides(dp, batch),
        ~divides(ep, dp),
        m.is_moe & ~divides(ep, m.experts),
        (ep > 1) & ~m.is_moe,
    ]
    return C.first_failure(checks, C.not_positive_integers(tp, pp, dp, ep, batch, isl, osl), 9)


@dataclass
class Op:
    """One kernel class of a forward pass: FLOPs, bytes and the two roofline sides, for one
    occurrence, and how many times it runs per stage pass (`per_pass`)."""
    name: str
    kind: str          # "gemm", "attention", "elementwise"
    m: object
    n: object
    k: object
    flops: object
    bytes: object
    compute_s: object
    memory_s: object
    per_pass: object


class _Context:
    """Per-row constants shared by the prefill and decode passes."""

    def __init__(self, work: dict, m: Model, tp, ep):
        self.m, self.tp, self.ep = m, tp, ep
        precision = work["precision"]
        hw = {k: C.real(work[k]) for k in C.HARDWARE_COLUMNS}
        self.hw = hw
        self.peak_gemm = R.gemm_peak_flops_per_s(precision, hw)
        self.peak_bf16 = hw["peak_bf16_flops_per_s"]
        self.operand = C.GEMM_OPERAND_BYTES[precision]
        self.kv_bytes = C.GEMM_OPERAND_BYTES[work["kv_precision"]]
        self.bw = hw["memory_bandwidth_bytes_per_s"]
        self.eff_max, self.half = hw["gemm_efficiency_max"], hw["gemm_half_dim"]
        self.prefill_mem_eff = hw["memory_efficiency"]
        self.decode_mem_eff = C.real(work["decode_memory_efficiency"])
        self.flash = work["flash_attention"]
        # Decode kernels without GQA sharing (masked MHA before TensorRT-LLM's MQA/GQA optimisation
        # of Dec 2023 and XQA of v0.8) read a KV head once per query head of its group.
        self.kv_reads = np.where(work["gqa_kv_sharing"], 1.0, m.heads / np.maximum(m.kv_heads, 1))
        h = m.hidden
        self.q_local = m.q_dim / tp
        self.kv_local = m.head_dim * np.maximum(m.kv_heads / tp, 1.0)   # K (or V) width per GPU
        self.kv_cache_token = M.kv_cache_bytes_per_token(m, tp, self.kv_bytes)
        self.heads_local = m.heads / tp
        self.up_mats = m.mlp_mats - 1
        self.moe_fraction = np.where(m.layers > 0, m.moe_layers / m.layers, 0.0)
        self.h = h

    def ops(self, seqs, q_len, ctx, decode: bool, detail: bool = False) -> list[Op]:
        """Kernels of one forward pass of one pipeline stage for `seqs` sequences that each add
        `q_len` tokens attending to `ctx` keys. `per_pass` multipliers count per-layer kernels
        once per layer of the model (the caller scales by layers per stage)."""
        m, tp, ep, h = self.m, self.tp, self.ep, self.h
        mem_eff = self.decode_mem_eff if decode else self.prefill_mem_eff
        tokens = seqs * q_len
        ops: list[Op] = []

        def gemm(name, mm, nn, kk, count, per, peak=None, ob=None):
            peak = self.peak_gemm if peak is None else peak
            ob = self.operand if ob is None else ob
            c, mem = R.gemm_compute_memory_s(mm, nn, kk, count, ob, peak, self.bw, self.eff_max, self.half, mem_eff)
            flops = nbytes = None
            if detail:  # FLOPs and bytes only for the roofline table
                live = mm * nn * kk * count > 0
                flops = np.where(live, R.gemm_flops(mm, nn, kk, count), 0.0)
                nbytes = np.where(live, R.gemm_bytes(mm, nn, kk, ob, count), 0.0)
            ops.append(Op(name, "gemm", mm, nn, kk, flops, nbytes, c, mem, per))

        dense = 1.0 - self.moe_fraction if np.any(m.is_moe) else 1.0
        gemm("qkv_proj", tokens, self.q_local + 2 * self.kv_local, h, 1.0, 1.0)
        # ---- attention core ----
        groups = m.heads / np.maximum(m.kv_heads, 1)
        if decode:
            # One query token per sequence against its KV cache (FlashDecoding / XQA style: the
            # q heads of a KV group share one read of K and V).
            flops = 4.0 * seqs * self.heads_local * ctx * m.head_dim
            nbytes = (seqs * ctx * self.kv_cache_token * self.kv_reads
                      + seqs * (2 * self.q_local * M.ACT_BYTES + self.kv_cache_token))
            c = flops / (self.peak_bf16 * self.hw["attention_efficiency"])
            mem = R.stream_time_s(nbytes, self.bw, mem_eff)
            ops.append(Op("attention", "attention", groups, ctx, m.head_dim, flops, nbytes, c, mem, 1.0))
        else:
            flops_full = 4.0 * seqs * self.heads_local * q_len * ctx * m.head_dim
            flash_flops = flops_full * CAUSAL_SKIP
            flash_bytes = tokens * ((2 * self.q_local + 2 * self.kv_local) * M.ACT_BYTES + self.kv_cache_token)
            fc = flash_flops / (self.peak_bf16 * self.hw["attention_efficiency"])
            fm = R.stream_time_s(flash_bytes, self.bw, mem_eff)
            # Unfused: scores GEMM, softmax (read + write scores, 2 B each, twice), x V GEMM.
            if np.all(self.flash):
                c, mem, nbytes = fc, fm, flash_bytes
            else:
                sc, sm = R.gemm_compute_memory_s(q_len, ctx, m.head_dim, seqs * self.heads_local, 2.0,
                                                 self.peak_bf16, self.bw, self.eff_max, self.half, mem_eff)
                softmax = R.stream_time_s(seqs * self.heads_local * q_len * ctx * 8.0, self.bw, mem_eff)
                unfused_bytes = (2 * R.gemm_bytes(q_len, ctx, m.head_dim, 2.0, seqs * self.heads_local)
                                 + seqs * self.heads_local * q_len * ctx * 8.0)
                c = np.where(self.flash, fc, 2 * sc)
                mem = np.where(self.flash, fm, 2 * sm + softmax)
                nbytes = np.where(self.flash, flash_bytes, unfused_bytes)
            ops.append(Op("attention", "attention", q_len, ctx, m.head_dim,
                          np.where(self.flash, flash_flops, flops_full), nbytes, c, mem, 1.0))
        gemm("attn_out_proj", tokens, h, self.q_local, 1.0, 1.0)
        # ---- dense MLP (dense layers) ----
        gemm("mlp_up_gate", tokens, self.up_mats * m.ffn / tp, h, 1.0, dense)
        gemm("mlp_down", tokens, h, m.ffn / tp, 1.0, dense)
        # ---- mixture of experts (MoE layers): the tokens of the ep replicas of an EP group are
        # routed to E experts; this GPU holds E/ep of them, each sharded over tp ----
        if np.any(m.is_moe):
            moe = self.moe_fraction
            routed = tokens * ep                                  # tokens the EP group routes
            experts = np.maximum(m.experts, 1)
            with np.errstate(divide="ignore"):  # top_k == experts: log1p(-1) = -inf, every expert touched
                touched = experts * -np.expm1(routed * np.log1p(-np.minimum(m.top_k / experts, 1.0)))
            touched = np.maximum(touched, np.minimum(routed * m.top_k, 1.0))
            local = touched / ep                                  # active experts on this GPU
            per_expert = routed * m.top_k / np.maximum(touched, 1e-30)
            gemm("router", tokens, m.experts, h, 1.0, moe, peak=self.peak_bf16, ob=2.0)
            gemm("expert_up_gate", per_expert, self.up_mats * m.moe_ffn / tp, h, local, moe)
            gemm("expert_down", per_expert, h, m.moe_ffn / tp, local, moe)
            gemm("shared_expert_up_gate", tokens, self.up_mats * m.shared_experts * m.moe_ffn / tp, h, 1.0, moe)
            gemm("shared_expert_down", tokens, h, m.shared_experts * m.moe_ffn / tp, 1.0, moe)
        # ---- element-wise kernels: norms, residuals, RoPE, activation ----
        act_ffn = 2 * m.mlp_mats
        ffn_local = (dense * m.ffn + self.moe_fraction * m.moe_ffn * (m.top_k + m.shared_experts)) / tp
        ew_bytes = tokens * (ELEMENTWISE_HIDDEN_BYTES * h + act_ffn * ffn_local)
        ops.append(Op("elementwise", "elementwise", tokens, h, 1.0, 0.0, ew_bytes,
                      0.0, R.stream_time_s(ew_bytes, self.bw, mem_eff), 1.0))
        return ops

    def lm_head(self, seqs, decode: bool, detail: bool = False) -> Op:
        """LM head on the last token of each sequence (last stage only)."""
        mem_eff = self.decode_mem_eff if decode else self.prefill_mem_eff
        m = self.m
        c, mem = R.gemm_compute_memory_s(seqs, m.vocab / self.tp, self.h, 1.0, self.operand, self.peak_gemm,
                                         self.bw, self.eff_max, self.half, mem_eff)
        flops = R.gemm_flops(seqs, m.vocab / self.tp, self.h) if detail else None
        nbytes = R.gemm_bytes(seqs, m.vocab / self.tp, self.h, self.operand) if detail else None
        return Op("lm_head", "gemm", seqs, m.vocab / self.tp, self.h, flops, nbytes, c, mem, 1.0)


def _stage_pass(ctx: _Context, net: Network, seqs, q_len, kv_len, decode, layers_per_stage, tp, pp, ep, domain,
                collective_overhead, layer_overhead):
    """(compute, memory, comm, overhead) seconds of one forward pass of the slowest (last) stage."""
    m = ctx.m
    compute = 0.0   # per layer, then times the stage's layers
    memory = 0.0
    for op in ctx.ops(seqs, q_len, kv_len, decode):
        t = np.maximum(op.compute_s, op.memory_s)
        if not (isinstance(op.per_pass, float) and op.per_pass == 1.0):
            t = t * op.per_pass
        tc = np.where(op.compute_s >= op.memory_s, t, 0.0)
        compute = compute + tc
        memory = memory + (t - tc)
    head = ctx.lm_head(seqs, decode)
    t = np.maximum(head.compute_s, head.memory_s)
    tc = np.where(head.compute_s >= head.memory_s, t, 0.0)
    compute = compute * layers_per_stage + tc
    memory = memory * layers_per_stage + (t - tc)
    tokens = seqs * q_len
    act_msg = tokens * ctx.h * M.ACT_BYTES
    tp_in = ranks_per_domain(tp, 1, domain)
    if np.all(tp_in >= tp):  # every TP group inside its scale-up domain (the usual case): skip the
        ar = all_reduce_flat_s(tp, act_msg, net.up_alpha, net.up_beta)      # hierarchical forms
        gather = all_gather_flat_s(tp, seqs * m.vocab * 4.0, net.up_alpha, net.up_beta)
    else:
        ar = net.all_reduce_s(tp, tp_in, act_msg)
        gather = net.all_gather_s(tp, tp_in, seqs * m.vocab * 4.0)
    all_reduce = np.where(tp > 1, ar + collective_overhead, 0.0)
    if np.any(ep > 1):
        ep_in = ranks_per_domain(ep, tp, domain)
        dispatch = tokens * m.top_k * ctx.h * M.ACT_BYTES / tp
        all_to_all = np.where(ep > 1, net.all_to_all_s(ep, ep_in, dispatch) + collective_overhead, 0.0)
    else:
        all_to_all = 0.0
    logits_gather = np.where(tp > 1, gather + collective_overhead, 0.0)
    send = np.where(pp > 1, net.p2p_s(tp * ep, act_msg / tp) + collective_overhead, 0.0)
    comm = layers_per_stage * (2 * all_reduce + ctx.moe_fraction * 2 * all_to_all) + logits_gather + send
    overhead = layer_overhead * layers_per_stage + ctx.hw["launch_overhead_s"] * KERNELS_PER_PASS
    return compute, memory, comm, overhead


def inference_columns(work: dict) -> dict:
    n = C._length(work)
    m = Model(work)
    gpus, tp, pp, dp, ep = _degrees(work)
    batch = C.as_float(work, "batch", 1)
    isl = C.as_float(work, "isl", 128)
    osl = C.as_float(work, "osl", 128)
    # Defaults for absent columns come as float64: compute in the model's float type.
    gpus, tp, pp, dp, ep, batch, isl, osl = (np.asarray(x).astype(m.hidden.dtype, copy=False)
                                             for x in (gpus, tp, pp, dp, ep, batch, isl, osl))
    reason = _reason_codes(m, gpus, tp, pp, dp, ep, batch, isl, osl)
    # Keep the arithmetic finite on infeasible rows; they are flagged, not dropped.
    tp, pp, dp, ep = (np.maximum(x, 1) for x in (tp, pp, dp, ep))
    batch, isl, osl = np.maximum(batch, 1), np.maximum(isl, 1), np.maximum(osl, 1)

    ctx = _Context(work, m, tp, ep)
    net = Network(work)
    domain = ctx.hw["scaleup_domain"]
    overhead_coll = C.real(work["collective_overhead_s"])
    overhead_layer = C.real(work["layer_overhead_s"])
    layers_per_stage = m.layers / pp

    seqs = batch / dp                                    # sequences per replica
    micro = np.maximum(np.minimum(pp, np.floor(seqs)), 1)
    mb_seqs = seqs / micro

    # ---- prefill: (micro + pp - 1) passes of mb_seqs sequences x isl tokens ----
    pc, pm, pn, po = _stage_pass(ctx, net, mb_seqs, isl, isl, False, layers_per_stage, tp, pp, ep, domain, overhead_coll, overhead_layer)
    prefill_passes = micro + pp - 1
    pc, pm, pn, po = (prefill_passes * x for x in (pc, pm, pn, po))
    ttft = pc + pm + pn + po

    # ---- decode: one token per sequence against the mean KV length ----
    kv_mean = isl + osl / 2.0
    dc, dm, dn, do = _stage_pass(ctx, net, mb_seqs, 1.0, kv_mean, True, layers_per_stage, tp, pp, ep, domain, overhead_coll, overhead_layer)
    dc, dm, dn, do = (pp * x for x in (dc, dm, dn, do))
    tpot = dc + dm + dn + do
    e2e = ttft + (osl - 1) * tpot

    # ---- memory per GPU: weights, KV cache at full length, the prefill working set ----
    dense_params, expert_params = M.parameters_per_gpu(m, tp, pp, ep)
    weights = (dense_params + expert_params) * ctx.operand
    kv_cache = seqs * (isl + osl) * layers_per_stage * ctx.kv_cache_token
    tokens = mb_seqs * isl
    # Peak live tensors of one layer (buffers are reused layer to layer): the residual stream and
    # the layer input, plus the larger of the QKV output and the MLP's up/gate + activation outputs.
    ffn_local = np.maximum(m.ffn, m.moe_ffn * (m.top_k + m.shared_experts)) / tp
    working = tokens * (2 * m.hidden + np.maximum(ctx.q_local + 2 * ctx.kv_local, m.mlp_mats * ffn_local))
    scores = np.where(ctx.flash, 0.0, mb_seqs * ctx.heads_local * isl * isl * 2.0)
    activations = (working + scores) * M.ACT_BYTES + mb_seqs * m.vocab / tp * 4.0
    mem = weights + kv_cache + activations

    capacity = ctx.hw["memory_capacity_bytes"]
    reason = np.where((reason == 0) & (mem + RESERVED_BYTES > capacity), OOM, reason).astype(np.int8)
    hw_bad, reason_text = C.hardware_reasons(work, reason == 0, REASONS[reason])
    reason = np.where(hw_bad, HARDWARE_INFEASIBLE, reason)  # derived accelerators may be impossible to build

    def bound(c, mm, nn):
        return BOUNDS[np.where((nn > c) & (nn > mm), 2, np.where(mm > c, 1, 0))]

    return {
        "ttft_s": ttft,
        "tpot_s": tpot,
        "e2e_latency_s": e2e,
        "output_tokens_per_s": batch * osl / e2e,
        "kv_cache_bytes": kv_cache,
        "mem_per_gpu_bytes": mem,
        "fits": reason == 0,
        "infeasible_reason": reason_text,
        "prefill_bound": bound(pc, pm, pn),
        "decode_bound": bound(dc, dm, dn),
        "prefill_compute_s": pc, "prefill_memory_s": pm, "prefill_comm_s": pn, "prefill_overhead_s": po,
        "decode_compute_s": dc, "decode_memory_s": dm, "decode_comm_s": dn, "decode_overhead_s": do,
        "weights_bytes": weights,
        "activations_bytes": activations,
        "params": m.total_params,
        "active_params": m.active_params,
    }


# ---------------------------------------------------------------------------------------------
def roofline_table(model, systems, batch=1, isl=2048, osl=128, tp=1, precision="bf16", kv_precision=None,
                   flash_attention=True, **extra):
    """Each GEMM (and the attention kernel) of one prefill pass and one decode step, per system:
    shape, FLOPs, bytes, arithmetic intensity, the system's ridge point (peak / bandwidth at the
    GEMM precision), whether compute or memory bounds it (the same roofline sides, with the
    size-dependent efficiency, as `evaluate_inference`) and its time per layer.

    `model` is a catalog name (or a dict of model columns); `systems` a list of catalog names or a
    comma-separated string. Extra keyword arguments become input columns (e.g. memory="hbm4").
    """
    import pandas as pd

    if isinstance(systems, str):
        systems = [s for s in systems.split(",") if s.strip()]
    systems = [catalog.resolve_system(s.strip()) for s in systems]
    if not systems:
        raise C.ConfigError("systems: empty list; give at least one catalog system, e.g. h100-sxm")
    n = len(systems)
    cols = {"system": np.asarray(systems, dtype=object), "tp": np.full(n, float(tp)),
            "precision": np.full(n, precision, dtype=object),
            "kv_precision": np.full(n, kv_precision or "bf16", dtype=object),
            "flash_attention": np.full(n, bool(flash_attention))}
    if isinstance(model, str):
        cols["model"] = np.full(n, catalog.resolve_model(model), dtype=object)
    else:
        cols.update({k: np.full(n, v) for k, v in dict(model).items()})
    for k, v in extra.items():
        cols[k] = np.full(n, v, dtype=object if isinstance(v, str) else None)
    C.resolve_model(cols)
    C.resolve_hardware(cols)
    _prepare(cols, n)
    m = Model(cols)
    tpa = C.as_float(cols, "tp", 1)
    ep = C.as_float(cols, "ep", 1)
    ctx = _Context(cols, m, tpa, ep)
    b = np.full(n, float(batch))
    rows = []
    for phase, q_len, kv_len, decode in (("prefill", float(isl), float(isl), False),
                                         ("decode", 1.0, float(isl) + float(osl) / 2.0, True)):
        ops = ctx.ops(b, np.full(n, q_len), np.full(n, kv_len), decode, detail=True) + [ctx.lm_head(b, decode, detail=True)]
        for op in ops:
            if op.kind == "elementwise":
                continue
            peak_flops = ctx.peak_gemm if op.kind == "gemm" and not op.name.startswith("router") else ctx.peak_bf16
            mem_eff = ctx.decode_mem_eff if decode else ctx.prefill_mem_eff
            for i, system in enumerate(systems):
                flops = float(np.broadcast_to(op.flops, (n,))[i])
                nbytes = float(np.broadcast_to(op.bytes, (n,))[i])
                if flops <= 0 or float(np.broadcast_to(op.per_pass, (n,))[i]) <= 0:
                    continue  # absent from this model (e.g. the dense MLP of an all-MoE model)
                c = float(np.broadcast_to(op.compute_s, (n,))[i])
                mm = float(np.broadcast_to(op.memory_s, (n,))[i])
                rows.append({
                    "system": system, "phase": phase, "op": op.name,
                    "m": float(np.broadcast_to(op.m, (n,))[i]), "n": float(np.broadcast_to(op.n, (n,))[i]),
                    "k": float(np.broadcast_to(op.k, (n,))[i]),
                    "flops": flops, "bytes": nbytes, "arithmetic_intensity": flops / nbytes,
                    "peak_flops_per_s": float(peak_flops[i]),
                    "memory_bandwidth_bytes_per_s": float(ctx.bw[i]),
                    "ridge_flops_per_byte": float(peak_flops[i] / ctx.bw[i]),
                    "achievable_ridge_flops_per_byte": float(
                        peak_flops[i] * ctx.eff_max[i] / (ctx.bw[i] * mem_eff[i])),
                    "bound": "compute" if c >= mm else "memory",
                    "time_s": max(c, mm),
                    "attained_flops_per_s": flops / max(c, mm),
                })
    table = pd.DataFrame(rows)
    order = {s: i for i, s in enumerate(systems)}
    table["_s"] = table["system"].map(order)
    table["_p"] = (table["phase"] == "decode").astype(int)
    return table.sort_values(["_s", "_p"], kind="stable").drop(columns=["_s", "_p"]).reset_index(drop=True)
