"""Selective recompute by module (Megatron-Core --recompute-modules) and low-precision saved inputs."""
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse import schema
from dse.errors import ConfigError

MOE_JOB = dict(model="deepseek-v3", system="gb200", framework="megatron-bridge", gpus=256, tp=1, pp=4, vp=4,
               ep=64, micro_batch=1, global_batch=2048, precision="bf16", recompute="selective")


def _rows(**variants):
    """One evaluated row per value of the single varied column."""
    (name, values), = variants.items()
    return dse.evaluate_training(pd.DataFrame([{**MOE_JOB, name: v} for v in values]))


def test_module_lists_parse_with_megatron_spellings_and_reject_unknown_names():
    assert schema.module_mask("moe_act, layernorm") == schema.module_mask("['layernorm', 'moe_act']")
    assert schema.module_mask("norm act") == schema.module_mask("layernorm,moe_act")   # ModelZoo's table words
    assert schema.module_mask("") == schema.module_bit("core_attn")                     # Megatron-Core default
    with pytest.raises(ConfigError, match="recompute_modules.*moe_ac'"):
        schema.module_mask("moe_ac")


def test_each_module_frees_activations_and_adds_recompute_time():
    # DeepSeek-V3 has every module: MLA, dense leading layers, routed and shared experts
    names = ["layernorm", "mla_up_proj", "moe_act", "mlp", "moe", "shared_experts"]
    out = _rows(recompute_modules=names)
    base = dse.evaluate_training(pd.DataFrame([{**MOE_JOB, "recompute": "none"}])).iloc[0]
    for i, name in enumerate(names):
        row = out.iloc[i]
        assert row["activations_bytes"] < base["activations_bytes"], name
        assert row["recompute_s"] > base["recompute_s"], name


def test_recomputing_the_moe_layer_runs_its_token_exchange_again():
    out = _rows(recompute_modules=["moe_act", "moe"])
    act, moe = out.iloc[0], out.iloc[1]
    assert moe["ep_comm_s"] > act["ep_comm_s"]
    assert moe["hardware_flops_per_step"] > act["hardware_flops_per_step"]
    assert moe["model_flops_per_step"] == act["model_flops_per_step"]


@settings(max_examples=40, deadline=None)
@given(st.sets(st.sampled_from(schema.RECOMPUTE_MODULES), min_size=1), st.sets(st.sampled_from(schema.RECOMPUTE_MODULES)))
def test_more_modules_never_store_more_nor_recompute_less(small, extra):
    out = _rows(recompute_modules=[",".join(sorted(small)), ",".join(sorted(small | extra))])
    fewer, more = out.iloc[0], out.iloc[1]
    assert more["activations_bytes"] <= fewer["activations_bytes"] * (1 + 1e-6)
    assert more["recompute_s"] >= fewer["recompute_s"] * (1 - 1e-6)
    # full recompute keeps only each layer's input: less than any selection of modules
    full = dse.evaluate_training(pd.DataFrame([{**MOE_JOB, "recompute": "full"}])).iloc[0]
    assert full["activations_bytes"] < more["activations_bytes"]


def test_low_precision_keeps_the_gemm_inputs_quantized():
    # Transformer Engine saves the column-wise FP8 / FP4 copy of a linear layer's input for the
    # weight gradient, not the 16-bit input: the stored activations shrink, FP4 more than FP8
    job = dict(model="llama3.1-70b", system="b200", framework="megatron-bridge", gpus=64, tp=4, pp=4,
               global_batch=64, recompute="none")
    out = dse.evaluate_training(pd.DataFrame([{**job, "precision": p} for p in ("bf16", "mxfp8", "nvfp4")]))
    bf16, mxfp8, nvfp4 = out["activations_bytes"]
    assert nvfp4 < mxfp8 < bf16
    assert mxfp8 > 0.6 * bf16   # norm inputs, attention Q/K/V/O and the gated pair stay 16-bit


