"""Model dimensions -> parameter counts and FLOPs per token (dense, GQA, MLA, MoE, hybrid).

All functions take the model columns of a batch (numpy arrays, one value per design point).
A layer is a sequence mixer followed by a dense MLP or a mixture of experts. The mixer is softmax
attention (full, sliding-window or chunked; GQA or multi-head latent attention), a Mamba-2
state-space layer or gated linear attention (Gated DeltaNet), each on its share of the layers
(`*_layer_fraction`); hybrid models whose MLPs are layers of their own (Nemotron-H) have
`attention_layer_fraction + mamba_layer_fraction + mlp_layer_fraction` = 1 instead of 2. Which layer
has which type does not change time or memory to first order, so a per-layer pattern is reduced to
these shares when the model resolves (dse.catalog.hfconfig); every pipeline stage is assumed to
hold the same mix (Megatron splits a hybrid pattern by layer count; a stage may in fact hold up to
ceil(n/pp) layers of a rare type).
"""
from __future__ import annotations

from functools import cached_property

import numpy as np

from dse.columns import real


class Model:
    """Model columns as float arrays, plus the derived quantities every stage needs."""

    def __init__(self, cols: dict):
        f = lambda k: real(cols[k])  # noqa: E731
        self.layers, self.hidden, self.heads = f("layers"), f("hidden"), f("heads")
        self.kv_heads, self.head_dim, self.ffn = f("kv_heads"), f("head_dim"), f("ffn_hidden")
        self.vocab, self.seq_len = f("vocab"), f("seq_len")
        self.gated = f("gated_mlp") > 0
        self.dropout = f("dropout") > 0
        self.tied = f("tied_embeddings") > 0
        self.learned_pos = f("learned_pos_emb") > 0
        self.experts, self.top_k = f("experts"), f("top_k")
        self.shared_experts, self.moe_ffn = f("shared_experts"), f("moe_ffn_hidden")
        self.routed_groups, self.group_top_k = f("routed_groups"), f("group_top_k")   # node-limited routing
        # LatentMoE: the width a routed token has from its projection down to its projection back
        # (dispatch, permutation, the experts' input and output); the hidden size otherwise
        self.latent = f("moe_latent_dim")
        self.expert_width = np.where(self.latent > 0, self.latent, self.hidden)
        interval = np.maximum(f("moe_layer_interval"), 1)
        dense_lead = f("dense_layers")
        self.is_moe = self.experts > 0
        # layer types: shares of the layers by sequence mixer, and of the layers with an MLP/MoE block
        self.attention_fraction, self.mamba_fraction = f("attention_layer_fraction"), f("mamba_layer_fraction")
        self.linear_fraction, self.mlp_fraction = f("linear_attention_layer_fraction"), f("mlp_layer_fraction")
        self.window_fraction, self.window = f("sliding_window_fraction"), f("sliding_window")
        self.chunk_fraction, self.chunk = f("chunked_attention_fraction"), f("attention_chunk")
        # DeepSeek Sparse Attention: a query of a full attention layer attends to the top-k keys a
        # lightning indexer scores over the whole cache (0: dense)
        self.sparse_topk = f("sparse_attention_topk")
        self.indexer_heads, self.indexer_head_dim = f("indexer_heads"), f("indexer_head_dim")
        self.has_indexer = ((self.sparse_topk > 0) & (self.indexer_heads > 0)).astype(self.hidden.dtype)
        # DeepSeek-V4's compressed attention layers: compressed sparse (CSA: the indexer's top-k of
        # one key per csa ratio tokens) and heavily compressed (HCA: every key of one per hca ratio
        # tokens), each beside a raw sliding window of `sliding_window` tokens
        self.csa_fraction, self.csa_ratio = f("csa_layer_fraction"), f("csa_compress_ratio")
        self.hca_fraction, self.hca_ratio = f("hca_layer_fraction"), f("hca_compress_ratio")
        self.kv_shared = (f("kv_shared") > 0).astype(self.hidden.dtype)   # K = V: one tensor
        self.o_lora, self.o_groups = f("o_lora_rank"), np.maximum(f("o_groups"), 1.0)
        self.residual_streams = np.maximum(f("residual_streams"), 1.0)
        # share of the attention layers running the indexer: V4's CSA layers, else every layer (V3.2)
        self.indexer_share = self.has_indexer * np.where(self.csa_fraction > 0, self.csa_fraction, 1.0)
        # 0/1 in the model's float type (a bool would promote float32 arithmetic to float64)
        self.sinks = (f("attention_sinks") > 0).astype(self.hidden.dtype)
        self.expert_bias = (f("expert_bias") > 0).astype(self.hidden.dtype)
        self.expert_clamp = (f("expert_clamp") > 0).astype(self.hidden.dtype)
        self.yarn_rope = (f("yarn_rope") > 0).astype(self.hidden.dtype)
        self.output_gate = (f("attention_output_gate") > 0).astype(self.hidden.dtype)
        self.qk_norm_across_heads = (f("qk_norm_across_heads") > 0).astype(self.hidden.dtype)
        mlp_blocks = np.round(self.layers * self.mlp_fraction)
        self.moe_layers = np.where(self.is_moe, np.maximum(np.floor((mlp_blocks - dense_lead) / interval), 0.0), 0.0)
        self.dense_layers = mlp_blocks - self.moe_layers          # layers with a dense MLP
        # multi-head latent attention: head_dim = qk_nope_head_dim + qk_rope_head_dim
        self.q_lora, self.kv_lora, self.rope_dim = f("q_lora_rank"), f("kv_lora_rank"), f("qk_rope_head_dim")
        self.is_mla = self.kv_lora > 0
        self.q_rank = (self.q_lora > 0) & ~self.is_mla   # a GQA query through a rank (DeepSeek-V4)
        v_head = f("v_head_dim")
        self.v_head_dim = np.where(v_head > 0, v_head, self.head_dim)
        kv_dim = f("kv_cache_dim")
        # Elements cached per token per attention layer: K and V, MLA's latent + rotary key, or as given.
        self.kv_cache_dim = np.where(kv_dim > 0, kv_dim, np.where(
            self.is_mla, self.kv_lora + self.rope_dim,
            self.kv_heads * (self.head_dim + (1.0 - self.kv_shared) * self.v_head_dim)))
        # DeepSeek Sparse Attention runs MLA in its MQA form in training and prefill too (DeepSeek-V3.2
        # report; Megatron-Core's DSAttention consumes the absorbed layout): every head's query absorbs
        # W_UK and attends over the shared latent, scores over kv_lora + rope, values over kv_lora
        self.absorbed = self.is_mla & (self.sparse_topk > 0)
        self.score_dims = np.where(self.absorbed, 2.0 * self.kv_lora + self.rope_dim, self.head_dim + self.v_head_dim)
        self.q_dim = self.heads * self.head_dim
        self.o_dim = self.heads * self.v_head_dim               # attention output (out-projection input)
        self.kv_dim = self.kv_heads * self.head_dim             # K width (V: v_dim)
        self.v_dim = self.kv_heads * self.v_head_dim * (1.0 - self.kv_shared)   # V projected and cached apart
        self.mlp_mats = (2 + self.gated).astype(self.hidden.dtype)  # gated MLPs (SwiGLU): gate+up+down
        self.mamba = Mamba2(f) if np.any(self.mamba_fraction > 0) else None
        self.linear = GatedDeltaNet(f) if np.any(self.linear_fraction > 0) else None
        # sub-blocks (a mixer or an MLP, each with its norm and residual) per layer: 2 in a transformer
        self.blocks_per_layer = self.attention_fraction + self.mamba_fraction + self.linear_fraction + self.mlp_fraction

    # -- parameters -----------------------------------------------------------------------
    @cached_property
    def attention_params(self):
        """One attention layer's mixer: projections (GQA, or MLA's compressions and up-projections),
        the output gate and sinks where the model has them, its norm, and (averaged over the layers)
        a sparse-attention indexer and DeepSeek-V4's KV compressors."""
        q = self.q_projection_params
        gqa = self.hidden * (self.q_dim * self.output_gate + self.kv_dim + self.v_dim) + q
        if np.any(self.is_mla):
            kv = (self.hidden * (self.kv_lora + self.rope_dim) + self.kv_lora
                  + self.kv_lora * self.heads * (self.head_dim - self.rope_dim + self.v_head_dim))
            gqa = np.where(self.is_mla, q + kv, gqa)
        return (gqa + self.o_projection_params + self.hidden + self.sinks * self.heads + self.indexer_params
                + self.compressor_params)

    @cached_property
    def q_projection_params(self):
        """The query projection: hidden -> q_dim, or through a normed q_lora_rank (MLA's, DeepSeek-V4's)."""
        return np.where(self.q_lora > 0, self.q_lora * (self.hidden + 1.0 + self.q_dim), self.hidden * self.q_dim)

    @cached_property
    def o_projection_params(self):
        """The output projection: o_dim -> hidden, or grouped low-rank (DeepSeek-V4: each of o_groups
        head groups to o_lora_rank, then o_groups x o_lora_rank -> hidden)."""
        low_rank = self.o_lora * (self.o_dim + self.o_groups * self.hidden)
        return np.where(self.o_lora > 0, low_rank, self.o_dim * self.hidden)

    @cached_property
    def compressor_params(self):
        """DeepSeek-V4's KV compressors, averaged over the attention layers: a key and a gate projection
        from the hidden state (twice the width on CSA layers, whose windows overlap), and on CSA layers
        the indexer's own compressor at indexer_head_dim (DeepseekV4Compressor / Indexer wkv, wgate)."""
        csa = self.csa_fraction * 4.0 * self.hidden * (self.head_dim + self.indexer_head_dim * self.has_indexer)
        return csa + self.hca_fraction * 2.0 * self.hidden * self.head_dim

    @cached_property
    def indexer_params(self):
        """The sparse-attention indexer, averaged over the attention layers (V4 runs it on its CSA
        layers only): its query up-projection from the query latent (the hidden state without one),
        its key projection (V4: its compressor's, in compressor_params) and LayerNorm, and the
        per-head weights (DeepSeek-V3.2-Exp inference/model.py Indexer: wq_b, wk, k_norm, weights_proj)."""
        q_in = np.where(self.q_lora > 0, self.q_lora, self.hidden)
        heads, dim = self.indexer_heads, self.indexer_head_dim
        key = np.where(self.csa_fraction > 0, 0.0, self.hidden * dim)   # V4's indexer keys come from its compressor
        return self.indexer_share * (q_in * heads * dim + key + 2.0 * dim + self.hidden * heads)

    @cached_property
    def mixer_params(self):
        """Mean over the layers of everything but the MLP/MoE weights: each type of sequence mixer
        on its share of the layers, and the norm in front of each MLP block."""
        params = (self.attention_fraction * self.attention_params + self.mlp_fraction * self.hidden
                  + self.blocks_per_layer * self.hyper_connection_params)
        if self.mamba is not None:
            params = params + self.mamba_fraction * self.mamba.params(self.hidden)
        if self.linear is not None:
            params = params + self.linear_fraction * self.linear.params(self.hidden)
        return params

    @cached_property
    def hyper_connection_params(self):
        """One block's hyper-connection mixing (DeepSeek-V4 mHC, n = residual_streams): a projection
        of the n streams to the (2 + n) n mixing logits, their biases and 3 scales (0 for a plain residual)."""
        n = self.residual_streams
        return np.where(n > 1, (2.0 + n) * n * (n * self.hidden + 1.0) + 3.0, 0.0)

    @cached_property
    def dense_mlp_params(self):
        return self.mlp_mats * self.hidden * self.ffn

    @cached_property
    def expert_params(self):
        """Routed-expert parameters of one MoE layer (sharded over EP)."""
        return self.experts * self.one_expert_params

    @cached_property
    def one_expert_params(self):
        """One routed expert's matrices, and their biases where it has them (GPT-OSS)."""
        bias = self.expert_bias * ((self.mlp_mats - 1) * self.moe_ffn + self.expert_width)
        return self.mlp_mats * self.expert_width * self.moe_ffn + bias

    @cached_property
    def moe_replicated_params(self):
        """Shared experts, router and LatentMoE's two projections of one MoE layer (not sharded over EP)."""
        return (self.shared_experts * self.mlp_mats * self.hidden * self.moe_ffn + self.hidden * self.experts
                + self.latent_projection_params)

    @cached_property
    def latent_projection_params(self):
        """LatentMoE's hidden -> latent and latent -> hidden projections of one MoE layer, which
        Megatron-Core builds `duplicated` (every TP rank holds them whole)."""
        return 2.0 * self.hidden * self.latent

    @cached_property
    def embedding_params(self):
        pos = np.where(self.learned_pos, self.seq_len * self.hidden, 0.0)
        return self.vocab * self.hidden + pos

    @cached_property
    def output_params(self):
        return np.where(self.tied, 0.0, self.vocab * self.hidden)

    @cached_property
    def total_params(self):
        return (self.layers * self.mixer_params + self.dense_layers * self.dense_mlp_params
                + self.moe_layers * (self.expert_params + self.moe_replicated_params)
                + self.embedding_params + self.output_params)

    @cached_property
    def active_params(self):
        """Parameters touched per token (top-k routed experts instead of all of them)."""
        routed = self.top_k * self.one_expert_params
        return (self.layers * self.mixer_params + self.dense_layers * self.dense_mlp_params
                + self.moe_layers * (routed + self.moe_replicated_params)
                + self.embedding_params + self.output_params)

    # -- FLOPs --------------------------------------------------------------------------
    def attention_span(self, context, sparse=True):
        """Keys a query attends to at a context length, averaged over the attention layers: the whole
        context on full layers (Megatron convention, no causal halving), at most `sliding_window`
        on windowed ones and `attention_chunk` on chunked ones; with `sparse`, at most
        `sparse_attention_topk` on the full layers of a sparse-attention model. A compressed layer
        (DeepSeek-V4) attends to its raw window and its compressed keys, on a CSA layer with `sparse`
        at most `sparse_attention_topk` of them. Without `sparse`: the keys the cache holds (an
        indexer scores them all and the top-k may pick any)."""
        span = context
        if np.any(self.window_fraction > 0):
            span = span + self.window_fraction * (capped(context, self.window) - context)
        if np.any(self.chunk_fraction > 0):
            span = span + self.chunk_fraction * (capped(context, self.chunk) - context)
        if sparse and np.any(self.sparse_topk > 0):
            span = span + self.full_fraction * (capped(context, self.sparse_topk) - context)
        if np.any(self.csa_fraction + self.hca_fraction > 0):
            raw = np.where(self.window > 0, np.minimum(context, self.window), 0.0)
            csa = self.compressed_keys(context, self.csa_ratio)
            if sparse:
                csa = capped(csa, self.sparse_topk)
            span = (span + self.csa_fraction * (raw + csa - context)
                    + self.hca_fraction * (raw + self.compressed_keys(context, self.hca_ratio) - context))
        return span

    @property
    def full_fraction(self):
        """Share of the attention layers that attend over the whole context (a sparse-attention model's
        top-k of it): not windowed, chunked or compressed."""
        return 1.0 - self.window_fraction - self.chunk_fraction - self.csa_fraction - self.hca_fraction

    @property
    def compressed_kv_share(self):
        """K/V per token a layer holds, averaged over the attention layers, relative to caching every
        token: a compressed layer's one key per ratio tokens (its raw window left out)."""
        return (1.0 - self.csa_fraction - self.hca_fraction + self.csa_fraction / np.maximum(self.csa_ratio, 1.0)
                + self.hca_fraction / np.maximum(self.hca_ratio, 1.0))

    @staticmethod
    def compressed_keys(context, ratio):
        """Compressed keys cached for `context` tokens: one per `ratio` tokens."""
        return context / np.maximum(ratio, 1.0)

    def indexer_keys(self, context):
        """Keys a layer's indexer scores per query: the compressed keys of a CSA layer (DeepSeek-V4),
        every key before it on a DeepSeek Sparse Attention layer (V3.2)."""
        return np.where(self.csa_fraction > 0, self.compressed_keys(context, self.csa_ratio), context)

    def mixer_flops_per_token(self, context):
        """Forward FLOPs per token of one average layer beyond 2 per weight: attention scores and
        attention x V (2 heads (qk + v) per key), a sparse-attention indexer's scores, the state-space
        and delta-rule scans."""
        flops = self.attention_fraction * 2.0 * self.heads * self.score_dims * self.attention_span(context)
        if np.any(self.has_indexer > 0):   # the indexer's scores: every head against every key it scores
            flops = flops + (self.attention_fraction * self.indexer_share * 2.0 * self.indexer_heads * self.indexer_head_dim
                             * self.indexer_keys(context))
        if self.mamba is not None:
            flops = flops + self.mamba_fraction * self.mamba.scan_flops_per_token(context)
        if self.linear is not None:
            flops = flops + self.linear_fraction * self.linear.scan_flops_per_token(context)
        return flops

    def forward_flops_per_token(self, context):
        """Model FLOPs of one forward token at a given attention context length, the Megatron
        convention (2 per weight that multiplies, attention over the full context or its window, no
        causal halving; embedding lookup free)."""
        matmul_params = self.active_params - self.embedding_params + np.where(self.tied, self.vocab * self.hidden, 0.0)
        return 2.0 * matmul_params + self.layers * self.mixer_flops_per_token(context)


