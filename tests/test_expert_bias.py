"""Expert biases (GPT-OSS): their parameters, and the FP32 pass Megatron-Core runs to add the
down-projection bias outside the grouped GEMM (TEGroupedMLP._apply_bias)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse import catalog, resolve
from dse.catalog import hfconfig
from dse.workload import Model

# GPT-OSS-120B's expert shape on fewer layers: 128 experts, top-4, hidden = expert FFN = 2880
GPT_OSS = dict(layers=4, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn_hidden=2880, vocab=201088,
               seq_len=4096, experts=128, top_k=4, moe_ffn_hidden=2880, gated_mlp=1)
# bytes per element of the experts' output, forward and backward (constants.csv)
BIAS_BYTES = catalog.constant("expert_bias_fwd_bytes") + catalog.constant("expert_bias_bwd_bytes")


def train(**kw) -> pd.Series:
    row = dict(GPT_OSS, system="h100-sxm", gpus=8, tp=1, pp=1, ep=8, global_batch=8, micro_batch=1,
               precision="bf16", framework="megatron-bridge", moe_imbalance=1.0)
    row.update(kw)
    return dse.evaluate_training(pd.DataFrame([row])).iloc[0]


def test_the_bias_pass_moves_its_bytes_at_a_physical_share_of_hbm_bandwidth():
    """The added step time is every routed pair's hidden-wide output read and written as the ops
    do (64 B per element), at 50-100% of the part's HBM bandwidth: neither free nor faster than
    memory."""
    plain, biased = train(expert_bias=0), train(expert_bias=1)
    added_s = biased["step_time_s"] - plain["step_time_s"]
    pairs = 4096 * 4     # one micro-batch of 4,096 tokens, top-4, balanced over the 8 ranks
    moved = GPT_OSS["layers"] * pairs * GPT_OSS["hidden"] * BIAS_BYTES
    share = moved / added_s / catalog.system("h100-sxm")["memory_bandwidth_bytes_per_s"]
    assert 0.5 <= share <= 1.0


def test_a_framework_that_fuses_the_bias_pays_nothing_for_it():
    """Only the biases' own parameters (optimizer, gradients: 0.03% of the experts') remain."""
    plain = train(expert_bias=0)["step_time_s"]
    fused = train(expert_bias=1, expert_bias_unfused=False)["step_time_s"] - plain
    unfused = train(expert_bias=1)["step_time_s"] - plain
    assert 0 <= fused < 0.02 * unfused


@settings(max_examples=15, deadline=None)
@given(top_k=st.sampled_from([1, 2, 4, 8]), micro_batch=st.sampled_from([1, 2, 4]))
def test_the_bias_pass_grows_with_the_routed_pairs(top_k, micro_batch):
    """Twice the routed pairs (tokens x top-k) per rank: twice the bias pass."""
    def added(k, b):
        return (train(expert_bias=1, top_k=k, micro_batch=b, global_batch=8 * b)["step_time_s"]
                - train(expert_bias=0, top_k=k, micro_batch=b, global_batch=8 * b)["step_time_s"])
    assert added(top_k, micro_batch) > 0
    assert added(2 * top_k, micro_batch) == pytest.approx(2 * added(top_k, micro_batch), rel=0.02)


def gpt_oss_120b(**over) -> Model:
    cols = {"model": np.array(["gpt-oss-120b"], dtype=object)}
    resolve.model(cols)
    cols = {k: np.asarray(v, dtype=float) for k, v in cols.items() if k != "model"}
    return Model({**cols, **{k: np.array([v], dtype=float) for k, v in over.items()}})


def test_expert_biases_add_their_parameters():
    """Each expert's up (gated: 2 x FFN) and down (hidden) biases: 36 layers x 128 experts x
    (2 x 2880 + 2880) = 39.8M on GPT-OSS-120B, 36 x top-4 of them active."""
    with_bias, without = gpt_oss_120b(), gpt_oss_120b(expert_bias=0)
    assert with_bias.total_params[0] - without.total_params[0] == pytest.approx(36 * 128 * 3 * 2880)
    assert with_bias.active_params[0] - without.active_params[0] == pytest.approx(36 * 4 * 3 * 2880)


def test_the_hugging_face_gpt_oss_config_maps_to_expert_biases():
    """transformers' GptOssExperts always carry gate_up_proj_bias and down_proj_bias."""
    config = Path(__file__).parent / "configs" / "gpt-oss-120b" / "config.json"
    assert hfconfig.model_columns(str(config))["expert_bias"] == 1.0
    assert catalog.model("llama3.1-8b")["expert_bias"] == 0
