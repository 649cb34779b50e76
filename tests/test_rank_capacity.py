"""Per-rank token budget (Megatron-Core moe_expert_rank_capacity_factor with HybridEP): static
per-rank buffers that CUDA graphs capture with the experts, and the tokens beyond the budget dropped."""
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse.perf.forms import moe as MOE

# Megatron-Bridge's Qwen3-235B-A22B B200 MXFP8 recipe (perf_recipes/qwen/b200/qwen3_moe.py: PP 8 x VP 3,
# EP 8, HybridEP); its 2026 full-iteration variant sets moe_expert_rank_capacity_factor 1.5
JOB = dict(model="qwen3-235b-a22b", system="b200", framework="megatron-bridge", precision="mxfp8", gpus=256, tp=1,
           pp=8, vp=3, ep=8, global_batch=8192, micro_batch=1, seq_len=4096, moe_dispatcher="flex", cuda_graphs=True)


def _eval(*rows):
    return dse.evaluate_training(pd.DataFrame(list(rows)))


def test_a_rank_budget_lets_cuda_graphs_capture_the_experts():
    eager, static = (r for _, r in _eval(JOB, dict(JOB, moe_rank_capacity_factor=1.5)).iterrows())
    assert eager["host_wait_s"] > 0          # the experts' launches and the token-count sync pace this step
    assert static["host_wait_s"] == 0
    assert static["step_time_s"] < eager["step_time_s"]
    assert static["compute_s"] == eager["compute_s"]   # balanced routing stays inside the budget


def test_the_budget_drops_the_busiest_ranks_excess_tokens():
    skewed = dict(JOB, ep=64, pp=4, vp=1, moe_imbalance=10.0)   # two local experts: a 5.8x busiest rank
    none, tight, loose = (r for _, r in _eval(skewed, dict(skewed, moe_rank_capacity_factor=1.5),
                                                dict(skewed, moe_rank_capacity_factor=100.0)).iterrows())
    assert tight["compute_s"] < none["compute_s"]
    assert tight["ep_comm_s"] < none["ep_comm_s"]
    assert loose["compute_s"] == none["compute_s"]


@settings(max_examples=60, deadline=None)
@given(st.floats(1.0, 20.0), st.sampled_from([8, 32, 128, 256]), st.sampled_from([1, 8, 64]))
def test_the_expert_ratio_at_a_rank_load_inverts_the_rank_skew(load, experts, ep):
    ratio = MOE.expert_ratio_at_rank_load(load, experts, ep)
    if ratio <= experts / 8:   # rank_skew caps the ratio at experts / top_k (top-8 here)
        assert MOE.rank_skew(ratio, experts, 8, ep) == pytest.approx(load, rel=1e-9)