def test_published_deepseek_v3_gb200_layout_fits_with_its_recipes_recompute():
    # Megatron-Bridge v0.2.0 DEEPSEEK_V3_GB200_BASE_CONFIG (NeMo 25.11, measured 3,139 tokens/s/GPU
    # in BF16): PP 4 x VP 4, EP 64, micro-batch 1, recompute_modules ["mla_up_proj"]. The run fit in
    # 186 GB; without recompute the activations grow by 40% (the recipe's choice: the
    # BF16 main gradients leave about 6 GB, which the transient buffers dse does not count need).
    out = _rows(recompute_modules=["mla_up_proj", "moe_act"])
    assert bool(out["fits"].iloc[0])
    none = dse.evaluate_training(pd.DataFrame([{**MOE_JOB, "recompute": "none"}])).iloc[0]
    assert none["activations_bytes"] > 1.4 * out["activations_bytes"].iloc[0]
    assert none["mem_per_gpu_bytes"] > 0.95 * 186 * 2**30


def test_blank_module_list_is_core_attention_as_before():
    job = dict(model="gpt3-175b", system="a100-80gb", framework="megatron-lm", gpus=64, tp=8, pp=8, vp=3,
               global_batch=64, recompute="selective", sp=True)
    out = dse.evaluate_training(pd.DataFrame([job, {**job, "recompute_modules": "core_attn"}]))
    for column in ("step_time_s", "activations_bytes", "hfu"):
        assert out[column].iloc[0] == out[column].iloc[1]
    # Korthikanti et al. Table 2's selective recompute re-runs the attention core: 4 s^2 h per layer
    # and sequence forward (QK^T and AV), here as 1 + s / (6h) of the whole layer's forward FLOPs share
    extra = out["hardware_flops_per_step"].iloc[0] / out["model_flops_per_step"].iloc[0] - 1
    s, h, L, V = 2048, 12288, 96, 51200
    layer_fwd = 24 * s * h**2 + 4 * s**2 * h
    expected = L * 4 * s**2 * h / (3 * (L * layer_fwd + 2 * s * h * V))
    assert extra == pytest.approx(expected, rel=0.02)


def test_recomputing_the_moe_layer_reruns_its_shared_experts_once():
    out = _rows(recompute_modules=["moe", "moe,shared_experts"])
    assert out["recompute_s"].iloc[0] == out["recompute_s"].iloc[1]
    assert out["activations_bytes"].iloc[0] == out["activations_bytes"].iloc[1]


def test_mlp_up_frees_the_mlp_hidden_layer_and_reruns_only_its_up_projection():
    # MaxText's save_dot_except_mlpwi keeps the down projection's output: the MLP's hidden layer is
    # freed as with `mlp`, but the backward re-runs the up/gate GEMMs only (2 of the 3 MLP GEMMs
    # of a gated MLP), so its recompute lies strictly between the attention core's and the MLP's
    job = dict(model="llama2-70b", system="h100-sxm", framework="maxtext", gpus=64, micro_batch=2, global_batch=128,
               precision="bf16", recompute="selective")
    out = dse.evaluate_training(pd.DataFrame([dict(job, recompute_modules=m) for m in
                                              ("core_attn", "core_attn,mlp_up", "core_attn,mlp", "core_attn,mlp,mlp_up")]))
    attn, up, mlp, both = (out.iloc[i] for i in range(4))
    # the down projection's output (MaxText's mlpwo) stays: 2 bytes x hidden per token and layer more
    assert up["activations_bytes"] - mlp["activations_bytes"] == pytest.approx(2 * 8192 * 2 * 4096 * 80, rel=1e-9)
    assert up["activations_bytes"] < attn["activations_bytes"]
    assert attn["recompute_s"] < up["recompute_s"] < mlp["recompute_s"]
    assert (up["recompute_s"] - attn["recompute_s"]) / (mlp["recompute_s"] - attn["recompute_s"]) == pytest.approx(2 / 3, abs=0.1)
    assert both["recompute_s"] == pytest.approx(mlp["recompute_s"], rel=1e-9)   # mlp already re-runs the up projection
    assert schema.module_mask("mlpwi") == schema.module_bit("mlp_up")


