"""Layer types (dse.workload, dse.perf.layer, dse.perf.mixers, dse.perf.memory): FLOPs per token of one
layer of each type against a hand-derived reference; the KV cache of sliding-window, chunked and latent
attention; the constant state of Mamba-2 and gated-linear-attention layers in decode; context
parallelism of state-space layers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dse
from dse import resolve
from dse.perf import layer as L
from dse.perf import memory as M
from dse.perf import mixers as X
from dse.perf import roofline as R
from dse.workload import Model

H, V = 4096, 32000


def model(**kw) -> Model:
    cols = {k: np.array([float(v)]) for k, v in kw.items()}
    resolve.model(cols)
    return Model({k: np.asarray(v, dtype=float) for k, v in cols.items()})


def one_layer(**kw) -> Model:
    """One layer holding only a sequence mixer (as a Nemotron-H layer does) unless kw adds an MLP."""
    base = dict(layers=1, hidden=H, heads=32, vocab=V, mlp_layer_fraction=0)
    return model(**{**base, **kw})


def layer_flops(m: Model, context: float) -> float:
    """Forward FLOPs per token of the layer: the model's minus its output layer (2 V h)."""
    return float(m.forward_flops_per_token(np.array([context]))[0]) - 2.0 * V * H


CTX = 8192.0


# ---- FLOPs per token, one layer of each type, by hand -------------------------------------------
def test_full_attention_layer():
    a, kv, d = 32, 8, 128
    m = one_layer(kv_heads=kv, head_dim=d)
    params = H * (a * d + 2 * kv * d) + a * d * H + H          # QKV, output, the norm
    assert layer_flops(m, CTX) == pytest.approx(2 * params + 4 * a * d * CTX, rel=1e-9)


def test_sliding_window_layer_attends_over_the_window_only():
    a, kv, d, w = 32, 8, 128, 1024
    m = one_layer(kv_heads=kv, head_dim=d, sliding_window_fraction=1, sliding_window=w)
    params = H * (a * d + 2 * kv * d) + a * d * H + H
    assert layer_flops(m, CTX) == pytest.approx(2 * params + 4 * a * d * w, rel=1e-9)
    assert layer_flops(m, 512.0) == pytest.approx(2 * params + 4 * a * d * 512, rel=1e-9)  # shorter than the window


def test_chunked_attention_layer_attends_within_its_chunk():
    a, kv, d, c = 32, 8, 128, 2048
    m = one_layer(kv_heads=kv, head_dim=d, chunked_attention_fraction=1, attention_chunk=c)
    params = H * (a * d + 2 * kv * d) + a * d * H + H
    assert layer_flops(m, CTX) == pytest.approx(2 * params + 4 * a * d * c, rel=1e-9)


def test_gated_attention_with_sinks_layer():
    a, kv, d = 16, 2, 256
    m = one_layer(heads=a, kv_heads=kv, head_dim=d, attention_output_gate=1, attention_sinks=1)
    params = H * (2 * a * d + 2 * kv * d) + a * d * H + H + a   # the query projection also emits the gate
    assert layer_flops(m, CTX) == pytest.approx(2 * params + 4 * a * d * CTX, rel=1e-9)


def test_multi_head_latent_attention_layer():
    # DeepSeek-V3's attention: 128 heads, q_lora 1536, kv_lora 512, rope 64, nope 128, v 128, h 7168
    h, a, ql, kl, rope, nope, v = 7168, 128, 1536, 512, 64, 128, 128
    m = model(layers=1, hidden=h, heads=a, kv_heads=a, head_dim=nope + rope, v_head_dim=v, q_lora_rank=ql,
              kv_lora_rank=kl, qk_rope_head_dim=rope, vocab=V, mlp_layer_fraction=0)
    params = (h * ql + ql + ql * a * (nope + rope)          # query down, its norm, query up
              + h * (kl + rope) + kl + kl * a * (nope + v)   # KV down (latent + rotary key), its norm, KV up
              + a * v * h + h)                                # output, the layer norm
    attention = 2 * a * (nope + rope) * CTX + 2 * a * v * CTX
    got = float(m.forward_flops_per_token(np.array([CTX]))[0]) - 2 * V * h
    assert got == pytest.approx(2 * params + attention, rel=1e-9)
    assert float(m.kv_cache_dim[0]) == kl + rope


