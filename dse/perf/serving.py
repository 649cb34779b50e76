"""Serving as engines run it: continuous (in-flight) batching in steady state, aggregated or with
prefill and decode on separate GPU pools, for N design points at once.

Aggregated (TensorRT-LLM, vLLM, SGLang with chunked prefill). A replica (tp x pp GPUs; experts
over ep ranks, carved out of the dp replicas or spreading over the TP group too, dse.perf.layer.
expert_fold) keeps `c` requests in flight. Every iteration each of them verifies
1 + spec_draft_tokens tokens and keeps a = 1 + spec_acceptance of them (a = 1 without speculative
decoding), and the prompts of the requests that replace the finished ones enter in chunks:

    prefill tokens per iteration   P = c * isl * a / osl          (steady state)
    iteration tokens               c (1 + draft) + P <= max_num_tokens (the engine's token budget)
    c = min(concurrency / dp, KV capacity, max_num_seqs, max_num_tokens / (1 + draft + isl a / osl))
    KV capacity   (kv_memory_fraction x capacity - weights - working set) / KV bytes of one request
                  (kv_fraction_of_free: kv_memory_fraction x (capacity - weights - working set))
                  at isl + osl tokens, rounded up to whole KV blocks of kv_block_tokens
    iteration     one pass of the c decode sequences and the P prompt tokens together: the GEMMs of
                  both in one (weights read once), decode attention over the caches at the mean
                  context isl + osl/2, prefill attention of the chunks; pp stages in turn on c/pp each
    tpot = iteration / a (p90: an iteration carrying a prompt chunk, once a tenth of them do);
    ttft = ceil(isl / prefill room) iterations that carry a chunk of the prompt, each a decode
                  iteration plus its chunk's share of the prompt work (the last chunk carries what is
                  left: a prompt one token past the room costs one token more, not a second full
                  chunk; prefill room = max_num_tokens - c (1 + draft)), plus half an iteration waiting for
                  the next one to start (0.9 of one for the p90), plus the wait for a free slot when
                  more requests are offered than fit
    requests/s = dp * c / (request lifetime), lifetime = its prompt's iterations + osl / a iterations

Prefill first (`prefill_first`, SGLang's scheduler): a prefill batch of up to max_num_tokens prompt
tokens runs alone whenever one can be formed and the running requests decode only between them. In
a closed loop of equal-length requests (no request_rate, isl_std 0) the c requests of a wave then
arrive together, are prefilled in c isl / max_num_tokens batches, decode together and finish
together (waves): a request's TPOT carries the prefill batches after its own (half the wave's on
average), its TTFT those up to its own, and requests/s = c / (the wave's prefill batches + its
decode iterations). Random arrivals or mixed lengths desynchronise them, and every prefill pauses
someone's decoding as the steady state above counts it.

Arrivals: a closed loop at fixed `concurrency`, as the engines' serving benchmarks run
(benchmark_serving --max-concurrency, genai-perf): a finished request is replaced at once, so the
only randomness is where in an iteration a request arrives; or an open loop at `request_rate`
(Poisson arrivals), whose requests in flight follow by Little's law (c = rate x lifetime, solved
by fixed-point iteration) and which is `overloaded` where even the capacity cannot serve it; with
neither, as many as fit (max-throughput). `isl_std` spreads the prompt lengths: the 90th-percentile
TTFT serves a prompt 1.28 spreads longer.

Disaggregated (`disaggregated`; DistServe, Dynamo, SGLang PD): `prefill_gpus` run prefill
instances of prefill_tp GPUs in batches of max_num_tokens, `decode_gpus` run the decode replicas
(tp, pp, ep) with no prompt work; a request's KV cache crosses from its prefill instance to its
decode replica, over the scale-up links when both pools share one domain and else over the NICs
of the prefill instance, before its first token is counted (ttft includes kv_transfer_s). The
pools serve min(prefill rate, decode rate) requests per second.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from dse import catalog, schema
from dse.columns import divides, first_failure, not_positive_integers, real
from dse.perf import layer as L
from dse.perf import memory as M
from dse.perf.bench_limits import engine_limits
from dse.perf.collectives import DEEPEP, FLEX, LOW_LATENCY, Network, Placement, overlapped_s
from dse.perf.inference import Pass, split_by_bound
from dse.workload import Model

K = catalog.constants()
RC = schema.REASON_CODE
P90_Z = 1.2816   # the 90th percentile of a normal distribution, in standard deviations


def merged_ops(decode_ops: list, prefill_ops: list) -> list:
    """One batch of decode and prefill tokens: ops the two passes share (a linear layer, the MoE
    layer, the element-wise passes) run once over both token sets, so weights are read once; the
    attention kernels (and MLA's decode-only absorbed GEMMs) stay separate."""
    out = list(decode_ops)
    shared = {op.name: i for i, op in enumerate(out) if op.kind != "attention"}
    for op in prefill_ops:
        i = shared.get(op.name)
        twin = out[i] if i is not None else None
        if twin is None or op.kind == "attention" or twin.timing != op.timing:
            out.append(op)
        elif op.timing == "gemm":
            out[i] = replace(twin, m=twin.m + op.m)
        elif op.timing == "moe":
            shape = dict(twin.moe, num_tokens=twin.moe["num_tokens"] + op.moe["num_tokens"],
                         local_tokens=twin.moe["local_tokens"] + op.moe["local_tokens"])
            out[i] = replace(twin, moe=shape, flops=twin.flops + op.flops, bytes=twin.bytes + op.bytes)
        else:
            out[i] = replace(twin, m=twin.m + op.m, flops=twin.flops + op.flops, bytes=twin.bytes + op.bytes)
    return out


def stage_s(p: Pass, net: Network, place: Placement, decode_seqs, verify, prefill_seqs, isl, ctx, layers_per_stage, pp):
    """Seconds of one pass of one pipeline stage over `decode_seqs` sequences verifying `verify`
    tokens each at mean context `ctx` and `prefill_seqs` prompts of `isl` tokens (fractions
    allowed: a chunk), with the TP all-reduces, the EP all-to-all and the engine's overhead. Under
    the two-batch overlap (moe_a2a_overlap: SGLang's TBO, DeepSeek's dual micro-batch) the pass runs
    as two micro-batches of half the sequences, each through every layer: each streams the weights
    again, which a memory-bound decode pays (SGLang's two_batch_overlap.py splits the batch, not the
    layers)."""
    m, tp, ep = p.m, p.tp, p.ep
    dec = L.Shape(decode_seqs, verify, ctx, tp, ep)
    pre = L.Shape(prefill_seqs, isl, isl, tp, ep)
    rates = p.rates(True)
    compute, memory = split_by_bound(merged_ops(p.ops(dec, True), p.ops(pre, False)), rates)
    hc, hm = split_by_bound([L.serving_head_op(m, decode_seqs + prefill_seqs, tp)], rates)
    tokens = dec.tokens + pre.tokens
    act_msg = tokens * m.hidden * M.ACT_BYTES
    all_reduce = np.where(tp > 1, net.all_reduce_s(tp, place.tp_in, act_msg), 0.0)
    kernels = (compute + memory) * layers_per_stage
    overlap = np.asarray(p.hw["moe_a2a_overlap"], bool) & (p.a2a > 1)
    if np.any(overlap):   # two micro-batches of half the sequences, each through every layer
        halves = split_by_bound(merged_ops(p.ops(L.Shape(decode_seqs / 2.0, verify, ctx, tp, ep), True),
                                           p.ops(L.Shape(prefill_seqs / 2.0, isl, isl, tp, ep), False)), rates)
        kernels = np.where(overlap, 2.0 * (halves[0] + halves[1]) * layers_per_stage, kernels)
    decode_only = np.asarray(prefill_seqs) <= 0
    experts = (expert_exchange_s(p, net, place, tokens, layers_per_stage, kernels, decode_only)
               if np.any(p.a2a > 1) else 0.0)
    send = np.where(pp > 1, net.p2p_s(place.pp_stride, act_msg / tp), 0.0)
    norms = L.qk_norm_exchange_s(net, place.tp_in, m, tp, tokens)
    comm = layers_per_stage * (m.blocks_per_layer * all_reduce + norms) + experts + send
    overhead = p.layer_overhead * layers_per_stage + p.launch_overhead * K["kernels_per_pass"]
    return kernels + hc + hm + comm + overhead


def expert_exchange_s(p: Pass, net: Network, place: Placement, tokens, layers_per_stage, kernels, decode_only=False):
    """Exposed dispatch + combine of a pass's MoE layers by the engine's dispatcher (DeepEP-style
    `flex` sends low-precision tokens in the experts' GEMM format and combines in BF16), under the pass's
    other computation where the engine overlaps them (`moe_a2a_overlap`: SGLang's two-batch overlap).
    A pass of decode tokens alone runs DeepEP's low-latency kernels (SGLang's deepep_mode auto,
    vLLM's decode pools): each routed copy goes straight to its expert's GPU over RDMA, with no
    per-domain deduplication and forwarding, so its volume is the all-to-all's, every peer written at
    once (Network.low_latency_exchange_s)."""
    m, ep, w = p.m, p.ep, p.hw
    flex = (w["moe_dispatcher"] == FLEX) | (w["moe_dispatcher"] == DEEPEP)
    element = np.where(flex, (p.expert_operand + M.ACT_BYTES) / 2.0, M.ACT_BYTES)
    dispatcher = np.where(flex & decode_only, LOW_LATENCY, w["moe_dispatcher"])
    row_bytes = m.expert_width * element / p.tp
    token_bytes = tokens * row_bytes * L.busiest_rank_load(m, p.imbalance, ep)
    exchange = net.expert_exchange_s(p.a2a, place.ep_in, token_bytes, m.top_k, dispatcher,
                                     m.routed_groups, m.group_top_k, row_bytes, m.experts, w["moe_routing"])
    comm = np.where(p.a2a > 1, layers_per_stage * p.moe * exchange, 0.0)
    return np.where(w["moe_a2a_overlap"], overlapped_s(comm, kernels, K["comm_sm_fraction"]), comm)


def kv_capacity(p: Pass, w, m, tp, pp, ep, ctx, chunk_tokens, layers_per_stage):
    """(requests one replica holds in its KV cache, weights bytes, KV bytes of one request) per GPU:
    the engine's share of memory less weights and the working set of a max_num_tokens pass, over
    the cache of one request at ctx tokens in whole KV blocks."""
    block = np.maximum(w["kv_block_tokens"], 1.0)
    ctx_blocks = np.ceil(ctx / block) * block
    per_request = layers_per_stage * M.cache_bytes_per_sequence(m, tp, p.kv_bytes, ctx_blocks)
    weights = p.weights_bytes(tp, pp, ep)
    q_local = m.q_dim * (1.0 + m.output_gate) / tp
    ffn_local = np.maximum(m.ffn, m.moe_ffn * (m.top_k + m.shared_experts)) / tp
    working = chunk_tokens * (2 * m.hidden + np.maximum(q_local + L.kv_pair_local(m, tp), m.mlp_mats * ffn_local)) * M.ACT_BYTES
    capacity, fraction = p.hw["memory_capacity_bytes"], w["kv_memory_fraction"]
    # vLLM and SGLang take their share of the whole GPU; TensorRT-LLM its share of what is left
    free = np.where(w["kv_fraction_of_free"], fraction * (capacity - weights - working),
                    fraction * capacity - weights - working)
    return np.floor(np.maximum(free, 0.0) / per_request), weights, per_request


def reason_codes(m, w, tp, pp, dp, ep, gpus):
    checks = [
        (RC["split"], np.abs(tp * pp * dp - gpus) > 0.5),
        (RC["tp_heads"], ~divides(tp, m.heads)),
        (RC["tp_kv_heads"], ~(divides(tp, m.kv_heads) | divides(m.kv_heads, tp))),
        (RC["ep_dp"], ~L.serving_ep_valid(ep, dp, tp)),
        (RC["ep_experts"], m.is_moe & ~divides(ep, m.experts)),
        (RC["ep_dense"], (ep > 1) & ~m.is_moe),
    ]
    return first_failure(checks, not_positive_integers(tp, pp, dp, ep, w["isl"], w["osl"]), RC["not_integer"])


def _iteration(p, net, place, w, m, c, pp, layers_per_stage, prefill_seqs):
    """Seconds of one engine iteration of a replica holding c requests: pp stages in turn, each on
    c/pp of them (steady-state pipeline), with `prefill_seqs` prompts (fractions: chunks) riding along."""
    ctx = w["isl"] + w["osl"] / 2.0
    return pp * stage_s(p, net, place, c / pp, 1.0 + w["spec_draft_tokens"], prefill_seqs / pp, w["isl"], ctx,
                        layers_per_stage, pp)


def waves(p, net, place, w, m, c, pp, layers, budget):
    """(prefill batch, decode iteration, prefill batches) of a prefill-first engine (SGLang) holding
    c requests of a closed loop of equal-length requests: the c requests of a wave arrive together,
    their prompts run as prefill-only batches of the token budget while no one decodes, then all c
    decode together, finish together and are replaced together."""
    isl = w["isl"]
    chunk = np.minimum(budget, c * isl)                      # prompt tokens of one prefill batch
    t_batch = _iteration(p, net, place, w, m, 0.0, pp, layers, chunk / isl)
    t_decode = _iteration(p, net, place, w, m, c, pp, layers, 0.0)
    return t_batch, t_decode, c * isl / chunk                # the last batch a remainder


def aggregated(w, m, net, tp, pp, dp, ep):
    """Continuous batching with chunked prefill on one pool (module docstring)."""
    p = Pass(w, m, tp, ep, dp)
    place = Placement(p.hw["scaleup_domain"], tp, 1.0, p.a2a, pp, dp)
    layers = np.ceil(m.layers / pp - 1e-6)
    isl, osl = w["isl"], w["osl"]
    max_seqs, budget = engine_limits(p, w, m, tp, pp)
    verify, a = 1.0 + w["spec_draft_tokens"], 1.0 + w["spec_acceptance"]
    kv_seqs, weights, per_request = kv_capacity(p, w, m, tp, pp, ep, isl + osl, budget, layers)
    c_cap = np.minimum(np.minimum(kv_seqs, max_seqs), np.floor(budget / (verify + isl * a / osl)))
    offered = w["concurrency"] / dp
    c = np.maximum(np.where(np.isnan(offered), c_cap, np.minimum(offered, c_cap)), 1.0)

    def prompt_room(c):
        """(prompt tokens one iteration can take, share of iterations carrying a prompt chunk) at c."""
        room = np.maximum(budget - c * verify, 1.0)
        return room, c * a / osl * isl / np.minimum(room, isl)

    def steady(c):
        """(mean iteration, iteration carrying a full chunk, seconds of a prompt's iterations as a
        function of its tokens, request lifetime) at c. Where fewer than every iteration carries a
        chunk, the mean is the chunk-carrying and the decode-only iterations in their proportions,
        not one iteration with the prompt tokens spread over all of them: an MoE layer's expert reads grow slower than its
        tokens (the experts a batch touches), so the spread-out average would read experts no
        iteration reads. A prompt takes ceil(tokens / room) iterations, each a decode iteration plus
        its chunk's share of the prompt work (the last chunk is a remainder, not a full room)."""
        room, chunked = prompt_room(c)
        chunk = np.minimum(room, isl)
        t_prompt = _iteration(p, net, place, w, m, c, pp, layers, chunk / isl)
        t_decode = _iteration(p, net, place, w, m, c, pp, layers, 0.0)
        t_iter = chunked * t_prompt + (1.0 - chunked) * t_decode
        if np.any(chunked >= 1.0):   # more than a prompt per iteration: the prompts ride along in each
            t_iter = np.where(chunked < 1.0, t_iter, _iteration(p, net, place, w, m, c, pp, layers, c * a / osl))

        def prompt_s(tokens):
            return np.ceil(tokens / room) * t_decode + tokens / chunk * (t_prompt - t_decode)
        return t_iter, t_prompt, prompt_s, prompt_s(isl) + osl / a * t_iter

    t_iter, t_prompt, prompt_s, lifetime = steady(c)
    arrivals = w["request_rate"] / dp                            # open loop: requests per second per replica
    overloaded = np.zeros(np.shape(c), dtype=bool)
    if np.any(~np.isnan(arrivals)):                              # Little's law: in flight = rate x lifetime
        overloaded = arrivals * lifetime > c_cap                 # more than the replica holds at capacity
        for _ in range(4):
            c = np.where(np.isnan(arrivals), c, np.clip(arrivals * lifetime, 1.0, np.maximum(c_cap, 1.0)))
            t_iter, t_prompt, prompt_s, lifetime = steady(c)
    waiting = np.maximum(np.nan_to_num(offered, nan=0.0) - c, 0.0)
    wait = waiting * lifetime / c                                # offered beyond capacity queue for a slot
    ttft = prompt_s(isl) + wait
    _, chunked = prompt_room(c)
    long_prompt = prompt_s(isl + P90_Z * w["isl_std"])   # a 90th-percentile prompt
    rate = np.where(np.isnan(arrivals), dp * c / lifetime, np.minimum(w["request_rate"], dp * c / lifetime))
    gpus = dp * tp * pp
    # a token's step carries a prompt chunk in the share of iterations that do: the p90 TPOT is that
    # iteration's once more than a tenth of them carry one
    tpot_p90 = np.where(chunked > 0.1, t_prompt, t_iter) / a
    out = dict(batch=c, iteration_s=t_iter, ttft_s=ttft + 0.5 * t_iter, tpot_p90_s=tpot_p90,
               ttft_p90_s=long_prompt + wait + 0.9 * t_iter, tpot_s=t_iter / a, requests_per_s=rate)
    in_waves = w["prefill_first"] & np.isnan(arrivals) & ~(w["isl_std"] > 0)
    if np.any(in_waves):
        # a request's TPOT carries the wave's prefill batches after its own (half of them on average,
        # nine tenths at the p90), its TTFT the batches up to its own
        t_batch, t_decode, batches = waves(p, net, place, w, m, c, pp, layers, budget)
        after, tokens = np.ceil(batches - 1e-9) - 1.0, np.maximum(osl - 1.0, 1.0)
        steps = np.maximum(osl - 1.0, 0.0) / a                   # decode iterations after the first token
        decode = steps * t_decode
        period = batches * t_batch + decode
        wait = waiting * period / c
        wave = dict(batch=c, iteration_s=period / (after + 1.0 + steps),
                    ttft_s=0.5 * (after + 2.0) * t_batch + wait, ttft_p90_s=(0.9 * after + 1.0) * t_batch + wait,
                    tpot_s=(0.5 * after * t_batch + decode) / tokens, tpot_p90_s=(0.9 * after * t_batch + decode) / tokens,
                    requests_per_s=dp * c / period)
        out = {k: np.where(in_waves, wave[k], v) for k, v in out.items()}
    rate = out["requests_per_s"]
    return dict(out, overloaded=overloaded, prefill_tokens_per_s_per_gpu=rate * isl / gpus,
                decode_tokens_per_s_per_gpu=rate * osl / gpus,
                kv_transfer_s=np.zeros_like(t_iter), kv_capacity_seqs=kv_seqs, weights_bytes=weights,
                kv_cache_bytes=c * per_request, fits_kv=kv_seqs >= 1)


def disaggregated(w, m, net, tp, pp, ep):
    """Prefill and decode on separate pools (module docstring)."""
    p_tp, p_ep = np.maximum(w["prefill_tp"], 1), np.maximum(w["prefill_ep"], 1)
    p_gpus, d_gpus = w["prefill_gpus"], w["decode_gpus"]
    isl, osl = w["isl"], w["osl"]
    verify, a = 1.0 + w["spec_draft_tokens"], 1.0 + w["spec_acceptance"]
    # prefill instances: batches of whole prompts filling the token budget
    pre = Pass(w, m, p_tp, p_ep, np.floor(p_gpus / p_tp))
    _, budget = engine_limits(pre, w, m, p_tp, 1.0)
    pre_place = Placement(pre.hw["scaleup_domain"], p_tp, 1.0, pre.a2a, 1.0, p_gpus / p_tp)
    batch = np.maximum(np.floor(budget / isl), 1.0)
    t_pre = stage_s(pre, net, pre_place, 0.0, 1.0, batch, isl, isl, m.layers, 1.0)
    pre_rate = np.floor(p_gpus / p_tp) * batch / t_pre
    pre_kv, pre_weights, _ = kv_capacity(pre, w, m, p_tp, 1.0, p_ep, isl, budget, m.layers)
    # decode replicas: no prompt work, as many requests as fit
    dp = d_gpus / (tp * pp)
    dec = Pass(w, m, tp, ep, dp)
    place = Placement(dec.hw["scaleup_domain"], tp, 1.0, dec.a2a, pp, dp)
    layers = np.ceil(m.layers / pp - 1e-6)
    max_seqs, dec_budget = engine_limits(dec, w, m, tp, pp)
    kv_seqs, weights, per_request = kv_capacity(dec, w, m, tp, pp, ep, isl + osl, np.maximum(dec_budget / 8, 1), layers)
    c_cap = np.minimum(np.minimum(kv_seqs, max_seqs), np.floor(dec_budget / verify))
    offered = w["concurrency"] / dp
    c = np.maximum(np.where(np.isnan(offered), c_cap, np.minimum(offered, c_cap)), 1.0)
    t_iter = _iteration(dec, net, place, w, m, c, pp, layers, 0.0)
    dec_rate = dp * c * a / (osl * t_iter)
    rate = np.minimum(pre_rate, dec_rate)
    # the request's KV cache (every layer, every KV head) leaves its prefill instance's GPUs
    kv_bytes = isl * M.kv_cache_bytes_per_token(m, 1.0, pre.kv_bytes) * m.layers * m.attention_fraction
    inside = p_gpus + d_gpus <= pre.hw["scaleup_domain"]
    link = np.where(inside, pre.hw["scaleup_bandwidth_bytes_per_s"],
                    pre.hw["scaleout_bandwidth_bytes_per_s"] * pre.hw["scaleout_efficiency"])
    transfer = kv_bytes / (p_tp * link) + np.where(inside, pre.hw["scaleup_latency_s"], pre.hw["scaleout_latency_s"])
    waiting = np.maximum(np.nan_to_num(offered, nan=0.0) - c, 0.0)
    wait = waiting * osl / a * t_iter / c
    ttft = 1.5 * t_pre + transfer + wait                     # its batch, and half a batch before it
    p90 = ttft + 0.4 * t_pre + P90_Z * w["isl_std"] / isl * (t_pre + transfer)   # a longer prompt, later in a batch
    offered_rate = w["request_rate"]
    overloaded = ~np.isnan(offered_rate) & (offered_rate > rate)
    rate = np.where(np.isnan(offered_rate), rate, np.minimum(offered_rate, rate))
    return dict(batch=c, iteration_s=t_iter, ttft_s=ttft, ttft_p90_s=p90, tpot_s=t_iter / a, tpot_p90_s=t_iter / a,
                overloaded=overloaded,
                requests_per_s=rate, kv_transfer_s=transfer, kv_capacity_seqs=kv_seqs, weights_bytes=weights,
                prefill_tokens_per_s_per_gpu=pre_rate * isl / p_gpus, decode_tokens_per_s_per_gpu=dec_rate * osl / d_gpus,
                kv_cache_bytes=c * per_request, fits_kv=(kv_seqs >= 1) & (pre_kv >= 1),
                prefill_weights_bytes=pre_weights)


def _pick(mask, when_true: dict | None, when_false: dict | None, key):
    if when_true is None:
        return when_false[key]
    if when_false is None:
        return when_true[key]
    return np.where(mask, when_true[key], when_false[key])


def serving_columns(w: dict) -> dict:
    m = Model(w)
    disagg = np.asarray(w["disaggregated"], dtype=bool)
    gpus, tp, pp, ep = w["gpus"], w["tp"], w["pp"], w["ep"]
    total = np.where(disagg, w["prefill_gpus"] + w["decode_gpus"], gpus)
    serving_gpus = np.where(disagg, w["decode_gpus"], gpus)
    dp = serving_gpus / np.maximum(tp * pp, 1)
    reason = reason_codes(m, w, tp, pp, np.where(disagg, np.floor(dp), dp), ep, serving_gpus)
    p_tp = w["prefill_tp"]
    bad_pool = disagg & (not_positive_integers(w["prefill_gpus"], w["decode_gpus"], p_tp, w["prefill_ep"])
                         | ~divides(p_tp, w["prefill_gpus"]) | ~divides(p_tp, m.heads))
    reason = np.where((reason == 0) & bad_pool, RC["disaggregation"], reason).astype(np.int8)
    tp, pp, ep, dp = (np.maximum(x, 1) for x in (tp, pp, ep, dp))
    net = Network(w, overhead_s=real(w["collective_overhead_s"]), custom_all_reduce=w["custom_all_reduce"])
    agg = aggregated(w, m, net, tp, pp, dp, ep) if not np.all(disagg) else None
    dis = disaggregated(w, m, net, tp, pp, ep) if np.any(disagg) else None
    out = {k: _pick(disagg, dis, agg, k) for k in ("batch", "iteration_s", "ttft_s", "ttft_p90_s", "tpot_s", "tpot_p90_s",
                                                   "requests_per_s", "kv_transfer_s", "kv_capacity_seqs",
                                                   "weights_bytes", "kv_cache_bytes", "fits_kv", "overloaded",
                                                   "prefill_tokens_per_s_per_gpu", "decode_tokens_per_s_per_gpu")}
    oom = (reason == 0) & ~out.pop("fits_kv")
    reason = np.where(oom, RC["out_of_memory"], reason).astype(np.int8)
    reason = np.where((reason == 0) & out.pop("overloaded"), RC["overloaded"], reason).astype(np.int8)
    tokens_per_s = out["requests_per_s"] * w["osl"]
    out.update(output_tokens_per_s=tokens_per_s, output_tokens_per_s_per_gpu=tokens_per_s / total,
               output_tokens_per_s_per_user=1.0 / out["tpot_s"], serving_gpus=total,
               fits=reason == 0, infeasible_code=reason, params=m.total_params, active_params=m.active_params)
    return out


OUTPUT_COLUMNS = (
    "batch", "iteration_s", "ttft_s", "ttft_p90_s", "tpot_s", "tpot_p90_s", "requests_per_s", "output_tokens_per_s",
    "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user", "prefill_tokens_per_s_per_gpu",
    "decode_tokens_per_s_per_gpu", "kv_transfer_s", "kv_capacity_seqs",
    "kv_cache_bytes", "weights_bytes", "serving_gpus", "fits", "infeasible_code", "infeasible_reason",
    "params", "active_params", "accelerator_cost_usd", "system_capex_usd", "energy_j", "cost_per_run_usd",
    "cost_per_million_tokens_usd",
)
