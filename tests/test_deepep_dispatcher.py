"""The `deepep` token dispatcher (DeepEP's normal kernels at their own fit, dse.perf.forms.deepep)
and `moe_routing` (how tokens pick their experts, for the exchange's deduplication)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings, strategies as st

import dse
from dse import catalog
from dse.perf.collectives import ranks_reached, remote_domains
from dse.perf.forms.deepep import PARAMS, deepep_time_s, ranks_hit

JOB = dict(model="qwen3-30b-a3b", gpus=8, ep=8, micro_batch=4, global_batch=512, seq_len=4096, precision="bf16",
           framework="megatron-bridge")


def _train(**kw):
    return dse.evaluate_training(pd.DataFrame([dict(JOB, **kw)]))


def test_deepep_inside_one_node_is_the_fitted_kernels_dispatch_and_combine():
    # one H100 node, EP 8: the exchange of one layer's micro-batch is DeepEP's fitted dispatch plus
    # combine of the tokens each rank sends once to every other rank holding one of its experts
    system = catalog.systems().loc["h100-sxm"]
    model = catalog.model("qwen3-30b-a3b")
    tokens = JOB["micro_batch"] * JOB["seq_len"]
    row = model["hidden"] * 2.0                         # one token's BF16 row
    sent = tokens * row * remote_domains(8.0, float(model["top_k"]))
    items = tokens * 7.0
    expected = sum(deepep_time_s(sent, items, catalog.constant("deepep_num_sms"), system["scaleup_bandwidth_bytes_per_s"],
                                 *[system[f"deepep_{d}_{p}"] for p in PARAMS]) for d in ("dispatch", "combine"))
    out = _train(system="h100-sxm", moe_dispatcher="deepep", moe_a2a_overlap=False)
    microbatches = JOB["global_batch"] / JOB["gpus"] / JOB["micro_batch"]
    per_layer = out["ep_comm_s"].iloc[0] / (microbatches * model["layers"] * 2)   # forward and backward exchange
    assert per_layer == pytest.approx(expected, rel=1e-3)


def test_deepep_on_a_part_without_deepep_tables_runs_as_flex():
    assert np.isnan(catalog.systems().loc["a100-80gb", "deepep_dispatch_floor_s"])
    flex, deepep = (_train(system="a100-80gb", moe_dispatcher=d)["ep_comm_s"].iloc[0] for d in ("flex", "deepep"))
    assert deepep == flex > 0


@pytest.mark.parametrize("dispatcher", ["flex", "deepep"])
def test_consecutive_routing_never_costs_more_exchange(dispatcher):
    for gpus, ep in ((8, 8), (64, 64), (256, 32)):
        times = [_train(system="h100-sxm", gpus=gpus, ep=ep, global_batch=gpus * 8, moe_dispatcher=dispatcher,
                        moe_routing=r)["ep_comm_s"].iloc[0] for r in ("random", "consecutive")]
        assert times[1] <= times[0] * (1 + 1e-9)


def test_consecutive_routing_leaves_flex_inside_one_domain_and_alltoall_alone():
    # flex counts every routed copy over the scale-up links and all-to-all sends every copy: neither
    # deduplicates inside a domain, so the routing does not change them there
    for dispatcher, gpus in (("flex", 8), ("alltoall", 8), ("alltoall", 64)):
        a, b = (_train(system="h100-sxm", gpus=gpus, ep=gpus, global_batch=gpus * 8, moe_dispatcher=dispatcher,
                       moe_routing=r)["ep_comm_s"].iloc[0] for r in ("random", "consecutive"))
        assert a == b


@settings(max_examples=60, deadline=None)
@given(ranks=st.integers(2, 64), top_k=st.integers(1, 22), per_rank=st.integers(1, 48))
def test_ranks_reached_stays_between_one_rank_and_the_routed_copies(ranks, top_k, per_rank):
    r, k, e = float(ranks), float(top_k), float(per_rank)
    for routing in (0, 1):
        other = float(ranks_reached(r, k, 0.0, 0.0, e, routing))
        # at most every copy to another rank, never more ranks than there are, never fewer than 0
        assert 0.0 <= other <= min(k, r - 1.0) + 1e-9
    # k consecutive experts never spread wider than k distinct random ones (the exact expectation,
    # dse.perf.forms.deepep.ranks_hit; the uniform form draws with replacement, DeepSeek-V3 report
    # Sec. 3.2.2, and undercounts a token that takes most of the experts)
    assume(top_k <= per_rank * ranks)
    random = ranks_hit(k, e * r, r) * (r - 1.0) / r
    assert ranks_reached(r, k, 0.0, 0.0, e, 1) <= random + 1e-9


def test_consecutive_experts_span_one_rank_plus_the_overflow():
    # 8 consecutive experts of 16 per rank start anywhere in a rank's range: on average they spill into
    # a second rank 7 times in 16 (NeMo AutoModel's FakeBalancedGate on Qwen3-30B at EP 8)
    spanned = 1.0 + 7.0 / 16.0
    assert float(ranks_reached(8.0, 8.0, 0.0, 0.0, 16.0, 1)) == pytest.approx(spanned * 7.0 / 8.0)


def test_serving_decode_runs_deepep_like_flex():
    rows = [dict(model="deepseek-v3", system="h200", tp=1, ep=8, precision="fp8-block", framework="sglang",
                 concurrency=256, isl=1024, osl=1024, moe_dispatcher=d, disaggregated=True, prefill_gpus=8, decode_gpus=8,
                 prefill_tp=1, prefill_ep=8)
            for d in ("flex", "deepep")]
    out = dse.evaluate_serving(pd.DataFrame(rows))
    assert out["fits"].all()
    # the decode pool's passes carry decode tokens alone: DeepEP's low-latency kernels in both
    assert out["tpot_s"].iloc[0] == pytest.approx(out["tpot_s"].iloc[1])


def test_validation_rows_that_name_deepep_run_the_deepep_dispatcher():
    # a measured run whose source names DeepEP (and not HybridEP, which `flex` prices) states the
    # `deepep` dispatcher: the row says what its benchmark ran, not the nearest older setting
    from dse import validate
    files = validate.TRAINING_FILES + validate.SERVING_FILES
    table = pd.concat([validate._read_csv(name) for name in files], ignore_index=True)
    text = table.fillna("").astype(str).apply(" ".join, axis=1)
    flex = table["dse_moe_dispatcher"].fillna("") == "flex"
    names_deepep = text.str.contains("DeepEP") & ~text.str.contains("HybridEP")
    assert not (flex & names_deepep).any(), list(table.loc[flex & names_deepep, "id"])
    assert (table["dse_moe_dispatcher"] == "deepep").sum() >= 20