def test_mamba2_layer():
    # Nemotron-H-56B's Mamba-2 layer: 256 heads of 64, state 256, 8 groups, conv 4, chunk 128
    nh, p, n, g, k, q = 256, 64, 256, 8, 4, 128
    m = one_layer(attention_layer_fraction=0, mamba_layer_fraction=1, mamba_heads=nh, mamba_head_dim=p,
                  mamba_state_dim=n, mamba_groups=g, mamba_conv_kernel=k, mamba_chunk=q)
    inner, conv_dim = nh * p, nh * p + 2 * g * n
    params = (H * (2 * inner + 2 * g * n + nh)   # in_proj: z, x, B, C, dt
              + conv_dim * (k + 1)               # depthwise conv and its bias
              + 3 * nh + inner                   # dt bias, A, D; the gated RMSNorm
              + inner * H + H)                   # out_proj, the layer norm
    scan = 2 * q * g * n + 2 * q * nh * p + 4 * nh * p * n   # C B^T per group, intra-chunk, chunk states, state output
    assert layer_flops(m, CTX) == pytest.approx(2 * params + scan, rel=1e-9)


def test_gated_delta_net_layer():
    # Qwen3-Next's linear attention: 16 key heads, 32 value heads, dk = dv = 128, conv 4, chunk 64
    hk, hv, dk, dv, k, c = 16, 32, 128, 128, 4, 64
    m = one_layer(attention_layer_fraction=0, linear_attention_layer_fraction=1, linear_key_heads=hk,
                  linear_value_heads=hv, linear_key_head_dim=dk, linear_value_head_dim=dv, linear_conv_kernel=k,
                  linear_attention_chunk=c)
    params = (H * (2 * hk * dk + 2 * hv * dv + 2 * hv)   # in_proj: q, k, v, z, beta, a
              + (2 * hk * dk + hv * dv) * k              # conv over q, k, v
              + 2 * hv + dv + hv * dv * H + H)           # dt bias, A, the head norm, out_proj, the layer norm
    scan = hv * (2 * c * (3 * dk + 2 * dv) + 6 * dk * dv)
    assert layer_flops(m, CTX) == pytest.approx(2 * params + scan, rel=1e-9)


def test_recurrent_layers_store_what_their_fused_kernels_save_not_the_chunk_states():
    # mamba_ssm's mamba_split_conv1d_scan_combined saves zxbcdt and out_x and recomputes the conv output
    # and the chunk states; flash-linear-attention's chunk_gated_delta_rule saves q, k, v, g, beta and
    # the intra-chunk matrix A and recomputes the states h: the stored bytes never grow with the
    # state (head_dim x state per head), only with the projections
    def stored(**kw):
        return float(M.recurrent_activation_elements(one_layer(attention_layer_fraction=0, **kw), 1.0)[0])
    mamba = dict(mamba_layer_fraction=1, mamba_heads=256, mamba_head_dim=64, mamba_groups=8, mamba_chunk=128)
    a, b = stored(mamba_state_dim=128, **mamba), stored(mamba_state_dim=256, **mamba)
    assert b - a == pytest.approx(2.0 * 2 * 8 * 128)                    # B and C of the in_proj output, 16-bit
    assert stored(mamba_state_dim=128, **{**mamba, "mamba_chunk": 256}) == a
    inner = 256 * 64                                                     # in_proj (z, x, B, C, dt), out_x, the norm's input, out_proj's input
    assert a == pytest.approx(2.0 * (2 * inner + 2 * 8 * 128 + 256) + 2.0 * 2 * inner + 1.0 * inner)
    gdn = dict(linear_attention_layer_fraction=1, linear_key_heads=16, linear_value_heads=32, linear_key_head_dim=128)
    c64, c128 = (stored(linear_value_head_dim=128, linear_attention_chunk=c, **gdn) for c in (64, 128))
    assert c128 - c64 == pytest.approx(2.0 * 32 * 64)                   # A: one chunk-wide 16-bit row per value head