def test_remat_by_name_keeps_only_the_tensors_maxtexts_policy_names():
    # DGX Cloud's MaxText Llama 2 70B BF16 policy saves query_proj, key_proj, value_proj, out_proj and
    # mlpwo (dgxc-benchmarking maxtext/configure.sh); XLA keeps those and each scanned layer's input,
    # and recomputes everything else (MaxText layers/attentions.py checkpoint_name). Per token and
    # layer, in bytes: input 2h + Q 2h + K, V 2 x 2h/8 (8 of 64 heads) + out_proj 2h + mlpwo 2h = 8.5h,
    # plus FlashAttention's FP32 log-sum-exp per head (4 x 64). Megatron-Core's checkpointed modules
    # keep the norm outputs its fused LayerNormLinear GEMMs hold and the attention context.
    job = dict(model="llama2-70b", system="h100-sxm", gpus=64, micro_batch=2, global_batch=128, zero=3,
               precision="bf16", recompute="selective", recompute_modules="core_attn,layernorm,mlp_up")
    out = dse.evaluate_training(pd.DataFrame([dict(job, framework=f) for f in ("maxtext", "megatron-core")]))
    by_name, checkpointed = out["activations_bytes"]
    tokens, layers, h = 2 * 4096, 80, 8192
    assert by_name == pytest.approx(tokens * layers * (8.5 * h + 4 * 64), rel=0.03)   # + embeddings, loss
    assert checkpointed > by_name * 1.3
    assert out["fits"].iloc[0]   # the published run (T0188): 64 H100-80GB at micro-batch 2


def test_maxtext_llama2_70b_bf16_rows_with_their_recipes_remat_policy():
    # DGX Cloud 25.01 MaxText Llama 2 70B BF16 (64-2048 H100, FSDP): the recipe's remat policy
    # re-runs the attention core, norms and MLP up projection; the published step times within 3%
    from dse.validate import training_results
    rows = training_results().set_index("id").loc[[f"T0{i}" for i in range(188, 194)]]
    assert (rows["error_pct"].abs() < 3).all(), rows[["measured", "predicted", "error_pct"]]


# ---- torchtitan's per-op selective checkpointing (recompute 'op') --------------------------------------
TITAN_JOB = dict(model="llama3.1-8b", system="h200", framework="torchtitan", precision="bf16", gpus=8, tp=1, pp=1,
                 dp=8, zero=3, micro_batch=2, global_batch=16, seq_len=8192)


def test_per_op_checkpointing_reruns_wk_wo_and_w3_of_each_layer():
    # torchtitan saves every odd matmul of a block (wq, wv, w1, w2) and re-runs the even ones (wk, wo,
    # w3) with the element-wise ops: the extra FLOPs are those three GEMMs of every layer, from the
    # Llama 3.1 8B config (h 4096, 8 KV heads of 128, FFN 14336, 32 layers), nothing else
    out = dse.evaluate_training(pd.DataFrame([{**TITAN_JOB, "recompute": r} for r in ("none", "op")]))
    none, op = out.iloc[0], out.iloc[1]
    tokens, h = 16 * 8192, 4096
    wk_wo_w3 = 32 * 2.0 * tokens * h * (8 * 128 + h + 14336)
    assert op["hardware_flops_per_step"] - op["model_flops_per_step"] == pytest.approx(wk_wo_w3, rel=1e-6)
    assert none["hardware_flops_per_step"] == pytest.approx(none["model_flops_per_step"], rel=1e-9)


@pytest.mark.parametrize("model", ["llama3.1-8b", "qwen3-30b-a3b", "deepseek-v3", "gpt3-175b"])
def test_per_op_checkpointing_sits_between_none_and_full(model):
    job = {**TITAN_JOB, "model": model, "gpus": 64, "dp": 64, "global_batch": 64, "micro_batch": 1, "seq_len": 4096}
    out = dse.evaluate_training(pd.DataFrame([{**job, "recompute": r} for r in ("none", "op", "full")]))
    none, op, full = (out.iloc[i] for i in range(3))
    assert none["activations_bytes"] > op["activations_bytes"] > full["activations_bytes"]
    assert none["recompute_s"] < op["recompute_s"] < full["recompute_s"]


def test_per_op_checkpointing_memory_matches_torchtitans_h200_benchmark():
    # torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md: Llama 3.1 8B, FSDP over 32 H200,
    # local batch 2 x 8192, per-op checkpointing, float8 linears: 47.96 GiB per GPU (allocator peak, which
    # also holds the caching allocator's slack and the logits' FP32 copy in the loss)
    row = dse.evaluate_training(pd.DataFrame([{**TITAN_JOB, "gpus": 32, "dp": 32, "global_batch": 64,
                                               "precision": "fp8", "recompute": "op"}])).iloc[0]
    assert row["mem_per_gpu_bytes"] / 2**30 == pytest.approx(47.96, rel=0.15)


