"""Per-family mappers of Hugging Face configs to dse model columns (dse.catalog.hfconfig reads the
config and dispatches here). Each mapper reads the fields the family's `transformers` (or
remote-code) config class defines, with that class's defaults where the published config leaves a
field out, and reduces per-layer patterns to the share of the layers of each type.

MoE layers are counted exactly (whatever the pattern: a step, a leading dense block, a list of
MLP-only layers) and given as `dense_layers` = layers with a dense MLP, `moe_layer_interval` = 1:
the position of a layer does not change its cost. A shared expert wider than a routed one counts as
`shared_experts` = its width / the routed width (Nemotron 3: 3712 / 1856 = 2); a width that is not
a multiple is refused.
"""
from __future__ import annotations

from collections import Counter

from dse.catalog.hfconfig import Fields, training_context


def base(f: Fields, *, tied: bool, gated: bool = True) -> dict:
    """The decoder dimensions every family shares."""
    hidden, heads = f.num("hidden_size"), f.num("num_attention_heads")
    return {
        "layers": f.num("num_hidden_layers"), "hidden": hidden, "heads": heads,
        "kv_heads": f.num("num_key_value_heads", heads),
        "head_dim": f.num("head_dim", hidden / heads, integer=False),
        "ffn_hidden": f.num("intermediate_size", 4 * hidden, minimum=0),
        "vocab": f.num("vocab_size"), "seq_len": training_context(f),
        "gated_mlp": float(gated), "tied_embeddings": f.flag("tie_word_embeddings", tied),
        "dropout": 0.0, "learned_pos_emb": 0.0, "yarn_rope": yarn_rope(f),
    }


def yarn_rope(f: Fields) -> float:
    """1 where config.json scales the rotary embedding by YaRN (rope_scaling type 'yarn'; newer
    transformers releases write it as rope_parameters)."""
    scaling = f.get("rope_scaling") or f.get("rope_parameters")
    kind = scaling.get("rope_type", scaling.get("type")) if isinstance(scaling, dict) else None
    return float(kind == "yarn")


def count_types(f: Fields, key: str, layers: float, allowed: dict) -> Counter:
    """Layers per dse type from a per-layer list (`layer_types`); unknown types are refused."""
    counts = Counter()
    for kind in f.strings(key, int(layers)):
        if kind not in allowed:
            raise f.error(key, f"layer type {kind!r} is not representable (known: {', '.join(allowed)})")
        counts[allowed[kind]] += 1
    return counts


def attention_variants(counts: Counter, window: float = 0.0, chunk: float = 0.0) -> dict:
    """Shares of the attention layers that are windowed or chunked, from per-type layer counts."""
    attention = counts["full"] + counts["sliding"] + counts["chunked"]
    share = (lambda k: counts[k] / attention) if attention else (lambda k: 0.0)  # noqa: E731
    return {"sliding_window_fraction": share("sliding"), "sliding_window": window if counts["sliding"] else 0.0,
            "chunked_attention_fraction": share("chunked"), "attention_chunk": chunk if counts["chunked"] else 0.0}


def moe(f: Fields, cols: dict, moe_layers: int, *, experts: str, top_k: str, expert_size: str,
        shared: float = 0.0) -> dict:
    """MoE columns: `moe_layers` of the MLP blocks are MoE, the others dense."""
    mlp_blocks = round(cols["layers"] * cols.get("mlp_layer_fraction", 1.0))
    cols.update(experts=f.num(experts), top_k=f.num(top_k), moe_ffn_hidden=f.num(expert_size),
                shared_experts=shared, moe_layer_interval=1.0, dense_layers=float(mlp_blocks - moe_layers))
    return cols


