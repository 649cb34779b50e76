"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): each query of an attention layer attends to
the top `sparse_attention_topk` keys a lightning indexer picks, the indexer itself scores every
cached key. Checked as relationships against DeepSeek-V3, the same MLA/MoE model without it: the
sparse model costs a little more where the context is within the top k, much less where attention
dominates, caches an FP8 indexer key beside every latent, and decodes long contexts faster."""
from __future__ import annotations

import pandas as pd
import pytest

import dse
from dse import catalog

V3, V32 = "deepseek-v3", "deepseek-v3.2"


def dense_twin():
    """DeepSeek-V3.2's model columns with the indexer switched off."""
    row = catalog.model(V32)
    return {**{k: row[k] for k in row.index if k not in ("name", "aliases", "source")},
            "sparse_attention_topk": 0, "indexer_heads": 0, "indexer_head_dim": 0}


def train(models, seq_len, **kw):
    frame = pd.DataFrame({"model": models, "system": "h100-sxm", "framework": "megatron-bridge", "gpus": 1024,
                          "pp": 16, "ep": 64, "seq_len": seq_len, "global_batch": 1024, "precision": "fp8",
                          "recompute": "full", **kw})
    return dse.evaluate_training(frame)


def test_the_catalog_rows_carry_the_published_indexer():
    for name, heads in ((V32, 64), ("glm-5", 32)):
        row = catalog.model(name)
        assert row["sparse_attention_topk"] == 2048 and row["indexer_heads"] == heads and row["indexer_head_dim"] == 128


def test_switching_the_indexer_off_gives_the_dense_model():
    mapping = {"system": "h100-sxm", "gpus": 256, "pp": 8, "ep": 32, "seq_len": 32768, "cp": 4, "global_batch": 256}
    twin = dse.evaluate_training(pd.DataFrame([{**dense_twin(), **mapping}]))
    sparse = dse.evaluate_training(pd.DataFrame([{"model": V32, **mapping}]))
    v3 = dse.evaluate_training(pd.DataFrame([{"model": V3, **mapping}]))
    assert twin["params"].iloc[0] < sparse["params"].iloc[0]                     # the indexer's weights
    assert twin["params"].iloc[0] == pytest.approx(v3["params"].iloc[0], rel=1e-9)   # DeepSeek-V3's
    assert twin["compute_s"].iloc[0] > 1.3 * sparse["compute_s"].iloc[0]     # dense attention over 32K keys


def test_within_the_top_k_sparse_attention_only_adds_work():
    """Every query of a 2,048-token sequence sees at most 2,048 keys, so nothing is skipped: the
    indexer adds its scores and the absorbed form (scores over the 576-wide latent, values over 512,
    per head) more FLOPs per key than MLA's up-projected 192 + 128, on a model the MoE layers dominate."""
    out = train([V3, V32], 2048)
    assert out["step_time_s"].iloc[0] < out["step_time_s"].iloc[1] < 1.25 * out["step_time_s"].iloc[0]


@pytest.mark.parametrize("seq_len, cp", [(32768, 4), (131072, 16)])
def test_long_sequences_train_faster_sparse(seq_len, cp):
    out = train([V3, V32], seq_len, cp=cp, global_batch=256)
    assert out["compute_s"].iloc[1] < 0.7 * out["compute_s"].iloc[0]
    assert out["step_time_s"].iloc[1] < out["step_time_s"].iloc[0]


def test_the_cache_holds_every_key_and_an_fp8_indexer_key_beside_it():
    frame = pd.DataFrame({"model": [V3, V32], "system": "h200", "gpus": 8, "tp": 8, "batch": 4, "isl": 65536,
                          "osl": 1024, "kv_precision": "bf16"})
    out = dse.evaluate_inference(frame)
    per_token_v3 = 512 + 64                     # MLA's latent and rotary key, 16-bit
    indexer_key = 128 * 1 + 4                   # 128 FP8 elements and their FP32 scale
    ratio = out["kv_cache_bytes"].iloc[1] / out["kv_cache_bytes"].iloc[0]
    assert ratio == pytest.approx((per_token_v3 * 2 + indexer_key) / (per_token_v3 * 2), rel=1e-6)


def test_decode_reads_the_top_k_not_the_context():
    frame = pd.DataFrame({"model": [V3, V32] * 2, "system": "h200", "framework": "sglang", "gpus": 8, "tp": 1,
                          "dp": 8, "ep": 8, "batch": 64, "isl": [1024, 1024, 65536, 65536], "osl": 256,
                          "precision": "fp8-block", "kv_precision": "fp8"})
    out = dse.evaluate_inference(frame)
    short_v3, short_v32, long_v3, long_v32 = out["tpot_s"]
    assert short_v32 >= short_v3                 # a short context is within the top k: the indexer only adds
    assert long_v32 < 0.8 * long_v3              # 2,048 latents read per query, not 65,536
    assert long_v32 > short_v32                  # the indexer still reads every cached indexer key


def test_model_flops_count_the_indexer_over_every_key_and_attention_over_the_top_k():
    short, long = train([V3, V32], 2048), train([V3, V32], 65536, cp=8, global_batch=256)
    per_token = lambda out, i: out["mfu"].iloc[i] * out["step_time_s"].iloc[i] / out["tokens_per_step"].iloc[i]  # noqa: E731
    assert per_token(short, 1) > per_token(short, 0)        # same attention, plus the indexer's scores
    assert per_token(long, 1) < 0.5 * per_token(long, 0)    # attention stops at 2,048 keys


def test_sparse_mla_runs_absorbed_so_context_parallelism_moves_the_latent():
    """Megatron-Core's DSAttention takes MLA's absorbed (MQA) layout: under all-gather context
    parallelism each rank gathers the 576-wide latent every head shares, not 128 heads' keys and values."""
    frame = pd.DataFrame({"model": [V3, V32], "system": "gb200", "framework": "megatron-bridge", "gpus": 256,
                          "pp": 8, "cp": 32, "ep": 32, "seq_len": 131072, "global_batch": 32, "recompute": "full",
                          "cp_comm": "all_gather"})
    out = dse.evaluate_training(frame)
    dense_kv, latent = 128 * (192 + 128), 512 + 64   # per token: DeepSeek-V3's K and V heads, the shared latent
    assert out["cp_comm_s"].iloc[1] < 2.0 * latent / dense_kv * out["cp_comm_s"].iloc[0]
    assert out["cp_comm_s"].iloc[1] > 0