def capped(context, limit):
    """min(context, limit) where a limit is set (> 0), else the context."""
    return np.where(limit > 0, np.minimum(context, limit), context)


class Mamba2:
    """A Mamba-2 mixer (state-space duality, Dao & Gu 2024, arXiv 2405.21060): in_proj to z, x, B, C
    and dt, a causal conv over x, B, C, the chunked SSD scan, a gated RMSNorm and out_proj.
    Shapes as in Hugging Face `NemotronHMamba2Mixer` and Megatron-Core `MambaMixer`."""

    def __init__(self, f):
        self.heads, self.head_dim, self.state = f("mamba_heads"), f("mamba_head_dim"), f("mamba_state_dim")
        self.groups, self.conv_kernel, self.chunk = f("mamba_groups"), f("mamba_conv_kernel"), f("mamba_chunk")
        self.inner = self.heads * self.head_dim
        self.bc = 2.0 * self.groups * self.state                   # B and C widths
        self.conv_dim = self.inner + self.bc
        self.in_proj = 2.0 * self.inner + self.bc + self.heads      # z, x, B, C, dt

    def params(self, hidden):
        conv = self.conv_dim * (self.conv_kernel + 1.0)             # weights and bias
        return hidden * self.in_proj + conv + 3.0 * self.heads + self.inner + self.inner * hidden + hidden

    def scan_flops_per_token(self, context):
        """SSD with chunk Q (per token): C B^T per group 2QGN, the intra-chunk output 2QHP, the chunk
        states B^T x and their output C h 2HPN each; the inter-chunk recurrence (2HPN/Q) and the
        element-wise decays are left out."""
        q = np.minimum(self.chunk, np.maximum(context, 1.0))
        return 2.0 * q * (self.groups * self.state + self.heads * self.head_dim) + 4.0 * self.heads * self.head_dim * self.state

    def state_elements(self):
        """Recurrent state per sequence: the SSM state H P N and the conv window (K-1) conv_dim."""
        return self.heads * self.head_dim * self.state + (self.conv_kernel - 1.0) * self.conv_dim