def shared_experts(f: Fields, count_key: str | None, size_key: str, expert_size: str, default_count: float = 1.0) -> float:
    """Shared experts in units of one routed expert's width."""
    if not f.has(size_key):
        return f.num(count_key, 0.0, minimum=0) if count_key else 0.0
    count = f.num(count_key, default_count, minimum=0) if count_key else default_count
    width = count * f.num(size_key, minimum=0) / f.num(expert_size)
    if width != int(width):
        raise f.error(size_key, f"{f.get(size_key)!r} is not a multiple of {expert_size} {f.get(expert_size)!r}; "
                                "a shared expert must be a whole number of routed experts' widths")
    return width


def window_of_uniform(f: Fields, cols: dict, sliding_layers: int) -> dict:
    counts = Counter(full=int(cols["layers"]) - sliding_layers, sliding=sliding_layers)
    return attention_variants(counts, f.num("sliding_window", 0.0, minimum=0))


# ---- families ------------------------------------------------------------------------------
def llama(f: Fields) -> dict:
    """Llama 2/3 and Mistral: every layer GQA attention + SwiGLU MLP; Mistral's `sliding_window`
    applies to every layer (a `layer_types` list, where given, says which)."""
    cols = base(f, tied=False)
    if f.has("layer_types"):
        counts = count_types(f, "layer_types", cols["layers"], {"full_attention": "full", "sliding_attention": "sliding"})
        cols.update(attention_variants(counts, f.num("sliding_window", 0.0, minimum=0)))
    elif f.has("sliding_window"):
        cols.update(window_of_uniform(f, cols, int(cols["layers"])))
    return cols


def qwen(f: Fields) -> dict:
    """Qwen2 / Qwen3 dense: with `use_sliding_window`, layers from `max_window_layers` on use the
    window (transformers Qwen2Config); else full attention everywhere."""
    cols = base(f, tied=False)
    if f.has("layer_types"):
        counts = count_types(f, "layer_types", cols["layers"], {"full_attention": "full", "sliding_attention": "sliding"})
        cols.update(attention_variants(counts, f.num("sliding_window", 0.0, minimum=0)))
    elif f.get("use_sliding_window", False) and f.has("sliding_window"):
        sliding = max(int(cols["layers"]) - int(f.num("max_window_layers", cols["layers"], minimum=0)), 0)
        cols.update(window_of_uniform(f, cols, sliding))
    return cols


def mixtral(f: Fields) -> dict:
    cols = llama(f)
    return moe(f, cols, int(cols["layers"]), experts="num_local_experts", top_k="num_experts_per_tok",
               expert_size="intermediate_size")


def qwen_moe(f: Fields) -> dict:
    """Qwen2-MoE / Qwen3-MoE: layer i is MoE unless listed in `mlp_only_layers`, on every
    `decoder_sparse_step`-th layer; Qwen2-MoE adds a (wider) shared expert."""
    return qwen_style_moe(f, qwen(f))


def qwen_style_moe(f: Fields, cols: dict) -> dict:
    """Qwen's MoE fields on `cols`: layer i is MoE unless listed in `mlp_only_layers`, on every
    `decoder_sparse_step`-th layer, with a shared expert of `shared_expert_intermediate_size`."""
    layers, step = int(cols["layers"]), int(f.num("decoder_sparse_step", 1))
    dense = set(f.get("mlp_only_layers", []) or [])
    moe_layers = sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)
    width = shared_experts(f, None, "shared_expert_intermediate_size", "moe_intermediate_size")
    return moe(f, cols, moe_layers, experts="num_experts", top_k="num_experts_per_tok",
               expert_size="moe_intermediate_size", shared=width)


