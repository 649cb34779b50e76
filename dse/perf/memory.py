"""Memory per GPU: weights, gradients, optimizer states (ZeRO 0-3), activations (Korthikanti et al.
2022, generalised to GQA, gated MLPs, MoE, FlashAttention, context parallelism). One place each.

Mixed-precision Adam as Megatron runs it: BF16 weights (2 B), main gradients (`main_grad_bytes`:
FP32, 4 B, by default; BF16, 2 B, where a framework reduces gradients in BF16), FP32 master
weights (4 B) and Adam's m and v (`adam_moment_bytes` each: FP32 by default, BF16 where a recipe
keeps them so): 18 bytes per parameter before sharding with FP32 gradients and moments.
ZeRO-1 shards the optimizer states over data parallelism, ZeRO-2 also the gradients,
ZeRO-3 also the weights (then two layers' full weights are held gathered at a time).
"""
from __future__ import annotations

import numpy as np

from dse import catalog
from dse.perf import recompute as RE

# Bytes per parameter and per activation element (dse/catalog/constants.csv, with sources).
WEIGHT_BYTES = catalog.constant("weight_bytes")
MASTER_WEIGHT_BYTES = catalog.constant("master_weight_bytes")
ACT_BYTES = catalog.constant("activation_bytes")
LOGITS_BYTES = catalog.constant("logits_bytes")
INDEXER_KEY_BYTES = catalog.constant("indexer_key_bytes")
INDEXER_KEY_SCALE_BYTES = catalog.constant("indexer_key_scale_bytes")


def stored_qkv_width(model, chosen):
    """Elements per token of the Q (with its output gate), K and V an attention layer keeps for its
    backward: none where MLA's up-projections are recomputed (`chosen`: the recompute module bits), nor
    where a query rank's are (DeepSeek-V4, whose attention Megatron-Core builds as MLA's)."""
    qkv = model.q_dim * (1.0 + model.output_gate) + model.kv_dim + model.v_dim
    return qkv * np.where(RE.modules_on(chosen, RE.MLA_UP_PROJ) & (model.is_mla | model.q_rank), 0.0, 1.0)


