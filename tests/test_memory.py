"""dse.perf.memory: activation memory against Korthikanti et al. 2022 (arXiv 2205.05198, eq. 1-6),
ZeRO sharding of weights, gradients and Adam states, KV-cache bytes, in-flight pipeline layers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse import catalog, resolve
from dse.perf import memory
from dse.workload import Model

PROPERTY = settings(max_examples=30, deadline=None, derandomize=True)
NONE, SELECTIVE, FULL = 0, 1, 2


def model(**kw) -> Model:
    cols = {k: np.array([float(v)]) for k, v in kw.items()}
    resolve.model(cols)
    return Model({k: np.asarray(v, dtype=float) for k, v in cols.items()})


def gpt(h, a, s):
    """GPT as Korthikanti et al. count it: MHA, 4h GeLU MLP, dropout, 16-bit activations."""
    return model(layers=1, hidden=h, heads=a, vocab=51200, seq_len=s, dropout=1)


def act(m, b, s, t=1, sp=False, recompute=NONE, flash=False):
    out = memory.activation_bytes_per_layer(m, np.array([float(b)]), np.array([float(s)]), np.array([float(t)]),
                                            np.array([sp]), np.array([recompute]), np.array([flash]),
                                            np.array([0.0]))
    return float(out[0])


# GPT-3 175B, MT-NLG 530B, 1T (Korthikanti Table 3) and a small model
SHAPES = [(12288, 96, 2048, 1), (20480, 128, 2048, 1), (25600, 160, 2048, 1), (2048, 16, 1024, 4)]


@pytest.mark.parametrize("h,a,s,b", SHAPES)
def test_no_parallelism_is_sbh_34_plus_5as_over_h(h, a, s, b):
    assert act(gpt(h, a, s), b, s) == pytest.approx(s * b * h * (34 + 5 * a * s / h), rel=1e-12)


@pytest.mark.parametrize("h,a,s,b", SHAPES)
@pytest.mark.parametrize("t", [2, 4, 8])
def test_tensor_parallel(h, a, s, b, t):
    m = gpt(h, a, s)
    assert act(m, b, s, t) == pytest.approx(s * b * h * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)


@pytest.mark.parametrize("h,a,s,b", SHAPES)
@pytest.mark.parametrize("t", [1, 2, 8])
def test_tensor_and_sequence_parallel(h, a, s, b, t):
    m = gpt(h, a, s)
    assert act(m, b, s, t, sp=True) == pytest.approx(s * b * h / t * (34 + 5 * a * s / h), rel=1e-12)


@pytest.mark.parametrize("h,a,s,b", SHAPES)
@pytest.mark.parametrize("t,sp", [(1, False), (8, False), (8, True)])
def test_selective_recompute_drops_the_5as_over_h_term(h, a, s, b, t, sp):
    m = gpt(h, a, s)
    want = s * b * h * (34 / t if sp else 10 + 24 / t)
    assert act(m, b, s, t, sp, SELECTIVE) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("h,a,s,b", SHAPES)
@pytest.mark.parametrize("t", [1, 4, 8])
def test_full_recompute_keeps_only_the_layer_input(h, a, s, b, t):
    m = gpt(h, a, s)
    assert act(m, b, s, t, False, FULL) == pytest.approx(2 * s * b * h, rel=1e-12)
    assert act(m, b, s, t, True, FULL) == pytest.approx(2 * s * b * h / t, rel=1e-12)


def test_flash_attention_never_stores_the_scores():
    h, a, s, b = 12288, 96, 2048, 1
    m = gpt(h, a, s)
    short, long = act(m, b, s, flash=True), act(gpt(h, a, 4 * s), b, 4 * s, flash=True)
    # linear in s (no s^2 term) and below the unfused footprint by about the 5as/h term
    assert long == pytest.approx(4 * short, rel=1e-12)
    # what it keeps instead: a 4-byte (FP32) log-sum-exp per head and token
    assert act(m, b, s, flash=True) == pytest.approx(act(m, b, s, recompute=SELECTIVE) + 4 * a * s * b, rel=1e-12)
    assert act(m, b, s, flash=True) < act(m, b, s)


@PROPERTY
@given(st.sampled_from([1024, 4096, 12288]), st.sampled_from([8, 32, 96]), st.sampled_from([512, 2048, 8192]),
       st.integers(1, 8), st.sampled_from([1, 2, 4, 8]), st.booleans(), st.booleans())
def test_recompute_never_stores_more(h, a, s, b, t, sp, flash):
    m = gpt(h, a, s)
    levels = [act(m, b, s, t, sp, r, flash) for r in (NONE, SELECTIVE, FULL)]
    assert levels[0] >= levels[1] >= levels[2] > 0
    # linear in the micro-batch
    assert act(m, 2 * b, s, t, sp, NONE, flash) == pytest.approx(2 * levels[0], rel=1e-12)


# ---- pipeline: layers in flight -----------------------------------------------------------------
@pytest.mark.parametrize("layers,p,m", [(96, 8, 64), (80, 4, 4), (32, 2, 100)])
def test_1f1b_first_stage_holds_about_l_layers(layers, p, m):
    assert float(memory.inflight_layers(np.array([layers]), np.array([p]), np.array([1]), np.array([m]))[0]) == \
        pytest.approx(layers)


@pytest.mark.parametrize("layers,p,v", [(96, 8, 3), (96, 8, 12), (80, 4, 5)])
def test_interleaved_multiplies_by_1_plus_p_minus_1_over_pv(layers, p, v):
    got = float(memory.inflight_layers(np.array([layers]), np.array([p]), np.array([v]), np.array([64]))[0])
    assert got == pytest.approx(layers * (1 + (p - 1) / (p * v)), rel=1e-12)


def test_fewer_micro_batches_than_stages_hold_fewer_layers():
    got = float(memory.inflight_layers(np.array([96.0]), np.array([8.0]), np.array([1.0]), np.array([2.0]))[0])
    assert got == pytest.approx(96 / 8 * 2)


# ---- ZeRO --------------------------------------------------------------------------------------------
OPTIMIZER_BYTES = 12.0   # FP32 master weight + Adam's m and v in FP32 (ZeRO paper, Sec. 3)


def test_mixed_precision_adam_bytes_per_parameter():
    # 2 (bf16 weights) + 12 (fp32 master + Adam m, v); gradients 4 (Megatron's fp32 main grads) by
    # default, 2 where the framework reduces them in bf16 (Megatron-Bridge's performance scripts)
    assert memory.WEIGHT_BYTES == 2 and memory.optimizer_state_bytes(4.0) == OPTIMIZER_BYTES
    presets = catalog.frameworks().set_index("name")
    assert presets.loc["default", "main_grad_bytes"] == 4 and presets.loc["megatron-bridge", "main_grad_bytes"] == 2
    # BF16 moments (DeepSeek-V3 Sec. 3.3.2; Megatron-Core's precision-aware optimizer): 4 + 2 + 2
    assert presets.loc["default", "adam_moment_bytes"] == 4 and memory.optimizer_state_bytes(2.0) == 8.0


def test_nemo_reduces_gradients_in_bf16_so_its_published_nemotron_340b_mapping_fits():
    # NeMo 24.07's performance summary ran Nemotron-4-340B (FP8) on 128 H100-80GB at TP 8, PP 8,
    # VP 12, MBS 1, GBS 32 (dse/validation T0377); its configuration reduces gradients in BF16
    # (nemotron_340b.yaml optim.grad_sync_dtype bf16), and with FP32 main gradients it would not fit
    presets = catalog.frameworks().set_index("name")
    assert presets.loc["nemo", "main_grad_bytes"] == 2
    run = dict(model="nemotron4-340b", system="h100-sxm", framework="nemo", gpus=128, tp=8, pp=8, vp=12,
               micro_batch=1, global_batch=32, precision="fp8")
    rows = pd.DataFrame([run, dict(run, main_grad_bytes=4)])
    bf16, fp32 = (r for _, r in dse.evaluate_training(rows).iterrows())
    assert bf16["fits"] and not fp32["fits"]
    assert fp32["grads_bytes"] == pytest.approx(2 * bf16["grads_bytes"])


def test_bf16_moments_shrink_the_optimizer_state_by_a_third_and_its_step():
    import dse
    rows = pd.DataFrame([dict(model="llama3.1-70b", system="h100-sxm", gpus=64, tp=8, pp=2, global_batch=64,
                              adam_moment_bytes=b) for b in (4, 2)])
    fp32, bf16 = (r for _, r in dse.evaluate_training(rows).iterrows())
    assert bf16["optimizer_bytes"] == pytest.approx(fp32["optimizer_bytes"] * 8 / 12, rel=1e-6)
    assert bf16["weights_bytes"] == fp32["weights_bytes"] and bf16["grads_bytes"] == fp32["grads_bytes"]
    assert bf16["optimizer_s"] == pytest.approx(fp32["optimizer_s"] * 26 / 34, rel=1e-6)


@pytest.mark.parametrize("d", [1, 8, 64])
def test_zero_stages_shard_over_data_parallelism(d):
    psi = 1e9
    W, G, O = memory.WEIGHT_BYTES, 4.0, OPTIMIZER_BYTES
    expected = {0: (W, G, O), 1: (W, G, O / d), 2: (W, G / d, O / d), 3: (W / d, G / d, O / d)}
    for stage, per_param in expected.items():
        got = memory.model_state_bytes(np.array([psi]), np.array([0.0]), np.array([stage]), np.array([float(d)]),
                                       np.array([1.0]), np.array([0.0]), G, 4.0)
        assert tuple(float(x[0]) for x in got) == pytest.approx(tuple(psi * x for x in per_param), rel=1e-12), stage


def test_zero3_holds_two_gathered_layers_and_expert_params_shard_over_expert_dp():
    dense, expert, layer_params = 1e9, 4e9, 2e8
    d_dense, d_expert = 32.0, 4.0
    W, G, O = memory.WEIGHT_BYTES, 2.0, OPTIMIZER_BYTES
    w, g, o = memory.model_state_bytes(np.array([dense]), np.array([expert]), np.array([3]), np.array([d_dense]),
                                       np.array([d_expert]), np.array([layer_params]), G, 4.0)
    assert float(w[0]) == pytest.approx(W * (dense / d_dense + expert / d_expert) + 2 * layer_params * W)
    assert float(g[0]) == pytest.approx(G * (dense / d_dense + expert / d_expert))
    assert float(o[0]) == pytest.approx(O * (dense / d_dense + expert / d_expert))
    # below ZeRO-3 there is no gathered-layer buffer
    w2, _, _ = memory.model_state_bytes(np.array([dense]), np.array([expert]), np.array([2]), np.array([d_dense]),
                                        np.array([d_expert]), np.array([layer_params]), G, 4.0)
    assert float(w2[0]) == pytest.approx(W * (dense + expert))


@PROPERTY
@given(st.integers(0, 3), st.sampled_from([1, 2, 8, 64, 1024]))
def test_higher_zero_stage_never_holds_more(stage, d):
    args = lambda z: (np.array([1e9]), np.array([1e9]), np.array([z]), np.array([float(d)]),
                      np.array([float(d)]), np.array([0.0]), 4.0, 4.0)
    lo, hi = sum(memory.model_state_bytes(*args(stage))), sum(memory.model_state_bytes(*args(min(stage + 1, 3))))
    assert float(hi[0]) <= float(lo[0])


def test_parameters_per_gpu_split_over_tp_pp_ep():
    m = model(layers=32, hidden=4096, heads=32, vocab=32000, ffn_hidden=14336, gated_mlp=1, experts=8, top_k=2,
              moe_ffn_hidden=14336, seq_len=4096)
    dense1, expert1 = memory.parameters_per_gpu(m, 1.0, 1.0, 1.0)
    # one GPU holds the whole model
    assert float((dense1 + expert1)[0]) == pytest.approx(float(m.total_params[0]), rel=1e-9)
    _, expert = memory.parameters_per_gpu(m, 2.0, 4.0, 8.0)
    assert float(expert[0]) == pytest.approx(float(expert1[0]) / (2 * 4 * 8), rel=1e-9)


# ---- KV cache ------------------------------------------------------------------------------------
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(32, 32, 128), (64, 8, 128), (128, 8, 128), (48, 1, 128)])
@pytest.mark.parametrize("kv_bytes", [2.0, 1.0])
def test_kv_cache_per_token_is_2_kvheads_headdim_bytes_sharded_down_to_one_head(heads, kv_heads, head_dim, kv_bytes):
    m = model(layers=1, hidden=heads * head_dim, heads=heads, kv_heads=kv_heads, vocab=32000)
    for tp in (1, 2, 4, 8, 16, 64):
        got = float(memory.kv_cache_bytes_per_token(m, np.array([float(tp)]), kv_bytes)[0])
        heads_per_gpu = max(kv_heads / tp, 1)
        assert got == pytest.approx(2 * heads_per_gpu * head_dim * kv_bytes, rel=1e-12), tp


def test_mla_latent_cache_is_replicated_over_tp():
    # DeepSeek-V3 MLA: 512 latent + 64 RoPE elements per token per layer (DeepSeek-V2/V3 reports)
    m = model(layers=1, hidden=7168, heads=128, kv_heads=128, head_dim=128, vocab=129280, kv_cache_dim=576)
    for tp in (1, 8):
        assert float(memory.kv_cache_bytes_per_token(m, np.array([float(tp)]), 2.0)[0]) == pytest.approx(576 * 2)


# ---- main gradients -----------------------------------------------------------------------------------
@PROPERTY
@given(st.sampled_from(["llama3.1-8b", "mixtral-8x7b"]), st.integers(0, 3), st.sampled_from([1, 2, 4]))
def test_bf16_main_gradients_halve_the_gradients_and_speed_up_their_reduction(name, zero, tp):
    ep = 2 if name.startswith("mixtral") else 1
    rows = [dict(model=name, system="h100-sxm", gpus=32, tp=tp, ep=ep, zero=zero, seq_len=4096, dp_overlap=False,
                 main_grad_bytes=b) for b in (4, 2)]
    fp32, bf16 = (r for _, r in dse.evaluate_training(pd.DataFrame(rows)).iterrows())
    assert bf16["grads_bytes"] == pytest.approx(fp32["grads_bytes"] / 2, rel=1e-9)
    assert (bf16["weights_bytes"], bf16["optimizer_bytes"]) == (fp32["weights_bytes"], fp32["optimizer_bytes"])
    assert bf16["dp_comm_s"] < fp32["dp_comm_s"]


# Megatron-Bridge v0.3.0 (NeMo 26.02) Nemotron-H 56B pre-training recipes: 64 GPUs, global batch 192,
# micro-batch 1, seq 8192, FP8 current scaling, sequence parallel, no recompute; TP 2 on Blackwell, TP 8 on
# H100 (scripts/performance/configs/nemotronh/nemotronh_workload_base_configs.py and recipes/nemotronh/
# nemotronh.py); its performance script sets grad_reduce_in_fp32 False (BF16 main gradients)
NEMOTRON_H = dict(model="nemotron-h-56b", gpus=64, global_batch=192, micro_batch=1, seq_len=8192, precision="fp8-cs",
                  framework="megatron-bridge")


def test_the_nemotron_h_recipes_fit_and_need_their_bf16_main_gradients_on_gb200():
    rows = [dict(NEMOTRON_H, system=s, tp=t) for s, t in (("gb300", 2), ("gb200", 2), ("b300", 2), ("h100-sxm", 8))]
    out = dse.evaluate_training(pd.DataFrame(rows))
    assert out["fits"].all(), out[["mem_per_gpu_bytes", "infeasible_reason"]]
    fp32 = dse.evaluate_training(pd.DataFrame([dict(NEMOTRON_H, system="gb200", tp=2, main_grad_bytes=4)]))
    assert not fp32["fits"].iloc[0]