def deepseek(f: Fields) -> dict:
    """DeepSeek-V2/V3 and Kimi K2: multi-head latent attention on every layer; MoE from layer
    `first_k_dense_replace` on, every `moe_layer_freq`-th. Multi-token-prediction modules
    (`num_nextn_predict_layers`) are not part of the model counted here (as in the published totals)."""
    cols = base(f, tied=False)
    rope, nope = f.num("qk_rope_head_dim"), f.num("qk_nope_head_dim")
    cols.update(head_dim=rope + nope, v_head_dim=f.num("v_head_dim"), kv_lora_rank=f.num("kv_lora_rank"),
                q_lora_rank=f.num("q_lora_rank", 0.0, minimum=0), qk_rope_head_dim=rope,
                yarn_rope=0.0)   # MLA's YaRN RoPE has a fused kernel of its own (fused_apply_mla_rope_for_q)
    layers, first, freq = int(cols["layers"]), int(f.num("first_k_dense_replace", 0, minimum=0)), int(f.num("moe_layer_freq", 1))
    moe_layers = sum(1 for i in range(layers) if i >= first and i % freq == 0)
    # node-limited routing: a token's experts come from topk_group of the n_group expert groups
    cols.update(routed_groups=f.num("n_group", 0.0, minimum=0), group_top_k=f.num("topk_group", 0.0, minimum=0))
    return moe(f, cols, moe_layers, experts="n_routed_experts", top_k="num_experts_per_tok",
               expert_size="moe_intermediate_size", shared=f.num("n_shared_experts", 0.0, minimum=0))


def deepseek_sparse(f: Fields) -> dict:
    """DeepSeek-V3.2 (`deepseek_v32`) and GLM-5 (`glm_moe_dsa`): DeepSeek-V3's MLA and MoE layers
    with DeepSeek Sparse Attention on every layer, each query attending to the `index_topk` keys a
    lightning indexer (`index_n_heads` heads of `index_head_dim`) scores highest."""
    cols = deepseek(f)
    cols.update(sparse_attention_topk=f.num("index_topk"), indexer_heads=f.num("index_n_heads"),
                indexer_head_dim=f.num("index_head_dim"))
    return cols


# DeepSeek-V4 compress_ratios entries: 0 sliding window only; 4 compressed sparse attention (the one
# ratio with a lightning indexer, DeepseekV4Compressor: indexer if compress_ratio == 4); any other
# heavily compressed attention (128 in the released models)
CSA_RATIO = 4


def deepseek_v4(f: Fields) -> dict:
    """DeepSeek-V4 (`deepseek_v4`): one 512-wide KV head that is both key and value, queries through
    q_lora_rank, a grouped low-rank output projection (o_groups, o_lora_rank), per layer a sliding
    window (`sliding_window`) alone or beside compressed keys (`compress_ratios`: CSA, whose indexer
    picks `index_topk` of them, or HCA, all of them), attention sinks, `hc_mult` hyper-connection
    residual streams, every layer MoE (the leading hash-routed ones cost the same less a router GEMM).
    Its multi-token-prediction layers are not part of the model counted here."""
    cols = base(f, tied=False)
    layers = int(cols["layers"])
    ratios = compress_ratios(f, layers)
    hca = {r for r in ratios if r not in (0, CSA_RATIO)}
    if len(hca) > 1:
        raise f.error("compress_ratios", f"heavily compressed ratios {sorted(hca)}: one is representable")
    hca_ratio = max(hca, default=0)
    count = lambda match: sum(1 for r in ratios if match(r)) / layers  # noqa: E731
    cols.update(kv_shared=1.0, q_lora_rank=f.num("q_lora_rank"), o_lora_rank=f.num("o_lora_rank"),
                o_groups=f.num("o_groups"), qk_rope_head_dim=f.num("qk_rope_head_dim", 0.0, minimum=0),
                sliding_window=f.num("sliding_window"), sliding_window_fraction=count(lambda r: r == 0),
                csa_layer_fraction=count(lambda r: r == CSA_RATIO), csa_compress_ratio=float(CSA_RATIO),
                hca_layer_fraction=count(lambda r: r == hca_ratio > 0), hca_compress_ratio=float(hca_ratio),
                sparse_attention_topk=f.num("index_topk"), indexer_heads=f.num("index_n_heads"),
                indexer_head_dim=f.num("index_head_dim"), attention_sinks=1.0,
                residual_streams=f.num("hc_mult", 1.0), yarn_rope=0.0,   # Megatron-Core fuses its RoPE
                expert_clamp=float(f.num("swiglu_limit", 0.0, minimum=0) > 0))
    return moe(f, cols, layers, experts="n_routed_experts", top_k="num_experts_per_tok",
               expert_size="moe_intermediate_size", shared=f.num("n_shared_experts", 0.0, minimum=0))