def activation_bytes_per_layer(model, micro_batch, seq_local, tp, sp, recompute, flash, moe_fraction,
                               chosen=None, saved_operand_bytes=2.0, expert_operand_bytes=None, by_name=False,
                               qkv_bytes=2.0):
    """Stored activation bytes of one layer for one micro-batch on one GPU.

    Per token, terms replicated across TP ranks unless sequence parallel (R) and terms sharded
    over TP (S), as in Korthikanti et al. eq. 1-4: for GPT (MHA, 4h GeLU MLP, dropout)
    R = 10h, S = 24h and the attention scores 5as, giving sbh(10 + 24/t + 5as/ht).
    recompute: 0 none, 1 selective (`chosen`: the module bits each row re-runs, dse.perf.recompute.
    selected; each frees what its forward stored; None: core_attn), 2 full (keeps the layer input).
    FlashAttention never stores the scores (only a 4-byte log-sum-exp per head and token).
    Low-precision GEMMs keep their inputs for the weight gradients quantized
    (`saved_operand_bytes` per element; Transformer Engine saves the column-wise FP8/FP4 copy;
    `expert_operand_bytes` for the routed experts' inputs where their format differs).
    `qkv_bytes`: bytes per stored Q, K and V element (1 where the attention runs FP8 kernels:
    Transformer Engine's FusedAttnFunc saves its FP8 copies for an FP8 backward).
    `by_name`: selective recompute is rematerialisation by name (XLA remat policies; the setting
    remat_by_name): a re-run attention core frees its output, layernorm every norm's output, and
    mlp_up keeps the down projection's output it names (MaxText's mlpwo).
    Hybrid layers: each term on the share of the layers that has it (the R term per sub-block, the
    attention terms on the attention layers, the MLP terms on dense/MoE layers, `moe_fraction` of
    the layers being MoE), plus the Mamba-2 / Gated DeltaNet mixers' stored tensors.
    """
    h, a = model.hidden, model.heads
    drop = model.dropout.astype(h.dtype)
    chosen = RE.selected(recompute, RE.CORE_ATTN) if chosen is None else chosen

    def on(bit):   # rows whose selective recompute frees what module `bit` stored
        return RE.modules_on(chosen, bit)
    q = saved_operand_bytes
    q_expert = q if expert_operand_bytes is None else expert_operand_bytes
    # per sub-block: norm input (16-bit), GEMM input (quantized), dropout mask; a recomputed norm
    # that stands alone (RE.recomputed_norms) frees its output
    replicated = (2.0 + q + drop) * h * model.blocks_per_layer - on(RE.LAYERNORM) * q * h * RE.recomputed_norms(
        model, moe_fraction, by_name)
    # hyper-connections (DeepSeek-V4 mHC): each block keeps its n residual streams (16-bit) for the
    # gradients of its mixing, where a plain residual keeps none beyond the norm input
    replicated = replicated + 2.0 * (model.residual_streams - 1.0) * h * model.blocks_per_layer
    # a down projection's output a remat policy names (mlp_up: MaxText's mlpwo), on the dense layers
    replicated = replicated + (on(RE.MLP_UP) & ~on(RE.MLP)) * 2.0 * h * (model.mlp_fraction - moe_fraction)
    # Q (and its output gate), K, V, out-proj input (16-bit); MLA also keeps its latents
    qkv = stored_qkv_width(model, chosen)
    context = model.o_dim * np.where(on(RE.CORE_ATTN) & by_name, 0.0, 1.0)   # re-run by name: not kept
    attn_sharded = model.attention_fraction * (qkv_bytes * qkv + 2.0 * context)
    if np.any(model.is_mla):
        replicated = replicated + model.attention_fraction * model.is_mla * 2.0 * (model.q_lora + model.kv_lora + model.rope_dim)
    # DeepSeek-V4: the query latent, and the grouped out-projection's output (its low-rank GEMM's input)
    if np.any((model.o_lora > 0) | model.q_rank):
        replicated = replicated + model.attention_fraction * model.q_rank * 2.0 * model.q_lora
        attn_sharded = attn_sharded + model.attention_fraction * q * model.o_groups * model.o_lora * (model.o_lora > 0)
    # an MLP's hidden layer: GeLU its input (16-bit) and output (the next GEMM's, quantized); gated
    # both projections and the output
    act_per_ffn = (model.mlp_mats - 1) * 2.0 + q
    dense_mlp = (model.mlp_fraction - moe_fraction) * act_per_ffn * model.ffn
    mlp_sharded = np.where(on(RE.MLP) | on(RE.MLP_UP), 0.0, dense_mlp)
    if np.any(moe_fraction > 0):
        # routed copies: the permuted input and the hidden layers of top_k experts (moe_act frees
        # the activation output); shared experts; LatentMoE's up-projection input (the combined output)
        routed_ffn = (model.mlp_mats - 1) * 2.0 + q_expert
        routed = (model.top_k * (routed_ffn * model.moe_ffn + q_expert * model.expert_width)
                  - on(RE.MOE_ACT) * model.top_k * q_expert * model.moe_ffn + q * model.latent)
        shared = np.where(on(RE.SHARED_EXPERTS), 0.0, model.shared_experts * act_per_ffn * model.moe_ffn)
        mlp_sharded = mlp_sharded + moe_fraction * np.where(on(RE.MOE), 0.0, routed + shared)
    mlp_sharded = mlp_sharded + recurrent_activation_elements(model, q)
    # softmax output (+ dropout mask and output) per head over the whole key length; FlashAttention
    # keeps only an FP32 log-sum-exp per head.
    scores = model.attention_fraction * np.where(flash, 4.0 * a, (2.0 + 3.0 * drop) * a * model.seq_len)
    rep_div = np.where(sp, tp, 1.0)
    per_token = replicated / rep_div + (attn_sharded + mlp_sharded) / tp
    per_token = np.where(recompute == 0, per_token + scores / tp,
                         np.where(recompute == 2, 2.0 * h * model.residual_streams / rep_div,
                                  per_token + np.where(on(RE.CORE_ATTN) & ~flash, 0.0, scores) / tp))
    if np.any(recompute == 3):
        per_token = np.where(recompute == 3, op_sac_bytes_per_token(model, moe_fraction, scores, tp, rep_div), per_token)
    return per_token * micro_batch * seq_local