def test_mlp_and_moe_layers():
    f = 14336
    dense = model(layers=1, hidden=H, heads=32, vocab=V, ffn_hidden=f, gated_mlp=1, attention_layer_fraction=0)
    assert layer_flops(dense, CTX) == pytest.approx(2 * (3 * H * f + H), rel=1e-9)
    e, k, fe = 128, 6, 1856
    moe = model(layers=1, hidden=H, heads=32, vocab=V, attention_layer_fraction=0, experts=e, top_k=k,
                shared_experts=2, moe_ffn_hidden=fe)       # squared-ReLU experts (not gated), as Nemotron 3's
    assert layer_flops(moe, CTX) == pytest.approx(2 * ((k + 2) * 2 * H * fe + H * e + H), rel=1e-9)


def test_op_inventory_flops_match_the_layer_types():
    """The kernels the evaluators time do the FLOPs dse.workload counts: GEMMs 2 x their weights per
    token, the scans their scan FLOPs, for Mamba-2, Gated DeltaNet and MLA layers."""
    tokens = 4096.0
    s = L.Shape(np.array([1.0]), np.array([tokens]), np.array([tokens]), np.array([1.0]), np.array([1.0]))
    mamba = one_layer(attention_layer_fraction=0, mamba_layer_fraction=1, mamba_heads=128, mamba_head_dim=64,
                      mamba_state_dim=128, mamba_groups=8)
    ops = {op.name: op for op in X.recurrent_ops(mamba, s, 2.0, decode=False)}
    mb = mamba.mamba
    gemm = sum(float(R.op_flops_bytes(ops[k])[0][0]) for k in ("mamba_in_proj", "mamba_out_proj"))
    assert gemm == pytest.approx(2 * tokens * H * float(mb.in_proj[0] + mb.inner[0]), rel=1e-9)
    assert float(ops["mamba_scan"].flops[0]) == pytest.approx(tokens * float(mb.scan_flops_per_token(tokens)[0]))
    mla = model(layers=1, hidden=7168, heads=128, kv_heads=128, head_dim=192, v_head_dim=128, q_lora_rank=1536,
                kv_lora_rank=512, qk_rope_head_dim=64, vocab=V)
    projections = X.attention_projection_ops(mla, s, 2.0)
    live = [op for op in projections if float(np.broadcast_to(op.weight, (1,))[0]) > 0]
    flops = sum(float(R.op_flops_bytes(op)[0][0]) for op in live)
    weights = float(mla.attention_params[0]) - 7168 - 1536 - 512   # norms do no GEMM
    assert flops == pytest.approx(2 * tokens * weights, rel=1e-9)


# ---- decode cache --------------------------------------------------------------------------------
def infer(model_name, **kw):
    row = dict(model=model_name, system="h100-sxm", gpus=1, tp=1, batch=4, isl=2048, osl=256)
    return dse.evaluate_inference(pd.DataFrame([{**row, **kw}])).iloc[0]


def test_sliding_window_kv_cache_beyond_the_window_is_the_windows():
    # Mistral 7B v0.1: every layer windowed at 4096 tokens; 32 layers, 8 KV heads of 128, BF16
    window = 4096
    at_window = infer("mistral-7b", isl=window - 256, osl=256)["kv_cache_bytes"]
    assert at_window == pytest.approx(4 * 32 * window * 2 * 8 * 128 * 2, rel=1e-6)
    for isl in (8192, 32768):
        assert infer("mistral-7b", isl=isl, osl=256)["kv_cache_bytes"] == pytest.approx(at_window, rel=1e-6)
    shorter = infer("mistral-7b", isl=1024 - 256, osl=256)["kv_cache_bytes"]
    assert shorter == pytest.approx(at_window / 4, rel=1e-6)


