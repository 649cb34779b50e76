"""GPT-OSS's clamped SwiGLU: Megatron-Core clamps the gate and linear halves of the routed experts'
gated hidden layer and concatenates them in eager mode before its fused activation
(fused_bias_geglu.weighted_bias_quick_geglu_impl), a memory-bound pass frameworks that compile the
activation (torchtitan, NeMo AutoModel) do not pay."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import dse
from dse import catalog
from dse.catalog import hfconfig

# GPT-OSS-120B's expert shape on fewer layers: 128 experts, top-4, hidden = expert FFN = 2880
GPT_OSS = dict(layers=4, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn_hidden=2880, vocab=201088,
               seq_len=4096, experts=128, top_k=4, moe_ffn_hidden=2880, gated_mlp=1, expert_bias=0)
FORWARD, BACKWARD = catalog.constant("expert_clamp_fwd_bytes"), catalog.constant("expert_clamp_bwd_bytes")


def added_s(**kw) -> float:
    """Step seconds the clamps add to a GPT-OSS-shaped training step."""
    row = {**dict(GPT_OSS, system="h100-sxm", gpus=8, tp=1, pp=1, ep=8, global_batch=8, micro_batch=1,
                  precision="bf16", framework="megatron-bridge", moe_imbalance=1.0), **kw}
    out = dse.evaluate_training(pd.DataFrame([dict(row, expert_clamp=c) for c in (1, 0)]))["step_time_s"]
    return float(out.iloc[0] - out.iloc[1])


def test_the_clamps_move_their_bytes_at_a_physical_share_of_hbm_bandwidth():
    """Every routed pair's gated hidden layer (2 x 2880) read and written as the ops do (8 B per
    element forward, 6 backward), at 50-100% of the part's HBM bandwidth."""
    pairs = 4096 * 4     # one micro-batch of 4,096 tokens, top-4, balanced over the 8 ranks
    moved = GPT_OSS["layers"] * pairs * 2 * GPT_OSS["moe_ffn_hidden"] * (FORWARD + BACKWARD)
    share = moved / added_s() / catalog.system("h100-sxm")["memory_bandwidth_bytes_per_s"]
    assert 0.5 <= share <= 1.0


def test_recomputing_the_experts_activation_reruns_the_clamps_forward():
    """moe_act re-runs the activation, the eager clamps with it: (forward + backward + forward) over
    (forward + backward) of the pass."""
    plain, rerun = added_s(), added_s(recompute="selective", recompute_modules="moe_act")
    # (differences of float32 step times: a few units in the 6th digit)
    assert rerun / plain == pytest.approx((2 * FORWARD + BACKWARD) / (FORWARD + BACKWARD), rel=1e-5)


def test_a_framework_that_compiles_the_activation_pays_nothing_for_the_clamps():
    assert added_s() > 0
    assert added_s(expert_clamp_unfused=False) == 0
    assert added_s(framework="torchtitan", zero=0) == 0


def test_the_hugging_face_gpt_oss_config_maps_to_clamped_experts():
    """config.json's swiglu_limit (7.0) is the clamp; models without it have none."""
    config = Path(__file__).parent / "configs" / "gpt-oss-120b" / "config.json"
    assert hfconfig.model_columns(str(config))["expert_clamp"] == 1.0
    assert catalog.model("gpt-oss-120b")["expert_clamp"] == 1
    assert catalog.model("qwen3-30b-a3b")["expert_clamp"] == 0