def op_sac_bytes_per_token(model, moe_fraction, scores, tp, rep_div):
    """Bytes per token a layer stores under torchtitan's per-op checkpointing (recompute 'op',
    dse.perf.recompute): its input and the outputs of the ops it saves, 16-bit (a low-precision
    GEMM's output is 16-bit too), the rest re-run. The odd matmuls: after GQA wq and wv, after MLA
    with a query LoRA wq_a, wkv_a and wo; the MLP's w1 and w2 (gated) or fc1 after GQA, w3 or fc2
    after MLA; a shared expert likewise. The attention output with its log-sum-exp (`scores`), and
    the expert-parallel exchange's received rows each way (all_to_all_single is saved)."""
    h, mla = model.hidden, np.asarray(model.is_mla, dtype=bool)
    gated = model.mlp_mats > 2
    attention = np.where(mla, model.q_lora + model.kv_lora + model.rope_dim + h, model.q_dim + model.v_dim) + model.o_dim
    odd_mlp = lambda ffn: np.where(gated, np.where(mla, ffn, ffn + h), np.where(mla, h, ffn))   # noqa: E731
    dense = (model.mlp_fraction - moe_fraction) * odd_mlp(model.ffn)
    moe = moe_fraction * (2.0 * model.top_k * h + model.shared_experts * odd_mlp(model.moe_ffn))
    sharded = 2.0 * (model.attention_fraction * attention + dense + moe) + scores
    return 2.0 * h / rep_div + sharded / tp


def recurrent_activation_elements(model, saved_operand_bytes=2.0):
    """Bytes per token a Mamba-2 or Gated DeltaNet layer stores for its backward (sharded over TP),
    averaged over the layers, as Megatron-Core's mixers run their fused kernels, which recompute
    the rest in the backward:
    - Mamba-2 (mamba_ssm's mamba_split_conv1d_scan_combined, which saves zxbcdt and out_x only: the
      conv output and the chunk states are recomputed; state-spaces/mamba ops/triton/ssd_combined.py):
      the in_proj output, the scan output, the gated norm's input (a contiguous copy) and the
      out_proj input;
    - Gated DeltaNet (flash-linear-attention's chunk_gated_delta_rule, which saves q, k, v, g, beta
      and the intra-chunk matrix A, and recomputes the chunk states h in the backward): the in_proj
      output (the conv's input), the conv output (q, k, v), the norm input, the out_proj input and
      A (16-bit, one chunk-wide row per token and value head).
    The out_proj input is kept in the GEMM's format (`saved_operand_bytes`), the rest in 16 bits."""
    q = saved_operand_bytes
    stored = 0.0
    if model.mamba is not None:
        mb = model.mamba
        stored = stored + model.mamba_fraction * (2.0 * (mb.in_proj + 2.0 * mb.inner) + q * mb.inner)
    if model.linear is not None:
        la = model.linear
        intra_chunk = la.value_heads * np.minimum(la.chunk, model.seq_len)
        stored = stored + model.linear_fraction * (2.0 * (la.in_proj + la.conv_dim + la.value_dim + intra_chunk)
                                                   + q * la.value_dim)
    return stored