def test_gpt_oss_windowed_layers_stop_growing_and_full_layers_do_not():
    # half the 36 layers keep 128 tokens; the other half the whole context (8 KV heads of 64)
    per_token_layer = 2 * 8 * 64 * 2
    for ctx in (4096, 16384):
        kv = infer("gpt-oss-120b", isl=ctx - 256, osl=256, batch=1)["kv_cache_bytes"]
        assert kv == pytest.approx((18 * ctx + 18 * 128) * per_token_layer, rel=1e-6)


def test_chunked_attention_kv_cache_is_capped_at_the_chunk():
    # Llama 4 Scout: 36 chunked layers (8192) and 12 full ones; 8 KV heads of 128
    per_token_layer = 2 * 8 * 128 * 2
    kv = infer("llama4-scout", isl=32768 - 256, osl=256, batch=1)["kv_cache_bytes"]
    assert kv == pytest.approx((36 * 8192 + 12 * 32768) * per_token_layer, rel=1e-6)


def test_mla_kv_cache_is_the_compressed_dimension_per_token_and_layer():
    # DeepSeek-V3: kv_lora_rank 512 + qk_rope_head_dim 64 per token and layer, not split over TP
    for tp in (1, 8):
        out = infer("deepseek-v3", gpus=tp, tp=tp, batch=2, isl=4096, osl=1024)
        assert out["kv_cache_bytes"] == pytest.approx(2 * 61 * 5120 * (512 + 64) * 2, rel=1e-6)
    m = model(layers=1, hidden=7168, heads=128, kv_heads=128, head_dim=192, v_head_dim=128, q_lora_rank=1536,
              kv_lora_rank=512, qk_rope_head_dim=64, vocab=V)
    assert float(M.kv_cache_bytes_per_token(m, np.array([8.0]), 1.0)[0]) == 576


def test_hybrid_decode_memory_grows_only_with_its_attention_layers():
    # Nemotron-H 56B: 10 attention layers (8 KV heads of 128) among 118; 54 Mamba-2 layers hold a constant state
    batch, isl = 4, 2048
    a = infer("nemotron-h-56b", batch=batch, isl=isl, osl=256)
    b = infer("nemotron-h-56b", batch=batch, isl=isl, osl=8192)
    growth = batch * 10 * (8192 - 256) * 2 * 8 * 128 * 2
    assert b["kv_cache_bytes"] - a["kv_cache_bytes"] == pytest.approx(growth, rel=1e-5)
    assert b["mem_per_gpu_bytes"] - a["mem_per_gpu_bytes"] == pytest.approx(growth, rel=1e-5)
    state = 256 * 64 * 256 + 3 * (256 * 64 + 2 * 8 * 256)   # SSM state H P N and the conv window, 16-bit
    assert a["kv_cache_bytes"] == pytest.approx(batch * (10 * (isl + 256) * 4096 + 54 * state * 2), rel=1e-5)


def test_linear_attention_state_is_constant():
    a = infer("qwen3-next-80b-a3b", gpus=4, tp=4, osl=256)
    b = infer("qwen3-next-80b-a3b", gpus=4, tp=4, osl=4096)
    # only the 12 full-attention layers grow: 2 KV heads of 256, replicated to one per GPU at tp 4
    assert b["kv_cache_bytes"] - a["kv_cache_bytes"] == pytest.approx(4 * 12 * (4096 - 256) * 2 * 256 * 2, rel=1e-5)


def test_decode_reads_less_with_a_window():
    full = infer("mistral-7b", isl=30000, osl=256, sliding_window_fraction=0.0)
    windowed = infer("mistral-7b", isl=30000, osl=256)
    assert windowed["tpot_s"] < full["tpot_s"] and windowed["kv_cache_bytes"] < full["kv_cache_bytes"] / 7


# ---- training: context parallelism and recompute of state-space layers ----------------------------
def train(model_name, **kw):
    row = dict(model=model_name, system="h100-sxm", gpus=64, tp=4, global_batch=64, seq_len=16384)
    return dse.evaluate_training(pd.DataFrame([{**row, **kw}])).iloc[0]


