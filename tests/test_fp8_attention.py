"""fp8_attention: the training attention on cuDNN's FP8 kernels (Megatron-Core --fp8-dot-product-attention)."""
from __future__ import annotations

import numpy as np
import pandas as pd

import dse

BASE = {"model": "llama3-8b", "framework": "megatron-bridge", "gpus": 8, "global_batch": 64, "seq_len": 8192,
        "recompute": "selective"}


def _step(**kw) -> pd.DataFrame:
    rows = pd.DataFrame([{**BASE, **kw, "fp8_attention": flag} for flag in (False, True)])
    return dse.evaluate_training(rows)


def test_only_the_attention_of_recipes_that_take_fp8_dpa_changes():
    # Megatron-Core hands fp8_dpa to tensorwise/delayed FP8, MXFP8 and NVFP4 recipes, not to BF16 or
    # blockwise FP8: there the setting changes nothing
    for precision in ("bf16", "fp8-block"):
        out = _step(system="gb200", precision=precision)
        assert out["step_time_s"].iloc[0] == out["step_time_s"].iloc[1], precision
    for precision in ("fp8", "mxfp8", "nvfp4"):
        out = _step(system="gb200", precision=precision)
        assert out["compute_s"].iloc[1] < out["compute_s"].iloc[0], precision
        for term in ("tp_comm_s", "dp_comm_s", "weights_bytes", "model_flops_per_step"):
            assert out[term].iloc[1] == out[term].iloc[0], term


def test_fp8_attention_stores_q_k_v_in_one_byte():
    # Transformer Engine's FusedAttnFunc saves the FP8 Q, K and V for an FP8 backward instead of the
    # 16-bit ones: one byte less per element, every layer of the in-flight micro-batch (pp 1, tp 1)
    from dse import catalog
    m = catalog.model("llama3-8b")
    out = _step(system="gb200", precision="fp8")
    per_token_layer = (m["heads"] + 2 * m["kv_heads"]) * m["head_dim"]
    saved = m["layers"] * BASE["seq_len"] * per_token_layer
    assert out["activations_bytes"].iloc[0] - out["activations_bytes"].iloc[1] == saved


def test_on_hopper_fp8_attention_costs_time_at_8k_and_a_part_without_the_fit_keeps_bf16():
    # cuDNN 9.19's FP8 backward on H200 runs below its BF16 one from 8K tokens (1.26x slower at 8K,
    # against a 1.50x faster forward): the step lengthens; the A100 has no FP8 kernels to fit
    h100 = _step(system="h100-sxm", precision="fp8")
    assert h100["step_time_s"].iloc[1] > h100["step_time_s"].iloc[0]
    a100 = _step(system="a100-80gb", precision="bf16")
    assert np.isclose(a100["step_time_s"].iloc[0], a100["step_time_s"].iloc[1])


def test_a_validation_row_can_state_fp8_attention():
    # a recipe's --fp8-dot-product-attention is a stated setting of its validation row (dse_fp8_attention)
    from dse import validate as v
    table = pd.concat([v._read_csv(n) for n in v.TRAINING_FILES], ignore_index=True)
    row = table[table["id"] == "MB064"]   # Llama 3 8B, MXFP8, DGX B200 (Megatron-Bridge 26.02)
    stated = row.assign(dse_fp8_attention="yes")
    plain, with_fp8 = (dse.evaluate_training(v.training_inputs(t)[0])["step_time_s"].iloc[0] for t in (row, stated))
    assert with_fp8 < plain


def test_an_mxfp8_recipe_gains_less_from_fp8_attention():
    # its attention runs cuDNN's MXFP8 kernels, slower than the per-tensor FP8 ones (Blackwell)
    gain = {p: (lambda out: out["step_time_s"].iloc[0] / out["step_time_s"].iloc[1])(_step(system="gb200", precision=p))
            for p in ("fp8", "mxfp8")}
    assert 1.0 < gain["mxfp8"] < gain["fp8"]