class GatedDeltaNet:
    """Gated linear attention as Qwen3-Next runs it (Gated DeltaNet, Yang et al. 2024, arXiv
    2412.06464): in_proj to q, k, v, the output gate z and beta, a; a causal conv over q, k, v; the
    chunked delta rule (flash-linear-attention); a gated RMSNorm per head and out_proj."""

    def __init__(self, f):
        self.key_heads, self.value_heads = f("linear_key_heads"), f("linear_value_heads")
        self.key_head_dim, self.value_head_dim = f("linear_key_head_dim"), f("linear_value_head_dim")
        self.conv_kernel, self.chunk = f("linear_conv_kernel"), f("linear_attention_chunk")
        self.key_dim, self.value_dim = self.key_heads * self.key_head_dim, self.value_heads * self.value_head_dim
        self.conv_dim = 2.0 * self.key_dim + self.value_dim
        self.in_proj = 2.0 * self.key_dim + 2.0 * self.value_dim + 2.0 * self.value_heads   # q, k, v, z, beta, a

    def params(self, hidden):
        return (hidden * self.in_proj + self.conv_dim * self.conv_kernel + 2.0 * self.value_heads
                + self.value_head_dim + self.value_dim * hidden + hidden)

    def scan_flops_per_token(self, context):
        """Chunked delta rule with chunk C per value head (q, k repeated to the value heads), per
        token: K K^T, the WY factors W = T K and U = T V, Q K^T and the intra-chunk output
        2C (3 dk + 2 dv); W S, Q S and the state update 6 dk dv. The triangular solve is left out."""
        c = np.minimum(self.chunk, np.maximum(context, 1.0))
        dk, dv = self.key_head_dim, self.value_head_dim
        return self.value_heads * (2.0 * c * (3.0 * dk + 2.0 * dv) + 6.0 * dk * dv)

    def state_elements(self):
        """Recurrent state per sequence: a dk x dv matrix per value head and the conv window."""
        return self.value_heads * self.key_head_dim * self.value_head_dim + (self.conv_kernel - 1.0) * self.conv_dim
