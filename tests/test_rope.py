"""The rotary embedding in training: one fused kernel over the queries and keys (Transformer
Engine's fused RoPE), and a YaRN-scaled one (GPT-OSS) as Megatron-Core runs it: Megatron-Bridge
turns RoPE fusion off for position_embedding_type 'yarn', so `_apply_rotary_pos_emb_bshd` runs as
eager element-wise ops; frameworks that fuse or compile it pay the fused kernel only."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

import dse
from dse import catalog
from dse.catalog import hfconfig

CONFIGS = Path(__file__).parent / "configs"
# GPT-OSS-120B's attention on fewer layers: 64 query and 8 KV heads of 64, dense MLP to isolate it
GPT_OSS = dict(layers=4, hidden=2880, heads=64, kv_heads=8, head_dim=64, ffn_hidden=2880, vocab=201088,
               seq_len=4096, gated_mlp=1)
FORWARD, BACKWARD = catalog.constant("yarn_rope_fwd_bytes"), catalog.constant("yarn_rope_bwd_bytes")
FUSED = catalog.constant("rope_fwd_bytes") + catalog.constant("rope_bwd_bytes")
# query and key elements of one micro-batch of 4,096 tokens on the 4 layers
ELEMENTS = GPT_OSS["layers"] * 4096 * (64 + 8) * 64


def step_s(rows, **kw) -> pd.Series:
    base = {**dict(GPT_OSS, system="h100-sxm", gpus=8, tp=1, pp=1, global_batch=8, micro_batch=1,
                   precision="bf16", framework="megatron-bridge"), **kw}
    return dse.evaluate_training(pd.DataFrame([dict(base, **r) for r in rows]))["step_time_s"]


def added_s(**kw) -> float:
    """Step seconds the eager RoPE adds to a GPT-OSS-shaped training step over the fused kernel."""
    out = step_s([dict(yarn_rope=1), dict(yarn_rope=0)], **kw)
    return float(out.iloc[0] - out.iloc[1])


def hbm_share(moved_bytes, seconds) -> float:
    return moved_bytes / seconds / catalog.system("h100-sxm")["memory_bandwidth_bytes_per_s"]


def test_the_fused_rope_is_a_pass_over_queries_and_keys_absent_with_learned_positions():
    """A RoPE model pays one read and write of each query and key element forward and backward over a
    model with learned position embeddings (GPT-3), at 50-100% of the HBM bandwidth."""
    out = step_s([dict(learned_pos_emb=0), dict(learned_pos_emb=1)])
    # learned positions add their embedding table's gradient and update, far below the RoPE pass
    rope_s = float(out.iloc[0] - out.iloc[1])
    assert 0.5 <= hbm_share(ELEMENTS * FUSED, rope_s) <= 1.05
    # Llama 4 rotates on its chunked layers only (its global layers have no position encoding)
    chunked = step_s([dict(learned_pos_emb=0), dict(learned_pos_emb=1)], chunked_attention_fraction=0.75,
                     attention_chunk=8192)
    # (the learned positions' own cost cancels: a quarter of the layers' RoPE pass is what is left)
    assert 0.5 <= hbm_share(0.25 * ELEMENTS * FUSED, rope_s - float(chunked.iloc[0] - chunked.iloc[1])) <= 1.0


def test_the_eager_rope_moves_its_bytes_at_a_physical_share_of_hbm_bandwidth():
    """Every query and key element (64 x 64 + 8 x 64 per token) read and written as the ops do (24 B
    forward, 34 backward) instead of the fused kernel's, at 50-100% of the part's HBM bandwidth."""
    assert 0.5 <= hbm_share(ELEMENTS * (FORWARD + BACKWARD - FUSED), added_s()) <= 1.0


def test_tensor_parallelism_splits_the_heads_and_their_rope():
    """Each TP rank rotates its own heads: at the same micro-batches per rank (one), the added time
    falls about tp-fold."""
    assert 3.0 <= added_s() / added_s(tp=4, global_batch=2) <= 4.0 * (1 + 1e-6)


def test_a_framework_that_fuses_or_compiles_the_rope_pays_the_fused_kernel_only():
    assert added_s() > 0
    assert added_s(yarn_rope_unfused=False) == 0
    assert added_s(framework="torchtitan", zero=0) == 0
    assert added_s(framework="maxtext") == 0


def test_hugging_face_configs_map_yarn_rope_outside_latent_attention(tmp_path):
    """rope_scaling type 'yarn' is YaRN RoPE (GPT-OSS); Llama 3's own scaling is not, and MLA's YaRN
    RoPE (DeepSeek-V3) runs Megatron-Core's fused MLA kernel."""
    assert hfconfig.model_columns(str(CONFIGS / "gpt-oss-120b" / "config.json"))["yarn_rope"] == 1.0
    assert hfconfig.model_columns(str(CONFIGS / "llama3.1-8b" / "config.json"))["yarn_rope"] == 0.0
    deepseek = json.loads((CONFIGS / "deepseek-v3" / "config.json").read_text())
    assert deepseek["rope_scaling"]["type"] == "yarn"
    assert hfconfig.model_columns(str(CONFIGS / "deepseek-v3" / "config.json"))["yarn_rope"] == 0.0
    qwen = json.loads((CONFIGS / "qwen3-8b" / "config.json").read_text())
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    for key in ("rope_scaling", "rope_parameters"):   # newer transformers releases write the latter
        (tmp_path / "config.json").write_text(json.dumps({**qwen, key: yarn}))
        assert hfconfig.model_columns(str(tmp_path / "config.json"))["yarn_rope"] == 1.0
    assert catalog.model("gpt-oss-120b")["yarn_rope"] == 1
    assert catalog.model("qwen3-30b-a3b")["yarn_rope"] == 0
