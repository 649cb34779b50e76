"""Expert parallelism as frameworks run it: the token dispatcher, all-to-all overlap, host-bound
MoE layers, and the invariants the MoE and context-parallel terms must keep."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse.perf.collectives import COLLECTIVE_OPS, Network

# A fine-grained MoE (Qwen3-30B-A3B's shape, fewer layers): 128 experts, top-8, expert FFN 768.
MOE = dict(layers=8, hidden=2048, heads=32, kv_heads=4, head_dim=128, ffn_hidden=6144, vocab=151936,
           seq_len=4096, experts=128, top_k=8, moe_ffn_hidden=768, gated_mlp=1)


def train(**kw) -> pd.DataFrame:
    row = dict(MOE, system="b200", gpus=8, tp=1, pp=1, ep=8, global_batch=8, micro_batch=1, precision="bf16")
    row.update(kw)
    return dse.evaluate_training(pd.DataFrame([row]))


def fitted(rows, eff, floor, half_bytes, copy) -> dict:
    """The same fitted parameters for every collective op."""
    out = {}
    for op in COLLECTIVE_OPS:
        out.update({f"{op}_efficiency": np.full(rows, eff), f"{op}_floor_s": np.full(rows, floor),
                    f"{op}_half_bytes": np.full(rows, half_bytes), f"{op}_local_copy_fraction": np.full(rows, copy)})
    return out


def network(domain, rows=1) -> Network:
    cols = {**fitted(rows, eff=0.8, floor=20e-6, half_bytes=1e6, copy=0.1),
            "scaleup_domain": np.full(rows, float(domain)), "scaleup_latency_s": np.full(rows, 3e-6),
            "scaleup_bandwidth_bytes_per_s": np.full(rows, 450e9), "scaleout_latency_s": np.full(rows, 8e-6),
            "scaleout_bandwidth_bytes_per_s": np.full(rows, 50e9), "scaleout_efficiency": np.full(rows, 0.85),
            "topology_code": np.zeros(rows, dtype=np.int8)}
    return Network(cols)


# ---- the properties the MoE issue names -------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["h100-sxm", "b200", "gb200"]), st.sampled_from([1, 2, 4]),
       st.sampled_from(["bf16", "fp8", "mxfp8"]))
def test_more_experts_per_rank_at_the_same_tokens_is_never_faster(system, micro_batch, precision):
    # The same tokens and top-k per GPU under balanced routing: each GPU computes the same routed
    # pairs, spread over more local experts (smaller grouped GEMMs, more weights to read, more
    # per-expert host work). (With a busiest expert above the mean, more local experts also dilute
    # the busiest rank's excess load, dse.perf.forms.moe.rank_skew, which may win.)
    def moe_time(experts):
        out = train(system=system, experts=experts, micro_batch=micro_batch, global_batch=8 * micro_batch,
                    precision=precision, moe_imbalance=1.0)
        return float(out["compute_s"].iloc[0] + out["host_wait_s"].iloc[0])
    times = [moe_time(e) for e in (16, 32, 64, 128, 256)]
    assert all(b >= a * (1 - 1e-9) for a, b in zip(times, times[1:])), times


def test_a_skew_factor_of_one_gives_the_balanced_time():
    balanced, skewed_one = train(moe_imbalance=1.0), train(moe_imbalance=1.0, framework="default")
    assert float(skewed_one["step_time_s"].iloc[0]) == pytest.approx(float(balanced["step_time_s"].iloc[0]), rel=1e-12)
    heavier = train(moe_imbalance=1.5)
    assert float(heavier["compute_s"].iloc[0]) > float(balanced["compute_s"].iloc[0])
    assert float(heavier["ep_comm_s"].iloc[0]) > float(balanced["ep_comm_s"].iloc[0])


def _moe_s(out):
    return float(out["compute_s"].iloc[0]), float(out["ep_comm_s"].iloc[0])


@settings(max_examples=25, deadline=None)
@given(st.floats(1.0, 3.0), st.floats(1.0, 4.0))
def test_a_capacity_factor_drops_only_the_load_beyond_it(imbalance, capacity):
    # Dropping caps the busiest expert at capacity x the mean: never slower than dropless routing,
    # never faster than balanced routing, and the dropless time where nothing is dropped.
    dropless = _moe_s(train(gpus=64, global_batch=64, moe_imbalance=imbalance))
    capped = _moe_s(train(gpus=64, global_batch=64, moe_imbalance=imbalance, moe_capacity_factor=capacity))
    balanced = _moe_s(train(gpus=64, global_batch=64, moe_imbalance=1.0))
    for d, c, b in zip(dropless, capped, balanced):
        assert b * (1 - 1e-6) <= c <= d * (1 + 1e-6)
    if capacity >= imbalance:
        assert capped == pytest.approx(dropless, rel=1e-6)


def test_padded_experts_compute_their_capacity_and_can_be_graphed():
    balanced = train(gpus=64, global_batch=64, moe_imbalance=1.0)
    padded = train(gpus=64, global_batch=64, moe_imbalance=1.5, moe_capacity_factor=2.0, moe_pad_to_capacity=True)
    same = train(gpus=64, global_batch=64, moe_imbalance=1.5, moe_capacity_factor=1.0, moe_pad_to_capacity=True)
    # capacity 1 padded: every expert exactly at the mean, whatever the routing
    assert _moe_s(same) == pytest.approx(_moe_s(balanced), rel=1e-6)
    # capacity 2: twice the routed pairs computed and exchanged, so more than balanced routing
    assert all(p > b for p, b in zip(_moe_s(padded), _moe_s(balanced)))
    # static shapes: with CUDA graphs the experts' host launches disappear too
    host = dict(gpus=64, global_batch=64, host_layer_s=0.0, host_expert_s=0.05, cuda_graphs=True)
    assert float(train(**host)["host_wait_s"].iloc[0]) > 0
    assert float(train(**host, moe_capacity_factor=1.0, moe_pad_to_capacity=True)["host_wait_s"].iloc[0]) == 0.0


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([8, 16, 32, 64]), st.sampled_from([0, 1, 2]), st.floats(4e6, 1e9), st.sampled_from([2, 6, 8]))
def test_expert_exchange_falls_as_the_scaleup_domain_covers_the_ep_group(n, dispatcher, token_bytes, top_k):
    # A micro-batch of at least 1k tokens of hidden 2k (below that, the hierarchical all-gather's
    # fewer latency steps can beat a flat ring inside one domain by microseconds).
    domains = [g for g in (1, 2, 4, 8, 16, 32, 64, 72) if g <= n] + [n]
    times = [float(network(g).expert_exchange_s(np.array([float(n)]), np.array([float(min(g, n))]), token_bytes,
                                                 top_k, np.array([dispatcher]))[0]) for g in domains]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(times, times[1:])), (domains, times)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(["llama3-8b", "llama3-70b", "mixtral-8x7b"]), st.sampled_from([2048, 8192, 32768]),
       st.sampled_from([1, 2, 8]))
def test_cp_one_gives_zero_cp_time(model, seq_len, tp):
    rows = [dict(model=model, system="h100-sxm", gpus=8 * tp * c, tp=tp, cp=c, global_batch=8, seq_len=seq_len)
            for c in (1, 8)]
    out = dse.evaluate_training(pd.DataFrame(rows))
    assert out["cp_comm_s"].iloc[0] == 0.0
    assert out["cp_comm_s"].iloc[1] >= 0.0


def test_a_ring_longer_than_the_attention_it_hides_behind_is_exposed():
    out = dse.evaluate_training(pd.DataFrame([dict(model="llama3-8b", system="h100-sxm", gpus=8 * c, cp=c,
                                                   global_batch=8, seq_len=4096) for c in (1, 8)]))
    assert out["cp_comm_s"].iloc[0] == 0.0 and out["cp_comm_s"].iloc[1] > 0.0


# ---- the dispatcher, overlap and host settings ---------------------------------------------------

def test_flex_dispatch_sends_each_token_once_per_remote_domain():
    # 64 ranks over 8 domains of 8, top-8: an all-to-all sends 56/64 of the 8 routed copies over the
    # NIC; DeepEP sends a token once to each of the (8 - 1)(1 - (7/8)^8) = 4.7 other domains it reaches.
    net, n, g = network(8), np.array([64.0]), np.array([8.0])
    a2a, flex = (float(net.expert_exchange_s(n, g, 1e8, 8, np.array([d]))[0]) for d in (0, 2))
    assert flex < a2a
    inside = network(64)  # one domain holds the group: every copy crosses the scale-up links either way
    assert float(inside.expert_exchange_s(n, n, 1e8, 8, np.array([2]))[0]) == pytest.approx(
        float(inside.expert_exchange_s(n, n, 1e8, 8, np.array([0]))[0]), rel=1e-9)


def test_node_limited_routing_reaches_at_most_its_groups_domains():
    from dse.perf.collectives import remote_domains
    # DeepSeek-V3 on 8 nodes, one expert group per node: a token's experts come from 4 groups, so
    # it reaches exactly 4 nodes, 7/8 of them other nodes (3.5), against 7(1 - (7/8)^8) = 4.59
    # under uniform routing.
    assert float(remote_domains(8.0, 8.0, 8.0, 4.0)) == pytest.approx(3.5, rel=1e-9)
    assert float(remote_domains(8.0, 8.0)) == pytest.approx(7 * (1 - (7 / 8) ** 8), rel=1e-6)
    # no limit (0 groups, or as many groups allowed as exist) is uniform routing
    for groups, k_g in ((0.0, 0.0), (8.0, 8.0), (1.0, 1.0)):
        assert float(remote_domains(8.0, 8.0, groups, k_g)) == pytest.approx(float(remote_domains(8.0, 8.0)), rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 2, 4, 8, 16, 32]), st.sampled_from([2, 4, 6, 8]), st.sampled_from([4, 8, 16]),
       st.sampled_from([1, 2, 3, 4]))
def test_node_limited_routing_never_reaches_more_domains(domains, top_k, groups, k_g):
    from dse.perf.collectives import remote_domains
    d, k, g, kg = (np.float64(x) for x in (domains, top_k, groups, k_g))
    limited, uniform = float(remote_domains(d, k, g, kg)), float(remote_domains(d, k))
    assert 0.0 <= limited <= uniform + 1e-9
    assert limited <= min(kg * max(d / g, 1.0), d) * (d - 1) / d + 1e-9   # the chosen groups' domains


def test_decode_runs_deepep_low_latency_kernels_without_per_domain_dedup():
    # A pure-decode pass of the flex dispatcher sends every routed copy (DeepEP low latency) to every
    # peer at once: in BF16 (the same bytes per element either way) the all-to-all's volume without its
    # n - 1 serial latencies, so faster than NCCL's all-to-all by at most those latencies; a prefill
    # pass, which deduplicates per domain, is faster than the all-to-all too.
    row = dict(model="deepseek-v3", system="h100-sxm", framework="sglang", precision="bf16", disaggregated=True,
               isl=2000, osl=100, prefill_gpus=32, prefill_tp=1, prefill_ep=32, decode_gpus=72, tp=1, pp=1, ep=72,
               max_num_tokens=16384, experts=288, concurrency=18432.0)
    flex = dse.evaluate_serving(pd.DataFrame([dict(row, moe_dispatcher="flex")]))
    a2a = dse.evaluate_serving(pd.DataFrame([dict(row, moe_dispatcher="alltoall")]))
    flex_tpot, a2a_tpot = float(flex["tpot_s"].iloc[0]), float(a2a["tpot_s"].iloc[0])
    assert flex_tpot < a2a_tpot
    # never below every routed copy bound for the other 8 nodes crossing a 50 GB/s NIC, each way, in
    # each of the 58 MoE layers (256 tokens per GPU, top-8, hidden 7168, BF16)
    assert flex_tpot > 58 * 2 * 256 * 8 * 7168 * 2.0 * 64 / 72 / 50e9
    assert float(flex["prefill_tokens_per_s_per_gpu"].iloc[0]) > float(a2a["prefill_tokens_per_s_per_gpu"].iloc[0])


def test_all_to_all_overlap_never_exposes_more_and_hides_a_short_exchange():
    plain, overlapped = train(gpus=64, global_batch=64), train(gpus=64, global_batch=64, moe_a2a_overlap=True)
    assert float(overlapped["ep_comm_s"].iloc[0]) < float(plain["ep_comm_s"].iloc[0])
    # (float32 steps: where the gradient reduction paces the step, the hidden exchange only moves
    # time into the reduction's exposed tail, and the two steps agree to rounding)
    assert float(overlapped["step_time_s"].iloc[0]) <= float(plain["step_time_s"].iloc[0]) * (1 + 1e-6)


def test_host_bound_layers_pace_the_step_and_cuda_graphs_remove_the_dense_part():
    eager = train(host_layer_s=0.05, host_expert_s=0.0)          # 50 ms of host work per layer
    assert float(eager["host_wait_s"].iloc[0]) > 0
    # one micro-batch of 8 layers on one stage: the host's 8 x 50 ms, then the optimizer step
    assert float(eager["step_time_s"].iloc[0]) == pytest.approx(8 * 0.05 + float(eager["optimizer_s"].iloc[0]), rel=1e-6)
    graphed = train(host_layer_s=0.05, host_expert_s=0.0, cuda_graphs=True)
    assert float(graphed["host_wait_s"].iloc[0]) == 0.0
    free = train(host_layer_s=0.0, host_expert_s=0.0)
    assert float(free["step_time_s"].iloc[0]) == pytest.approx(float(graphed["step_time_s"].iloc[0]), rel=1e-12)


def test_a_dropless_moe_layer_waits_for_the_host_to_launch_its_experts_after_the_dispatch_sync():
    # The dispatcher's sync stops the host running ahead: with 1 ms of host time per local expert
    # (forward and backward) and 16 local experts, each of the 8 layers' forwards waits for the
    # experts' forward launches (a third of it: one grouped GEMM forward, two backward) beyond the
    # GPU time of the experts and their exchange, even where the GPU paces the step as a whole.
    kw = dict(host_layer_s=0.0, host_expert_s=0.001, cuda_graphs=True, global_batch=64, micro_batch=4)
    out, free = train(**kw), train(**dict(kw, host_expert_s=0.0))
    launch = 16 * 0.001 / 3
    wait = float(out["host_wait_s"].iloc[0])
    assert 0 < wait < 2 * 8 * launch          # two micro-batches of 8 layers
    assert float(out["step_time_s"].iloc[0]) == pytest.approx(float(free["step_time_s"].iloc[0]) + wait, rel=1e-5)
    # experts padded to a fixed capacity have static sizes (no sync); under the all-to-all overlap
    # the other micro-batch's queued backward keeps the GPU busy through it; a dense model has none
    padded = train(**kw, moe_capacity_factor=1.0, moe_pad_to_capacity=True)
    overlapped = train(**dict(kw, gpus=64, pp=2), moe_a2a_overlap=True, host_chunk_s=0.0)
    dense = train(**kw, experts=0, ep=1)
    assert [float(o["host_wait_s"].iloc[0]) for o in (padded, overlapped, dense)] == [0.0, 0.0, 0.0]
    # a re-run MoE block (full recompute) syncs again in the recompute
    assert float(train(**kw, recompute="full")["host_wait_s"].iloc[0]) > wait


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 2, 4]), st.floats(0.0, 0.1), st.booleans())
def test_the_combined_schedule_pays_its_host_time_per_chunk_and_only_under_the_overlap(vp, chunk_s, moe):
    kw = dict(gpus=64, pp=2, vp=vp, global_batch=64, host_layer_s=0.0, host_expert_s=0.0, host_chunk_s=chunk_s)
    if not moe:
        kw.update(experts=0, ep=1)
    overlapped, free = train(moe_a2a_overlap=True, **kw), train(moe_a2a_overlap=True, **dict(kw, host_chunk_s=0.0))
    plain = train(**kw)
    assert float(plain["step_time_s"].iloc[0]) == pytest.approx(float(train(**dict(kw, host_chunk_s=0.0))["step_time_s"].iloc[0]), rel=1e-12)
    if not moe:   # no token exchange to overlap: the chunk cost never applies
        assert float(overlapped["step_time_s"].iloc[0]) == pytest.approx(float(free["step_time_s"].iloc[0]), rel=1e-12)
        return
    step = float(overlapped["step_time_s"].iloc[0])
    assert step >= float(free["step_time_s"].iloc[0])
    # the host's pace: (2 micro-batches per dp rank of 32, plus the fill) x vp chunks of host_chunk_s,
    # then the optimizer step
    host = (2 + (2 - 1) / vp) * vp * chunk_s + float(overlapped["optimizer_s"].iloc[0])
    assert step >= host * (1 - 1e-6)          # float32 columns


def test_dispatcher_spellings_and_bad_values():
    from dse.errors import ConfigError
    assert float(train(moe_dispatcher="DeepEP")["step_time_s"].iloc[0]) == pytest.approx(
        float(train(moe_dispatcher="flex")["step_time_s"].iloc[0]), rel=1e-12)
    with pytest.raises(ConfigError, match="moe_dispatcher"):
        train(moe_dispatcher="carrier-pigeon")


# ---- serving ----------------------------------------------------------------------------------

def test_decode_streams_only_the_experts_its_tokens_touch():
    # Mixtral 8x7B, top-2 of 8: one sequence's decode step reads about 2 of the 8 experts per layer,
    # close to a model that has only those 2; a batch of 256 touches all 8 and approaches a model
    # whose every token reads all 8 (top-8 of 8).
    base = dict(model="mixtral-8x7b", system="h100-sxm", gpus=2, tp=2, isl=512, osl=128)
    rows = [dict(base, batch=b, experts=e, top_k=k) for b in (1, 256) for e, k in ((8, 2), (2, 2), (8, 8))]
    tpot = dse.evaluate_inference(pd.DataFrame(rows))["tpot_s"].to_numpy()
    one_top2, one_two, one_all = tpot[:3]
    assert one_two <= one_top2 <= 1.2 * one_two
    assert one_top2 < 0.5 * one_all
    many_top2, many_two, many_all = tpot[3:]
    assert many_top2 > 1.3 * many_two and many_top2 < many_all


def test_a_multi_token_prediction_module_costs_a_layer_and_a_head_on_a_balanced_last_stage():
    row = dict(model="deepseek-v3", system="gb200", gpus=256, tp=1, pp=8, vp=4, ep=32, global_batch=2048,
               precision="mxfp8")
    out = dse.evaluate_training(pd.DataFrame([row, dict(row, mtp_layers=0), dict(row, mtp_layers=1),
                                              dict(row, mtp_layers=1, pp=4, vp=1)]))
    step = out["step_time_s"].to_numpy()
    assert step[1] == step[0] and step[2] > step[0]
    # one more layer and head among 61 layers and a head: a few percent, not a whole stage's worth
    assert step[2] < (1 + 1 / 8) * step[0]


def test_one_grouped_gemm_call_launches_every_local_expert_in_torchtitan():
    # Megatron-Core's grouped linear launches per local expert (host_expert_s), torchtitan's
    # torch._grouped_mm once for all of them: 32 local experts at a small micro-batch are host-paced
    # in the one and not in the other.
    kw = dict(experts=256, host_layer_s=0.0, zero=1, micro_batch=1, global_batch=8)
    assert float(train(framework="megatron-bridge", **kw)["host_wait_s"].iloc[0]) > 0
    assert float(train(framework="torchtitan", **kw)["host_wait_s"].iloc[0]) == 0.0


def test_the_all_to_all_dispatcher_sorts_received_rows_by_local_expert():
    # Megatron-Core's all-to-all dispatcher copies the rows it received into local-expert order and
    # back (sort_chunks_by_idxs), forward and backward; DeepEP's flex dispatcher delivers them in
    # order, and one expert per GPU needs no sort. The exchange itself is costed apart (ep_comm_s).
    def compute(**kw):
        return float(train(**kw)["compute_s"].iloc[0])
    assert compute(moe_dispatcher="alltoall") > compute(moe_dispatcher="flex")
    one_each = dict(experts=8, top_k=2)   # 8 experts over EP 8
    assert compute(moe_dispatcher="alltoall", **one_each) == pytest.approx(compute(moe_dispatcher="flex", **one_each), rel=1e-6)


def test_a_multi_token_prediction_module_projects_its_two_inputs_beyond_a_layer_and_a_head():
    # Megatron-Core's MTP module adds to its transformer layer and output head the norms of the
    # embedding and hidden state and eh_proj, a 2h x h GEMM: 2h^2 weights against the ~13h^2 of a
    # Llama 3.1 8B layer (0.15 of its GEMMs). A head's worth is what doubling the vocabulary adds.
    base = dict(model="llama3.1-8b", system="h100-sxm", framework="megatron-bridge", gpus=8, global_batch=64)
    rows = [base, dict(base, mtp_layers=1), dict(base, layers=33), dict(base, vocab=2 * 128256)]
    plain, mtp, layer, head = dse.evaluate_training(pd.DataFrame(rows))["compute_s"].to_numpy()
    projection = (mtp - plain) - (layer - plain) - (head - plain)
    assert 0.05 < projection / (layer - plain) < 0.25


def test_a_multi_token_prediction_module_exchanges_tokens_and_recomputes_as_a_layer():
    # On one stage the module's transformer layer adds a layer's exposed exchange and recompute:
    # 62 layers' worth where the model has 61 (dse times every layer as the model's average one).
    row = dict(model="deepseek-v3", system="gb200", gpus=64, tp=1, pp=1, ep=64, global_batch=64,
               precision="mxfp8", recompute="selective", recompute_modules="moe_act")
    out = dse.evaluate_training(pd.DataFrame([row, dict(row, mtp_layers=1)]))
    for column in ("ep_comm_s", "recompute_s"):
        with_mtp, without = (float(v) for v in out[column].iloc[[1, 0]])
        assert with_mtp == pytest.approx(without * 62 / 61, rel=1e-5), column


def test_a_multi_token_prediction_module_is_a_whole_transformer_layer_in_a_hybrid_too():
    """Hybrids whose layers are one block each (Nemotron-H: a mixer or an MLP) count an MTP module
    (Nemotron 3 Super's "*E": attention and MoE) as two of them: a Llama written as 64 one-block
    layers is the same job as its 32 two-block layers, with or without the module."""
    base = dict(model="llama3.1-8b", system="h100-sxm", framework="megatron-bridge", gpus=8, global_batch=64)
    split = dict(layers=64, attention_layer_fraction=0.5, mlp_layer_fraction=0.5)
    out = dse.evaluate_training(pd.DataFrame([dict(base, mtp_layers=k, **extra) for k in (0, 1)
                                              for extra in ({}, split)]))
    step = out["step_time_s"].to_numpy()
    assert step[1] == pytest.approx(step[0], rel=1e-3) and step[3] == pytest.approx(step[2], rel=1e-3)
    assert step[2] > step[0]


def test_serving_skew_paces_the_busiest_expert_parallel_rank():
    # The busiest expert's load over the mean (moe_imbalance; 1 for EPLB-balanced engines, ~10 for
    # AIConfigurator's power-law traffic) slows the prefill of a wide expert-parallel group, whose
    # busiest rank everyone waits for, and on one GPU holding every expert there is no busiest rank:
    # its prefill moves by less than 1% (the experts skew leaves idle skip their per-expert costs).
    base = dict(model="deepseek-v3", system="h100-sxm", framework="sglang", precision="fp8-block", disaggregated=True,
                isl=2048, osl=100, prefill_gpus=32, prefill_tp=1, prefill_ep=32, decode_gpus=72, tp=1, pp=1, ep=72,
                max_num_tokens=16384, experts=288, moe_dispatcher="flex")
    rate = lambda **kw: float(dse.evaluate_serving(pd.DataFrame([dict(base, **kw)]))["prefill_tokens_per_s_per_gpu"].iloc[0])  # noqa: E731
    assert rate(moe_imbalance=4.0) < rate(moe_imbalance=2.0) < rate(moe_imbalance=1.0)
    one_gpu = dict(model="qwen3-30b-a3b", system="h100-sxm", framework="vllm", batch=8, isl=2048, osl=64, tp=1, gpus=1)
    first = lambda **kw: float(dse.evaluate_inference(pd.DataFrame([dict(one_gpu, **kw)]))["ttft_s"].iloc[0])  # noqa: E731
    assert first(moe_imbalance=4.0) == pytest.approx(first(moe_imbalance=1.0), rel=0.01)


def test_skewed_routing_leaves_experts_idle_as_the_power_law_fits_say():
    # dse calibrate fits, per GPU, the alpha-1.01 power-law routing of the MoE tables: its busiest
    # expert's load (about 10x the mean) and the share of experts with any traffic (0.91-0.98). The
    # log-linear curve through (1, 1) and that point predicts the alpha-1.2 fits (16-21x) within 0.03.
    from dse.catalog import kernel_fits
    from dse.perf.forms.moe import active_fraction
    fits = kernel_fits()
    fits = fits[fits["family"] == "moe"]
    value = lambda gpu, p: float(fits.loc[(fits["system"] == gpu) & (fits["parameter"] == p), "value"].iloc[0])  # noqa: E731
    gpus = sorted(set(fits.loc[fits["parameter"] == "power_law_1.2_active_expert_fraction", "system"]))
    assert len(gpus) >= 5
    for gpu in gpus:
        curve = lambda m: float(active_fraction(m, value(gpu, "power_law_1.01_busiest_expert_ratio"),  # noqa: E731
                                                value(gpu, "power_law_1.01_active_expert_fraction")))
        assert curve(1.0) == 1.0 and curve(4.0) > curve(10.0)
        assert curve(value(gpu, "power_law_1.2_busiest_expert_ratio")) == pytest.approx(
            value(gpu, "power_law_1.2_active_expert_fraction"), abs=0.03), gpu
    # one GPU decoding a small batch reads only the experts its tokens reach: fewer under skew
    row = dict(model="gpt-oss-120b", system="b200", framework="vllm", expert_precision="mxfp4", tp=1, gpus=1,
               isl=1024, osl=1024, concurrency=64)
    tpot = dse.evaluate_serving(pd.DataFrame([dict(row, moe_imbalance=m) for m in (1.0, 10.0)]))["tpot_s"]
    assert tpot.iloc[1] < tpot.iloc[0]


def test_serving_presets_take_the_calibrated_power_law_skew():
    # The serving engines' routing skew is not set on the validation rows: it is the busiest
    # expert's load that `dse calibrate` fits on the power-law (alpha 1.01) MoE kernel tables, the
    # traffic AIConfigurator assumes for TensorRT-LLM serving, pooled by its median over the GPUs;
    # runs with an expert load balancer state it (SGLang's wide-EP rows: redundant experts)
    from dse.catalog import frameworks, kernel_fits
    fits = kernel_fits()
    ratios = fits.loc[fits["parameter"] == "power_law_1.01_busiest_expert_ratio", "value"].astype(float)
    assert len(ratios) >= 5
    for engine in ("tensorrt-llm", "vllm", "sglang"):
        assert float(frameworks().loc[engine, "moe_imbalance"]) == float(f"{np.median(ratios):.2g}"), engine
    from dse.validate import _read_csv
    table = _read_csv("serving.csv")
    redundant = table["experts"].map(lambda v: float(v) if v else 0.0) > 256
    assert (table.loc[redundant, "dse_routing"] == "eplb").all()
    # with it, TensorRT-LLM's published DeepSeek-R1 max-throughput runs (EP 8, attention DP) within
    # 15%: the H200 run holds its 128 requests per rank in the share of free memory its command
    # gives the cache, and at that batch dse is 12% fast (B200's two within 5%)
    from dse.validate import serving_results
    rows = serving_results().set_index("id").loc[["S006", "S007", "S008"]]
    assert (rows["error_pct"].abs() < 15).all(), rows[["measured", "predicted", "error_pct"]]


# ---- the 1F1B all-to-all overlap: each exchange beside one compute chunk of the other micro-batch ----
@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.floats(0.0, 5e-3), st.floats(1e-4, 5e-3), st.floats(1e-4, 5e-3), st.floats(1e-4, 5e-3),
       st.floats(1e-4, 5e-3))
def test_overlapped_exchanges_hide_only_behind_their_partner_chunks(ep_fwd, attn_fwd, moe_fwd, attn_bwd, moe_bwd):
    from types import SimpleNamespace
    from dse.catalog import constants
    from dse.perf.collectives import overlapped_s
    from dse.perf.training import ep_exposed
    layer = SimpleNamespace(fwd=attn_fwd + moe_fwd, bwd=attn_bwd + moe_bwd, moe_fwd=moe_fwd, moe_bwd=moe_bwd)
    off, on = ({"moe_a2a_overlap": np.array([flag])} for flag in (False, True))
    exposed = float(ep_exposed(on, layer, np.array([ep_fwd]), np.array([False]))[0])
    plain = float(ep_exposed(off, layer, np.array([ep_fwd]), np.array([False]))[0])
    sm = float(constants()["comm_sm_fraction"])
    pooled = float(overlapped_s(2 * ep_fwd, layer.fwd + layer.bwd, sm))   # the whole layer as one window
    assert plain == pytest.approx(2 * ep_fwd)
    assert exposed <= plain + 1e-12                 # overlapping never costs more than the exchanges
    assert exposed >= pooled - 1e-12                # and never hides more than one shared window would
    if ep_fwd / 2 <= min(attn_fwd, moe_fwd, attn_bwd, moe_bwd):   # every exchange fits its partner
        assert exposed == pytest.approx(2 * ep_fwd * sm / (1 - sm))  # only the SMs it holds show


def test_dropless_validation_rows_run_the_dropless_scenario():
    # Megatron-MoE-ModelZoo publishes each long-context Qwen3-235B run twice, forced-balance and
    # dropless (an auxiliary-loss router): the dropless twin takes the dropless-training imbalance
    # of the `default` preset instead of Megatron-Bridge's forced balance, and is the slower one,
    # as measured (295 against 237 TFLOP/s at 16K)
    from dse.catalog import frameworks
    from dse.validate import TRAINING_FILES, _read_csv, training_inputs
    table = pd.concat([_read_csv(f) for f in TRAINING_FILES], ignore_index=True).set_index("id")
    pair = table.loc[["MZ007", "MZ008"]]
    assert pair["measured_value"].astype(float).iloc[1] > pair["measured_value"].astype(float).iloc[0]
    frame, _ = training_inputs(pair)
    assert frame["moe_imbalance"].iloc[1] == float(frameworks().loc["default", "moe_imbalance"])
    assert pd.isna(frame["moe_imbalance"].iloc[0])
    step = dse.evaluate_training(frame.reset_index(drop=True))["step_time_s"].to_numpy()
    assert step[1] > step[0]


def test_grok_rows_run_their_recipes_padded_capacity():
    # DGX Cloud's Grok-1 recipe pads every expert to capacity factor 1.0 (grok1_314b.yaml): each
    # computes exactly its capacity, so the routing skew no longer moves the step, and the BF16
    # rows at 64-2048 GPUs fall within 3% of the published step times
    from dse.validate import TRAINING_FILES, _read_csv, training_inputs, training_results
    table = pd.concat([_read_csv(f) for f in TRAINING_FILES], ignore_index=True).set_index("id")
    rows = table.loc[[f"T0{i}" for i in range(160, 166)]]
    frame, _ = training_inputs(rows)
    assert (frame["moe_capacity_factor"] == 1.0).all() and (frame["moe_pad_to_capacity"] == "yes").all()
    frame = frame.reset_index(drop=True)
    steps = [dse.evaluate_training(frame.assign(moe_imbalance=imb))["step_time_s"].to_numpy() for imb in (1.0, 2.0)]
    np.testing.assert_allclose(steps[0], steps[1], rtol=1e-9)
    errors = training_results().set_index("id").loc[rows.index, "error_pct"]
    assert (errors.abs() < 3).all(), errors


# ---- LatentMoE ------------------------------------------------

def test_latent_moe_runs_the_routed_path_at_the_latent_width():
    """Nemotron 3 Super's LatentMoE: a projection takes each token from the hidden size to the latent
    before dispatch and back after combine. A latent as wide as the hidden state changes nothing but
    adds those two GEMMs; a narrower one shrinks the exchange, the experts' GEMMs and their stored
    activations in proportion, and adds 2 x hidden x latent replicated weights per MoE layer."""
    hidden = 2048   # Qwen3-30B-A3B
    rows = [dict(model="qwen3-30b-a3b", system="h100-sxm", framework="megatron-bridge", gpus=32, ep=32,
                 micro_batch=1, global_batch=64, moe_latent_dim=latent) for latent in (0, hidden, hidden // 4)]
    out = dse.evaluate_training(pd.DataFrame(rows))
    plain, same, narrow = (out.iloc[i] for i in range(3))
    assert same["ep_comm_s"] == pytest.approx(plain["ep_comm_s"], rel=1e-6)
    assert same["compute_s"] > plain["compute_s"]          # the two projections
    assert narrow["ep_comm_s"] < 0.4 * plain["ep_comm_s"]   # a quarter of the bytes, plus latency floors
    assert narrow["compute_s"] < plain["compute_s"] and narrow["activations_bytes"] < plain["activations_bytes"]
    from dse.workload import Model
    cols = {k: np.array([v], dtype=float) for k, v in dict(
        layers=48, hidden=hidden, heads=32, kv_heads=4, head_dim=128, ffn_hidden=6144, vocab=151936, seq_len=4096,
        gated_mlp=1, dropout=0, tied_embeddings=0, learned_pos_emb=0, experts=128, top_k=8, shared_experts=0,
        moe_ffn_hidden=768, moe_layer_interval=1, dense_layers=0, kv_cache_dim=0, attention_layer_fraction=1,
        mlp_layer_fraction=1).items()}
    cols.update({k: np.zeros(1) for k in dse.schema.MODEL_COLUMNS if k not in cols})
    for k in ("mamba_head_dim", "mamba_state_dim", "mamba_groups", "mamba_conv_kernel", "mamba_chunk",
              "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel", "linear_attention_chunk"):
        cols[k] = np.ones(1)
    full, latent = Model(cols), Model({**cols, "moe_latent_dim": np.array([512.0])})
    assert latent.one_expert_params[0] == pytest.approx(full.one_expert_params[0] / 4)
    assert latent.moe_replicated_params[0] - full.moe_replicated_params[0] == pytest.approx(2 * hidden * 512)
    # Megatron-Core builds the projections `duplicated`: every TP rank holds them whole
    from dse.perf.memory import parameters_per_gpu
    one, four = (parameters_per_gpu(latent, np.array([t]), np.ones(1), np.ones(1))[0][0] for t in (1.0, 4.0))
    assert 4 * four - one == pytest.approx(3 * 48 * 2 * hidden * 512, rel=1e-5)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([256, 512, 1024, 1536]), st.sampled_from([1, 8, 32]), st.sampled_from(["alltoall", "flex"]),
       st.sampled_from(["h100-sxm", "gb200"]))
def test_a_narrower_latent_is_never_slower(latent, ep, dispatcher, system):
    """LatentMoE at widths in multiples of 128 below the hidden size (2048): a narrower latent never
    makes a training step longer or the exchange heavier."""
    rows = [dict(model="qwen3-30b-a3b", system=system, framework="megatron-bridge", gpus=32, ep=ep, micro_batch=1,
                 global_batch=64, moe_dispatcher=dispatcher, moe_latent_dim=w) for w in (latent, latent + 512)]
    out = dse.evaluate_training(pd.DataFrame(rows))
    narrow, wide = out.iloc[0], out.iloc[1]
    assert narrow["step_time_s"] <= wide["step_time_s"] * 1.001
    assert narrow["ep_comm_s"] <= wide["ep_comm_s"] * 1.001
