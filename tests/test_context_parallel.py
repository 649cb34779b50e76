"""Context parallelism as Megatron-Core / Transformer Engine run it (cp_comm_type): the p2p ring,
all-gather, all-to-all (Ulysses) and the hierarchical all-to-all + ring."""
from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse

KINDS = ("p2p", "all_gather", "a2a", "a2a+p2p")


def train(rows) -> pd.DataFrame:
    return dse.evaluate_training(pd.DataFrame(rows))


def point(**kw) -> dict:
    row = dict(model="llama3-8b", system="h100-sxm", gpus=64, tp=2, cp=32, global_batch=2, seq_len=65536)
    row.update(kw)
    return row


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(KINDS), st.sampled_from(["llama3-8b", "llama3-70b"]), st.sampled_from([4096, 32768]))
def test_cp_one_costs_nothing_whatever_the_variant(kind, model, seq_len):
    out = train([point(model=model, gpus=8, tp=8, cp=1, seq_len=seq_len, cp_comm=kind, global_batch=8)])
    assert out["cp_comm_s"].iloc[0] == 0.0


def test_hierarchical_is_the_all_to_all_inside_one_domain_and_the_ring_across_single_ranks():
    # tp 1, cp 8 on GB200 (72 per domain): the whole CP group shares a domain, a2a+p2p = a2a
    inside = train([point(system="gb200", gpus=64, tp=1, cp=8, global_batch=64, cp_comm=k) for k in ("a2a", "a2a+p2p")])
    assert inside["cp_comm_s"].iloc[1] == pytest.approx(inside["cp_comm_s"].iloc[0], rel=1e-6)
    # tp 8 fills each 8-GPU H100 domain: one CP rank per domain, a2a+p2p = the ring
    spread = train([point(model="llama3-70b", gpus=512, tp=8, pp=8, cp=8, global_batch=8, seq_len=131072, cp_comm=k)
                    for k in ("p2p", "a2a+p2p")])
    assert spread["cp_comm_s"].iloc[1] == pytest.approx(spread["cp_comm_s"].iloc[0], rel=1e-6)


def test_all_gather_is_never_hidden_and_costs_more_than_the_ring_it_replaces():
    out = train([point(cp_comm=k) for k in ("p2p", "all_gather")])
    assert out["cp_comm_s"].iloc[1] > out["cp_comm_s"].iloc[0] > 0


def test_gqa_shrinks_the_kv_traffic():
    out = train([point(cp_comm="all_gather", kv_heads=k, heads=32) for k in (8, 32)])
    assert out["cp_comm_s"].iloc[0] < out["cp_comm_s"].iloc[1]


def test_all_to_all_needs_its_group_to_divide_the_heads():
    # llama3-8b: 32 heads over tp 2 = 16 per rank; an all-to-all over 32 CP ranks cannot split them
    out = train([point(cp_comm=k) for k in ("a2a", "a2a+p2p", "p2p")])
    assert out["infeasible_reason"].iloc[0].startswith("all-to-all context parallelism")
    assert out["fits"].iloc[1] and out["fits"].iloc[2]   # 4 ranks per domain divide 16; the ring needs nothing