def offloaded_bytes_per_layer(model, micro_batch, seq_local, tp, sp, recompute, chosen, offload, moe_fraction,
                              saved_operand_bytes=2.0, expert_operand_bytes=None):
    """Bytes of one layer's stored activations, for one micro-batch on one GPU, that fine-grained
    activation offloading (`offload`: the offload_modules bits) keeps in host memory: each module's
    input as activation_bytes_per_layer stores it. attn_norm and mlp_norm their sub-block's 16-bit
    input, qkv_linear the norm's output (nothing where layernorm is recomputed), core_attn Q, K and V,
    attn_proj the attention output, expert_fc1 the routed copies of the tokens, moe_act the experts'
    up-projection outputs (nothing where the whole MoE block is recomputed). None under full or
    per-op recompute, which keep no module inputs (Megatron-Core fine_grained_activation_offload.py
    hooks the modules' forward inputs; docs/user-guide/features/fine_grained_activation_offloading.md
    @d98e8a64dd)."""
    from dse.schema import module_bit

    def off(name):
        return (offload & module_bit(name, "offload_modules")) != 0
    q = saved_operand_bytes
    q_expert = q if expert_operand_bytes is None else expert_operand_bytes
    h, attention = model.hidden, model.attention_fraction
    kept = np.logical_not(RE.modules_on(chosen, RE.LAYERNORM))
    replicated = (off("attn_norm") * 2.0 * attention + off("qkv_linear") * kept * q * attention
                  + off("mlp_norm") * 2.0 * model.mlp_fraction) * h
    sharded = attention * 2.0 * (off("core_attn") * stored_qkv_width(model, chosen) + off("attn_proj") * model.o_dim)
    routed = model.top_k * (off("expert_fc1") * q_expert * model.expert_width
                            + off("moe_act") * (model.mlp_mats - 1) * 2.0 * model.moe_ffn)
    sharded = sharded + moe_fraction * np.where(RE.modules_on(chosen, RE.MOE), 0.0, routed)
    per_token = replicated / np.where(sp, tp, 1.0) + sharded / tp
    return np.where((recompute == 2) | (recompute == 3), 0.0, per_token * micro_batch * seq_local)


def inflight_layers(layers, pp, vp, microbatches):
    """Layers' worth of activations the first pipeline stage holds (1F1B: p micro-batches of
    L/p layers; interleaved: times 1 + (p-1)/(p v)); fewer when there are fewer micro-batches."""
    interleave = np.where(vp > 1, 1 + (pp - 1) / (pp * vp), 1.0)
    return layers / pp * np.minimum(pp, microbatches) * interleave


def offload_exposed_s(offload_layers, layer_bytes, link_bytes_per_s, layers, fwd_layer_s, bwd_layer_s):
    """Exposed host-link time of one micro-batch's activation offloading: the offloaded layers'
    activations go to host memory during the forward and come back during the backward, on the
    copy engines while the layers compute (Transformer Engine's offload handler spreads the copies
    over the layers), so only the copy time beyond the whole forward (backward) is exposed."""
    copy = offload_layers * layer_bytes / link_bytes_per_s
    return np.maximum(copy - layers * fwd_layer_s, 0.0) + np.maximum(copy - layers * bwd_layer_s, 0.0)


def parameters_per_gpu(model, tp, pp, ep, etp=None):
    """(dense, expert) parameters held by the most loaded pipeline stage of one GPU; experts are
    split over etp x ep GPUs (etp: the expert-tensor-parallel degree, tp unless given).

    Both end stages hold the vocabulary matrix (input embedding, output layer or its tied copy);
    a single stage holds both unless they are tied."""
    layers_per_stage = model.layers / pp
    duplicated = model.latent_projection_params   # LatentMoE's projections: whole on every TP rank
    dense_per_layer = (model.mixer_params + (model.dense_layers * model.dense_mlp_params
                       + model.moe_layers * (model.moe_replicated_params - duplicated)) / model.layers) / tp
    dense_per_layer = dense_per_layer + model.moe_layers * duplicated / model.layers
    expert_per_layer = model.moe_layers * model.expert_params / model.layers / ((tp if etp is None else etp) * ep)
    return layers_per_stage * dense_per_layer + vocab_parameters_per_gpu(model, tp, pp), layers_per_stage * expert_per_layer