def compress_ratios(f: Fields, layers: int) -> list:
    """Per-layer compression ratios: `compress_ratios` (which may list the MTP layers after the
    decoder's), or the native `layer_types` with their `compress_rates`."""
    ratios = f.get("compress_ratios")
    if ratios is None:
        rates = f.get("compress_rates", {})
        ratios = [0 if kind == "sliding_attention" else rates.get(kind) for kind in f.strings("layer_types", layers)]
    if not isinstance(ratios, list) or len(ratios) < layers or not all(
            isinstance(r, (int, float)) and r >= 0 for r in ratios[:layers]):
        raise f.error("compress_ratios", f"{ratios!r} is not a list of {layers} ratios (0 or more) per layer")
    return [int(r) for r in ratios[:layers]]


def kimi_k25(f: Fields) -> dict:
    """Kimi K2.5 (its `text_config`, a DeepSeek-V3 / Kimi K2 decoder); the MoonViT vision encoder is
    not modelled."""
    return deepseek(f.sub("text_config"))


def minimax_m2(f: Fields) -> dict:
    """MiniMax-M2: full softmax attention with QK-norm over all heads on every layer (`attn_type_list` all 1; the
    lightning-attention layers of MiniMax-01/M1 are 0 and not representable), every layer MoE
    (`num_local_experts`, top `num_experts_per_tok`, width `intermediate_size`), no shared expert.
    Its multi-token-prediction modules (`num_mtp_modules`) are not part of the model counted here."""
    cols = mixtral(f)
    kinds = f.get("attn_type_list")
    if kinds is not None and (not isinstance(kinds, list) or any(k != 1 for k in kinds)):
        raise f.error("attn_type_list", "only full softmax attention (1 on every layer) is representable")
    if f.num("shared_intermediate_size", 0.0, minimum=0):
        raise f.error("shared_intermediate_size", "a shared expert is not representable in this family")
    # MiniMaxM2Attention: q_norm / k_norm of the whole num_heads x head_dim projection (`qk_norm_type`
    # "per_layer"); "per_head" norms each head alone, as Qwen3 does, and needs no exchange
    cols["qk_norm_across_heads"] = float(bool(f.get("use_qk_norm")) and f.get("qk_norm_type", "per_layer") == "per_layer")
    return cols


def gpt_oss(f: Fields) -> dict:
    """GPT-OSS: alternating sliding-window (128) and full attention with learned sinks; every layer MoE."""
    cols = base(f, tied=False)
    counts = count_types(f, "layer_types", cols["layers"], {"full_attention": "full", "sliding_attention": "sliding"})
    cols.update(attention_variants(counts, f.num("sliding_window", 0.0, minimum=0)), attention_sinks=1.0,
                expert_bias=1.0,   # GptOssExperts: gate_up_proj_bias and down_proj_bias
                expert_clamp=float(f.num("swiglu_limit", 0.0, minimum=0) > 0))   # clamped gate and linear inputs
    top_k = "num_experts_per_tok" if f.has("num_experts_per_tok") else "experts_per_token"
    return moe(f, cols, int(cols["layers"]), experts="num_local_experts", top_k=top_k, expert_size="intermediate_size")


