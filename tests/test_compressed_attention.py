"""DeepSeek-V4's compressed attention (CSA and HCA layers beside a raw sliding window), its one shared
K = V head, grouped low-rank output projection and hyper-connection residual streams: checked against
the figures DeepSeek publishes for it relative to DeepSeek-V3.2, and as relationships (what each
mechanism must save or cost), never against dse's own numbers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse import catalog, resolve
from dse.perf import memory as M
from dse.workload import Model

FLASH, PRO, V32 = "deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v3.2"
MILLION = np.array([1048576.0])


def model(name_or_cols) -> Model:
    cols = {"model": np.array([name_or_cols], dtype=object)} if isinstance(name_or_cols, str) else dict(name_or_cols)
    resolve.model(cols)
    return Model({k: np.atleast_1d(np.asarray(cols[k], dtype=float)) for k in cols if k != "model"})


def columns(name: str, **changes) -> dict:
    row = catalog.model(name)
    return {**{k: np.array([float(row[k])]) for k in row.index if k not in ("name", "aliases", "source")},
            **{k: np.array([float(v)]) for k, v in changes.items()}}


def cache_bytes(m: Model, context=MILLION, kv_bytes=1.0) -> float:
    return float(M.cache_bytes_per_sequence(m, 1.0, kv_bytes, context)[0] * m.layers[0])


def test_pro_at_a_million_tokens_takes_the_published_share_of_deepseek_v32():
    """DeepSeek-V4 model card: 'in the 1M-token context setting, DeepSeek-V4-Pro requires only 27% of
    single-token inference FLOPs and 10% of KV cache compared with DeepSeek-V3.2' (both rounded; the
    caches compared in one format)."""
    pro, v32 = model(PRO), model(V32)
    flops = pro.forward_flops_per_token(MILLION)[0] / v32.forward_flops_per_token(MILLION)[0]
    assert float(flops) == pytest.approx(0.27, abs=0.02)
    assert cache_bytes(pro) / cache_bytes(v32) == pytest.approx(0.10, abs=0.02)


def test_the_catalog_rows_carry_the_published_layer_pattern():
    """Flash: 2 window-only layers, then CSA and HCA alternating (21 and 20 of 43); Pro: HCA on its
    first 2 layers, then alternating (30 CSA, 31 HCA of 61); one key per 4 and per 128 tokens."""
    for name, layers, window_only, csa, hca in ((FLASH, 43, 2, 21, 20), (PRO, 61, 0, 30, 31)):
        row = catalog.model(name)
        assert row["layers"] == layers and row["sliding_window"] == 128
        assert round(row["sliding_window_fraction"] * layers) == window_only
        assert round(row["csa_layer_fraction"] * layers) == csa and round(row["hca_layer_fraction"] * layers) == hca
        assert (row["csa_compress_ratio"], row["hca_compress_ratio"]) == (4, 128)
        assert row["kv_shared"] == 1 and row["kv_heads"] == 1 and row["residual_streams"] == 4


def test_keys_per_query_are_the_window_and_the_compressed_keys():
    """At 64K tokens a Flash query of a CSA layer attends to its 128 raw keys and the indexer's 512 of
    the 16,384 compressed ones, of an HCA layer to 128 + 512, of a window layer to 128; the cache
    holds 128 + 16,384, 128 + 512 and 128 keys."""
    m, ctx = model(FLASH), np.array([65536.0])
    f = lambda name: float(catalog.model(FLASH)[name])  # noqa: E731
    window, csa, hca = f("sliding_window_fraction"), f("csa_layer_fraction"), f("hca_layer_fraction")
    assert float(m.attention_span(ctx)[0]) == pytest.approx(window * 128 + csa * (128 + 512) + hca * (128 + 512))
    assert float(m.attention_span(ctx, sparse=False)[0]) == pytest.approx(
        window * 128 + csa * (128 + 16384) + hca * (128 + 512))


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=256, max_value=2e6), st.floats(min_value=1.01, max_value=8.0))
def test_longer_context_never_costs_fewer_keys_and_sparsity_never_more(context, longer):
    m = model(FLASH)
    short, long_ = np.array([context]), np.array([context * longer])
    assert m.attention_span(short)[0] <= m.attention_span(long_)[0]
    assert m.attention_span(short, sparse=False)[0] <= m.attention_span(long_, sparse=False)[0]
    assert m.attention_span(long_)[0] <= m.attention_span(long_, sparse=False)[0]
    assert m.attention_span(long_)[0] < long_[0]   # no layer attends to the whole context


def test_a_shared_key_value_head_halves_the_cache_and_the_projection():
    shared, split = model(columns(FLASH)), model(columns(FLASH, kv_shared=0))
    per_key = lambda m: float(M.kv_cache_bytes_per_token(m, 1.0, 1.0)[0])  # noqa: E731  (the indexer's keys apart)
    assert per_key(shared) == 512 and per_key(split) == 1024
    assert float(split.attention_params[0] - shared.attention_params[0]) == pytest.approx(4096 * 512)


def test_the_grouped_low_rank_output_projection_has_fewer_weights_than_a_full_one():
    """Flash's 64 x 512 head outputs to 4,096: 134M weights in one matrix, 67M through 8 groups of 1,024."""
    low, full = model(columns(FLASH)), model(columns(FLASH, o_lora_rank=0))
    assert float(full.o_projection_params[0]) == 64 * 512 * 4096
    assert float(low.o_projection_params[0]) == 64 * 512 * 1024 + 8 * 1024 * 4096