def vocab_parameters_per_gpu(model, tp, pp):
    """The vocabulary matrices among the most loaded stage's dense parameters (parameters_per_gpu):
    the input embedding, and the output layer where one stage holds both and they are not tied."""
    return model.embedding_params / tp + np.where((pp == 1) & ~model.tied, model.output_params / tp, 0.0)


def optimizer_state_bytes(moment_bytes):
    """Optimizer state per parameter: the FP32 master weight and Adam's two moments."""
    return MASTER_WEIGHT_BYTES + 2.0 * moment_bytes


def model_state_bytes(dense_params, expert_params, zero, dp_dense, dp_expert, layer_params_full, grad_bytes,
                      moment_bytes):
    """(weights, grads, optimizer) bytes per GPU for a ZeRO stage, `grad_bytes` per gradient and
    `moment_bytes` per Adam moment."""
    def shard(stage_from):
        return (np.where(zero >= stage_from, dense_params / dp_dense, dense_params)
                + np.where(zero >= stage_from, expert_params / dp_expert, expert_params))
    weights = WEIGHT_BYTES * shard(3) + np.where(zero >= 3, 2 * layer_params_full * WEIGHT_BYTES, 0.0)
    grads = grad_bytes * shard(2)
    optimizer = optimizer_state_bytes(moment_bytes) * shard(1)
    return weights, grads, optimizer


def kv_cache_bytes_per_token(model, tp, kv_bytes):
    """KV-cache bytes one token adds per layer on one GPU (GQA/MQA aware, MLA via kv_cache_dim).

    K and V of kv_heads heads are sharded over tensor parallelism; with tp > kv_heads each KV head
    is replicated on tp/kv_heads ranks (Megatron/TensorRT-LLM), so a GPU holds at least one head.
    An MLA latent cache (explicit `kv_cache_dim`) is not split by heads and is replicated over TP."""
    share = np.maximum(1.0 / tp, 1.0 / np.maximum(model.kv_heads, 1))
    per_gqa = model.kv_dim + model.v_dim
    sharded = np.isclose(model.kv_cache_dim, per_gqa) & ~model.is_mla
    return model.kv_cache_dim * np.where(sharded, share, 1.0) * kv_bytes


def indexer_key_bytes_per_token(model):
    """A sparse-attention indexer's key cached per token and attention layer: FP8 elements and their
    scale, whatever the KV cache's format, replicated over TP (the indexer is not split by heads)."""
    return model.has_indexer * (model.indexer_head_dim * INDEXER_KEY_BYTES + INDEXER_KEY_SCALE_BYTES)


def cache_bytes_per_sequence(model, tp, kv_bytes, context, state_bytes=ACT_BYTES):
    """Decode cache one sequence holds per layer on one GPU at `context` tokens, averaged over the
    layers: the KV cache of the attention layers (full layers grow with the context, sliding-window
    and chunked ones stop at their window or chunk, compressed ones (DeepSeek-V4) hold their window and
    one key per ratio tokens; MLA caches its latent; a sparse-attention model caches every key and
    its indexer key too, V4 an indexer key per compressed key of its CSA layers) and the constant
    recurrent state of Mamba-2 and Gated DeltaNet layers (sharded over TP by heads)."""
    cached = model.attention_fraction * model.attention_span(context, sparse=False)
    indexer_keys = model.attention_fraction * model.indexer_share * model.indexer_keys(context)
    cache = cached * kv_cache_bytes_per_token(model, tp, kv_bytes) + indexer_keys * indexer_key_bytes_per_token(model)
    if model.mamba is not None:
        cache = cache + model.mamba_fraction * model.mamba.state_elements() / tp * state_bytes
    if model.linear is not None:
        cache = cache + model.linear_fraction * model.linear.state_elements() / tp * state_bytes
    return cache