def llama4(f: Fields) -> dict:
    """Llama 4 (its `text_config`): chunked attention (`attention_chunk_size`) on the RoPE layers,
    full attention on the NoPE ones (`no_rope_layers` 0; by default every 4th); MoE on `moe_layers`
    (default: every `interleave_moe_layer_step`-th), a dense MLP of `intermediate_size_mlp` elsewhere;
    one shared expert of the routed width."""
    if f.has("text_config"):
        f = f.sub("text_config")
    cols = base(f, tied=False)
    layers = int(cols["layers"])
    cols["ffn_hidden"] = f.num("intermediate_size_mlp", cols["ffn_hidden"], minimum=0)
    if f.has("layer_types"):
        counts = count_types(f, "layer_types", layers, {"full_attention": "full", "chunked_attention": "chunked"})
    else:
        rope = f.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(layers)]
        if not isinstance(rope, list) or len(rope) != layers:
            raise f.error("no_rope_layers", f"expected one 0/1 per layer ({layers} layers)")
        counts = Counter(chunked=sum(1 for r in rope if r), full=sum(1 for r in rope if not r))
    if not f.has("attention_chunk_size"):
        counts = Counter(full=layers)
    cols.update(attention_variants(counts, chunk=f.num("attention_chunk_size", 0.0, minimum=0)))
    step = int(f.num("interleave_moe_layer_step", 1))
    moe_list = f.get("moe_layers") or list(range(step - 1, layers, step))
    return moe(f, cols, len(moe_list), experts="num_local_experts", top_k="num_experts_per_tok",
               expert_size="intermediate_size", shared=1.0)


GEMMA3_TEXT_DEFAULTS = {  # transformers Gemma3TextConfig defaults (a published text_config omits some)
    "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131072,
    "sliding_window": 4096, "tie_word_embeddings": True}


def gemma3(f: Fields) -> dict:
    """Gemma 3 (its `text_config` in the multimodal config): local sliding-window layers and one
    global layer every `sliding_window_pattern` (6) layers, or as `layer_types` says; GeGLU MLP; tied
    embeddings. The vision tower is not modelled."""
    if f.has("text_config"):
        f = f.sub("text_config")
    f = Fields({**GEMMA3_TEXT_DEFAULTS, **{k: v for k, v in f.fields.items() if v is not None}}, f.where, f.prefix)
    cols = base(f, tied=True)
    layers = int(cols["layers"])
    if f.has("layer_types"):
        counts = count_types(f, "layer_types", layers, {"full_attention": "full", "sliding_attention": "sliding"})
    else:
        pattern = int(f.num("sliding_window_pattern", 6))
        counts = Counter(full=sum(1 for i in range(layers) if (i + 1) % pattern == 0))
        counts["sliding"] = layers - counts["full"]
    cols.update(attention_variants(counts, f.num("sliding_window", 0.0, minimum=0)))
    return cols


NEMOTRON_H_SYMBOLS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
NEMOTRON_H_BLOCKS = {kind: symbol for symbol, kind in NEMOTRON_H_SYMBOLS.items()}


def nemotron_h_pattern(f: Fields) -> tuple[str, Fields]:
    """(one symbol per layer, the fields with the layer count): `hybrid_override_pattern`, or the
    per-layer `layers_block_type` list of transformers 5's NemotronHConfig (mamba, attention, mlp,
    moe), whose configs may leave num_hidden_layers out (it is the list's length)."""
    blocks = f.get("layers_block_type")
    if f.has("hybrid_override_pattern") or blocks is None:
        return f.get("hybrid_override_pattern"), f
    if not isinstance(blocks, list) or not blocks or any(b not in NEMOTRON_H_BLOCKS for b in blocks):
        raise f.error("layers_block_type", f"{blocks!r} is not a list of {', '.join(NEMOTRON_H_BLOCKS)}")
    if not f.has("num_hidden_layers"):
        f = Fields({**f.fields, "num_hidden_layers": len(blocks)}, f.where, f.prefix)
    return "".join(NEMOTRON_H_BLOCKS[b] for b in blocks), f