def test_state_space_layers_pay_all_to_all_under_context_parallelism():
    """Ring attention hides its K/V passing behind the attention kernel at long sequences; Mamba-2
    layers re-shard with all-to-alls (Megatron-Core all-to-all context parallelism) that stay exposed."""
    dense = train("llama3.1-8b", cp=2)
    hybrid = train("nemotron-h-56b", cp=2, pp=2)
    assert hybrid["cp_comm_s"] > 0
    assert hybrid["cp_comm_s"] / hybrid["step_time_s"] > dense["cp_comm_s"] / dense["step_time_s"]


def test_window_shortens_the_ring():
    from dse.perf.context import ring_steps
    m = model(layers=2, hidden=H, heads=32, vocab=V, seq_len=16384, sliding_window_fraction=0.5, sliding_window=1024)
    # the full half needs cp - 1 = 7 steps, the windowed half one (1024 tokens < a 2048-token shard)
    assert float(ring_steps(m, np.array([8.0]))[0]) == pytest.approx(0.5 * 7 + 0.5 * 1)


def test_sparse_ops_give_the_same_answer_as_dense_evaluation(monkeypatch):
    frame = pd.DataFrame({"model": ["llama3.1-8b", "nemotron-h-56b", "deepseek-v3", "qwen3-next-80b-a3b",
                                    "gpt-oss-120b"] * 4, "system": "h100-sxm", "gpus": 64, "tp": 2,
                          "global_batch": 64, "seq_len": 4096})
    sparse = dse.evaluate_training(frame)
    monkeypatch.setattr(L, "SPARSE_ROWS_BELOW", 0.0)
    dense = dse.evaluate_training(frame)
    np.testing.assert_array_equal(sparse["step_time_s"], dense["step_time_s"])
    np.testing.assert_array_equal(sparse["mem_per_gpu_bytes"], dense["mem_per_gpu_bytes"])


def test_tp_must_divide_the_mamba_heads_and_groups():
    out = train("nemotron3-nano-30b-a3b", tp=16, gpus=64, seq_len=4096)   # 8 groups
    assert out["infeasible_code"] == dse.schema.REASON_CODE["tp_heads"]


def test_low_precision_training_quantizes_every_routed_copy():
    # An MXFP8 grouped GEMM quantizes its permuted rows (each routed copy of a token, row-wise and
    # column-wise) and each expert's hidden layer: the quantization traffic of an all-MoE layer
    # covers at least top_k x (hidden + expert FFN) elements per token, and is none in BF16.
    from dse.catalog.precision import CODE, TRAINING_QUANTIZE_BYTES
    q = float(TRAINING_QUANTIZE_BYTES[CODE["mxfp8"]])
    m = model(layers=4, hidden=2048, heads=32, kv_heads=4, head_dim=128, ffn_hidden=6144, vocab=V,
              experts=128, top_k=8, moe_ffn_hidden=768, gated_mlp=1)
    s = L.Shape(1.0, 4096.0, 4096.0, 1.0, 8.0)
    dense, moe = L.layer_shares(m)
    per_token = lambda quantize: float(L.elementwise_op(m, s, dense, moe, 1.0, quantize_bytes=quantize).bytes[0]) / 4096
    assert q > 0
    assert per_token(q) - per_token(0.0) >= q * 8 * (2048 + 768)


def test_packed_documents_attend_like_chunks_of_their_length():
    # A 4096-token sequence packing 512-token documents, each attending within itself (TE THD /
    # cu_seqlens), visits the keys a 512-token chunked-attention layer visits; documents as long
    # as the sequence change nothing.
    base = dict(model="llama2-7b", system="h100-sxm", framework="nemo", gpus=8, tp=1, pp=1, global_batch=8,
                micro_batch=1, seq_len=4096, precision="bf16")
    step = lambda **kw: float(dse.evaluate_training(pd.DataFrame([dict(base, **kw)]))["compute_s"].iloc[0])  # noqa: E731
    assert step(document_tokens=4096) == pytest.approx(step(), rel=1e-9)
    assert step(document_tokens=512) == pytest.approx(step(chunked_attention_fraction=1, attention_chunk=512), rel=1e-6)
    assert step(document_tokens=512) < step()