def train(frames):
    base = {"system": "gb200", "framework": "megatron-bridge", "gpus": 64, "ep": 64, "seq_len": 4096,
            "global_batch": 256, "precision": "mxfp8", "recompute": "selective"}
    return dse.evaluate_training(pd.DataFrame([{**f, **base} for f in frames]))   # the mapping's sequence, not the model's


def test_flash_trains_and_more_residual_streams_cost_time_and_memory():
    row = {k: float(v[0]) for k, v in columns(FLASH).items()}
    out = train([row, {**row, "residual_streams": 1}])
    assert out["fits"].all() and np.isfinite(out["step_time_s"]).all()
    assert out["step_time_s"].iloc[0] > out["step_time_s"].iloc[1]
    assert out["activations_bytes"].iloc[0] > out["activations_bytes"].iloc[1]


def test_compressed_attention_decodes_long_contexts_faster_than_full_attention():
    """The same Flash model with its compressed layers made full (every key cached and read) decodes a
    128K context slower and holds a larger cache; the window-only shares stay as they are."""
    full = {k: float(v[0]) for k, v in columns(FLASH, csa_layer_fraction=0, hca_layer_fraction=0,
                                                sparse_attention_topk=0, indexer_heads=0).items()}
    compressed = {k: float(v[0]) for k, v in columns(FLASH).items()}
    frame = pd.DataFrame([{**m, "system": "b200", "gpus": 8, "tp": 8, "batch": 8, "isl": 131072, "osl": 256,
                           "precision": "fp8-block"} for m in (compressed, full)])
    out = dse.evaluate_inference(frame)
    assert out["tpot_s"].iloc[0] < out["tpot_s"].iloc[1]
    assert out["kv_cache_bytes"].iloc[0] < out["kv_cache_bytes"].iloc[1] / 5   # 13% at 128K, less beyond


def test_a_row_gets_the_same_answer_in_a_block_of_other_models_as_alone():
    models = [FLASH, "llama3.1-8b", V32, "nemotron3-super-120b-a12b", PRO]
    base = {"system": "gb200", "framework": "megatron-bridge", "gpus": 256, "ep": 8, "pp": 4, "cp": 2,
            "seq_len": 8192, "global_batch": 512, "precision": "mxfp8", "recompute": "selective"}
    serve = {"system": "b200", "gpus": 8, "tp": 8, "batch": 32, "isl": 65536, "osl": 512, "precision": "fp8-block"}
    for evaluate, mapping, columns_ in ((dse.evaluate_training, base, ("step_time_s", "mem_per_gpu_bytes")),
                                        (dse.evaluate_inference, serve, ("tpot_s", "ttft_s", "kv_cache_bytes"))):
        block = evaluate(pd.DataFrame([{**mapping, "model": m} for m in models]))
        for i, m in enumerate(models):
            alone = evaluate(pd.DataFrame([{**mapping, "model": m}]))
            for c in columns_:
                assert float(block[c].iloc[i]) == pytest.approx(float(alone[c].iloc[0]), rel=1e-5), (m, c)


def test_recomputing_the_up_projections_frees_v4s_query_as_megatron_core_does():
    """Megatron-Bridge's DeepSeek-V4 recipe recomputes `mla_up_proj` (its attention is an MLA subclass
    in Megatron-Core): the 64 x 512 query is re-run from the 1,024 rank, not stored."""
    row = {k: float(v[0]) for k, v in columns(FLASH).items()}
    up, without = train([{**row, "recompute_modules": "layernorm,mla_up_proj"}, {**row, "recompute_modules": "layernorm"}])[
        ["activations_bytes", "recompute_s"]].to_numpy()
    assert up[0] < without[0] and up[1] > without[1]