def nemotron_h(f: Fields) -> dict:
    """Nemotron-H / Nemotron Nano 2 / Nemotron 3: `hybrid_override_pattern` (or `layers_block_type`)
    gives one symbol per layer, M Mamba-2, * attention, - a squared-ReLU MLP, E a MoE of squared-ReLU
    experts; every layer is one of them (its own norm and residual). Nemotron 3 Super's and Ultra's
    experts are LatentMoE (`moe_latent_size`: dse column moe_latent_dim)."""
    if f.has("block_configs"):
        raise f.error("block_configs", "per-layer block configs (Nemotron-H Puzzle) are not representable")
    pattern, f = nemotron_h_pattern(f)
    if not isinstance(pattern, str) or not pattern:
        raise f.error("hybrid_override_pattern", f"{pattern!r} is not a pattern of M, *, - and E")
    unknown = sorted(set(pattern) - set(NEMOTRON_H_SYMBOLS))
    if unknown:
        raise f.error("hybrid_override_pattern", f"symbols {unknown} are not representable (known: M, *, -, E)")
    cols = base(f, tied=False, gated=False)
    if len(pattern) != cols["layers"]:
        raise f.error("hybrid_override_pattern", f"has {len(pattern)} layers, num_hidden_layers is {cols['layers']:g}")
    n = Counter(NEMOTRON_H_SYMBOLS[s] for s in pattern)
    layers = len(pattern)
    cols["head_dim"] = f.num("attention_head_dim", cols["head_dim"], integer=False)
    cols.update(attention_layer_fraction=n["attention"] / layers, mamba_layer_fraction=n["mamba"] / layers,
                mlp_layer_fraction=(n["mlp"] + n["moe"]) / layers, dense_layers=float(n["mlp"]),
                mamba_heads=f.num("mamba_num_heads"), mamba_head_dim=f.num("mamba_head_dim"),
                mamba_state_dim=f.num("ssm_state_size"), mamba_groups=f.num("n_groups"),
                mamba_conv_kernel=f.num("conv_kernel", 4), mamba_chunk=f.num("chunk_size", 128))
    if n["moe"]:
        width = shared_experts(f, "n_shared_experts", "moe_shared_expert_intermediate_size", "moe_intermediate_size")
        moe(f, cols, n["moe"], experts="n_routed_experts", top_k="num_experts_per_tok",
            expert_size="moe_intermediate_size", shared=width)
        cols["moe_latent_dim"] = f.num("moe_latent_size", 0.0, minimum=0)   # LatentMoE (Nemotron 3 Super)
    return cols


def qwen3_next(f: Fields) -> dict:
    """Qwen3-Next: Gated DeltaNet layers and gated full attention (one every
    `full_attention_interval`, or as `layer_types` says); MoE with a shared expert on every
    `decoder_sparse_step`-th layer not in `mlp_only_layers`."""
    return qwen_style_moe(f, hybrid_delta_net(f))


def hybrid_delta_net(f: Fields) -> dict:
    """The sequence mixers Qwen3-Next and Qwen3.5 share: Gated DeltaNet layers and output-gated full
    attention, one every `full_attention_interval` (default 4) or as `layer_types` says."""
    cols = qwen(Fields({k: v for k, v in f.fields.items() if k != "layer_types"}, f.where, f.prefix))
    layers = int(cols["layers"])
    if f.has("layer_types"):
        counts = count_types(f, "layer_types", layers, {"full_attention": "full", "linear_attention": "linear"})
    else:
        interval = int(f.num("full_attention_interval", 4))
        counts = Counter(full=sum(1 for i in range(layers) if (i + 1) % interval == 0))
        counts["linear"] = layers - counts["full"]
    cols.update(attention_layer_fraction=counts["full"] / layers, linear_attention_layer_fraction=counts["linear"] / layers,
                attention_output_gate=f.flag("attn_output_gate", True), sliding_window_fraction=0.0, sliding_window=0.0,
                linear_key_heads=f.num("linear_num_key_heads"), linear_value_heads=f.num("linear_num_value_heads"),
                linear_key_head_dim=f.num("linear_key_head_dim"), linear_value_head_dim=f.num("linear_value_head_dim"),
                linear_conv_kernel=f.num("linear_conv_kernel_dim", 4))
    return cols