def test_per_op_shares_name_ops_of_the_inventory_and_stay_within_one():
    from dse.perf import recompute as RE
    from dse.workload import Model
    from dse import resolve
    cols = {"model": np.array(["deepseek-v3", "llama3.1-8b", "gpt3-175b"], dtype=object)}
    resolve.model(cols)
    shares = RE.op_sac_shares(Model(cols))
    assert tuple(shares) == RE.OP_SAC_NAMES
    for name, share in shares.items():
        assert np.all((np.asarray(share) >= 0.0) & (np.asarray(share) <= 1.0)), name


DENSE_JOB = dict(model="llama3.1-8b", system="h100-sxm", framework="megatron-bridge", gpus=8, tp=1, pp=1, cp=1,
                 micro_batch=1, global_batch=128, seq_len=8192, precision="fp8", recompute="full")


def test_block_recompute_of_n_layers_lies_between_none_and_full_in_proportion():
    # Megatron-Bridge's Llama 3 8B H100 FP8-CS recipe: full recompute, block method, 5 of 32 layers
    # (scripts/performance/configs/llama3/workload_base_configs.py, recompute_num_layers=5, since 2025-11)
    rows = [dict(DENSE_JOB, recompute="none"), DENSE_JOB, dict(DENSE_JOB, recompute_layers=5),
            dict(DENSE_JOB, recompute_layers=10)]
    none, full, five, ten = (r for _, r in dse.evaluate_training(pd.DataFrame(rows)).iterrows())
    assert none["recompute_s"] == 0 < five["recompute_s"] < ten["recompute_s"] < full["recompute_s"]
    assert five["recompute_s"] == pytest.approx(full["recompute_s"] * 5 / 32, rel=1e-4)
    assert full["activations_bytes"] < ten["activations_bytes"] < five["activations_bytes"] < none["activations_bytes"]
    # the stored activations mix the two layer kinds: 5/32 of the layers keep their input only
    assert five["activations_bytes"] == pytest.approx(
        (5 * full["activations_bytes"] + 27 * none["activations_bytes"]) / 32, rel=1e-4)
    assert none["hardware_flops_per_step"] < five["hardware_flops_per_step"] < full["hardware_flops_per_step"]
    assert five["model_flops_per_step"] == none["model_flops_per_step"]


def test_block_recompute_counts_layers_per_model_chunk():
    # pp 2 x vp 4: chunks of 4 layers, so 4 or more per chunk is every layer (Megatron-Core applies
    # recompute_num_layers inside each chunk's TransformerBlock); 2 re-runs half of them
    job = dict(DENSE_JOB, gpus=16, pp=2, vp=4)
    out = dse.evaluate_training(pd.DataFrame([job, dict(job, recompute_layers=4), dict(job, recompute_layers=2)]))
    assert out["step_time_s"].iloc[1] == out["step_time_s"].iloc[0]
    assert out["recompute_s"].iloc[2] == pytest.approx(out["recompute_s"].iloc[0] / 2, rel=1e-4)


def test_recompute_layers_without_full_recompute_is_refused_with_its_reason():
    out = dse.evaluate_training(pd.DataFrame([dict(DENSE_JOB, recompute="selective", recompute_layers=2)]))
    assert not out["fits"].iloc[0]
    assert out["infeasible_code"].iloc[0] == schema.REASON_CODE["recompute_layers"]


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 32), st.integers(1, 32))
def test_more_block_recompute_layers_never_store_more_nor_recompute_less(a, b):
    few, many = sorted((a, b))
    out = dse.evaluate_training(pd.DataFrame([dict(DENSE_JOB, recompute_layers=few), dict(DENSE_JOB, recompute_layers=many)]))
    assert out["activations_bytes"].iloc[1] <= out["activations_bytes"].iloc[0] * (1 + 1e-6)
    assert out["recompute_s"].iloc[1] >= out["recompute_s"].iloc[0] * (1 - 1e-6)
