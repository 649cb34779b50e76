"""Transformer dimensions -> parameter counts, per-layer GEMM shapes and FLOPs (dense, GQA, MoE).

All functions take the model columns of a batch (numpy arrays, one value per design point).
A layer is an attention block followed by either a dense MLP or a mixture of experts.
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
        interval = np.maximum(f("moe_layer_interval"), 1)
        dense_lead = f("dense_layers")
        self.is_moe = self.experts > 0
        self.moe_layers = np.where(self.is_moe, np.floor((self.layers - dense_lead) / interval), 0.0)
        self.dense_layers = self.layers - self.moe_layers
        kv_dim = f("kv_cache_dim")
        # Elements cached per token per layer (K and V); MLA-style models give it explicitly.
        self.kv_cache_dim = np.where(kv_dim > 0, kv_dim, 2 * self.kv_heads * self.head_dim)
        self.q_dim = self.heads * self.head_dim
        self.kv_dim = self.kv_heads * self.head_dim
        self.mlp_mats = (2 + self.gated).astype(self.hidden.dtype)  # gated MLPs (SwiGLU): gate+up+down

    # -- parameters -----------------------------------------------------------------------
    @cached_property
    def attention_params(self):
        return self.hidden * (self.q_dim + 2 * self.kv_dim) + self.q_dim * self.hidden + 2 * self.hidden

    @cached_property
    def dense_mlp_params(self):
        return self.mlp_mats * self.hidden * self.ffn

    @cached_property
    def expert_params(self):
        """Routed-expert parameters of one MoE layer (sharded over EP)."""
        return self.experts * self.mlp_mats * self.hidden * self.moe_ffn

    @cached_property
    def moe_replicated_params(self):
        """Shared experts and router of one MoE layer (not sharded over EP)."""
        return self.shared_experts * self.mlp_mats * self.hidden * self.moe_ffn + self.hidden * self.experts

    @cached_property
    def embedding_params(self):
        pos = np.where(self.learned_pos, self.seq_len * self.hidden, 0.0)
        return self.vocab * self.hidden + pos

    @cached_property
    def output_params(self):
        return np.where(self.tied, 0.0, self.vocab * self.hidden)

    @cached_property
    def total_params(self):
        return (self.layers * self.attention_params + self.dense_layers * self.dense_mlp_params
                + self.moe_layers * (self.expert_params + self.moe_replicated_params)
                + self.embedding_params + self.output_params)

    @cached_property
    def active_params(self):
        """Parameters touched per token (top-k routed experts instead of all of them)."""
        routed = self.top_k * self.mlp_mats * self.hidden * self.moe_ffn
        return (self.layers * self.attention_params + self.dense_layers * self.dense_mlp_params
                + self.moe_layers * (routed + self.moe_replicated_params)
                + self.embedding_params + self.output_params)

    # -- FLOPs --------------------------------------------------------------------------
    def forward_flops_per_token(self, context):
        """Model FLOPs of one forward token at a given attention context length, the Megatron
        convention (attention over the full context, no causal halving; embedding lookup free)."""
        matmul_params = self.active_params - self.embedding_params + np.where(self.tied, self.vocab * self.hidden, 0.0)
        attention = 4.0 * self.layers * self.q_dim * context  # scores + attention x V
        return 2.0 * matmul_params + attention