def text_model(f: Fields) -> Fields:
    """A vision-language config's `text_config` (the decoder dse models; the vision encoder is not),
    with the wrapper's `tie_word_embeddings` where the text config leaves it out."""
    if not f.has("text_config"):
        return f
    text = f.sub("text_config")
    if not text.has("tie_word_embeddings") and f.has("tie_word_embeddings"):
        text = Fields({**text.fields, "tie_word_embeddings": f.get("tie_word_embeddings")}, text.where, text.prefix)
    return text


def qwen3_5(f: Fields) -> dict:
    """Qwen3.5 (its text model): Qwen3-Next's hybrid of Gated DeltaNet and gated full attention, with
    a dense SwiGLU MLP (`qwen3_5`) or Qwen3-Next's MoE with a shared expert (`qwen3_5_moe`). Its
    multi-token-prediction layers (`mtp_num_hidden_layers`) are not part of the model counted here."""
    text = text_model(f)
    return qwen3_next(text) if text.has("num_experts") else hybrid_delta_net(text)


def qwen3_vl(f: Fields) -> dict:
    """Qwen3-VL (its text model): a Qwen3 decoder, dense (`qwen3_vl`) or MoE (`qwen3_vl_moe`)."""
    text = text_model(f)
    return qwen_moe(text) if text.has("num_experts") else qwen(text)


FAMILIES = {
    "llama": llama, "mistral": llama, "qwen2": qwen, "qwen3": qwen, "mixtral": mixtral,
    "qwen2_moe": qwen_moe, "qwen3_moe": qwen_moe, "deepseek_v2": deepseek, "deepseek_v3": deepseek,
    "kimi_k2": deepseek, "gpt_oss": gpt_oss, "llama4": llama4, "llama4_text": llama4, "gemma3": gemma3,
    "gemma3_text": gemma3, "nemotron_h": nemotron_h, "qwen3_next": qwen3_next, "kimi_k25": kimi_k25,
    "minimax_m2": minimax_m2, "qwen3_5": qwen3_5, "qwen3_5_moe": qwen3_5, "qwen3_5_text": qwen3_5,
    "qwen3_5_moe_text": qwen3_5, "deepseek_v32": deepseek_sparse, "glm_moe_dsa": deepseek_sparse, "deepseek_v4": deepseek_v4,
    "qwen3_vl": qwen3_vl, "qwen3_vl_moe": qwen3_vl, "qwen3_vl_text": qwen3_vl, "qwen3_vl_moe_text": qwen3_vl,
}
ARCHITECTURES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "MixtralForCausalLM": "mixtral", "Qwen2MoeForCausalLM": "qwen2_moe",
    "Qwen3MoeForCausalLM": "qwen3_moe", "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3", "GptOssForCausalLM": "gpt_oss",
    "Llama4ForConditionalGeneration": "llama4", "Llama4ForCausalLM": "llama4_text",
    "Gemma3ForConditionalGeneration": "gemma3", "Gemma3ForCausalLM": "gemma3_text",
    "NemotronHForCausalLM": "nemotron_h", "Qwen3NextForCausalLM": "qwen3_next",
    "KimiK25ForConditionalGeneration": "kimi_k25", "MiniMaxM2ForCausalLM": "minimax_m2",
    "Qwen3_5ForConditionalGeneration": "qwen3_5", "Qwen3_5MoeForConditionalGeneration": "qwen3_5_moe",
    "DeepseekV32ForCausalLM": "deepseek_v32", "GlmMoeDsaForCausalLM": "glm_moe_dsa", "DeepseekV4ForCausalLM": "deepseek_v4",
    "Qwen3VLForConditionalGeneration": "qwen3_vl", "Qwen3VLMoeForConditionalGeneration": "qwen3_vl_moe",
}
