"""The engine limits TensorRT-LLM's benchmark picks for itself: where a `trtllm-bench throughput`
command states no max batch size or token budget, its heuristic sets them from the model, the
mapping and the dataset's prompt and output lengths (tensorrt_llm/bench/tuning/heuristics.py,
calc_engine_setting and finetune_setting, TensorRT-LLM @0b42ceaf; the same rule since v0.12's
bench/build/tuning.py). NVIDIA's published TensorRT-LLM throughput tables are such runs. A serving
row asks for them with max_num_seqs or max_num_tokens 0 (the `trtllm-bench` preset's values).

    KV requests  R = 0.95 x (GPU memory of the engine - checkpoint) / (KV bytes per token x (isl + osl))
    batch        min(R, 4096) / pp, rounded up: to 32 (at least 64) below 256, 128 below 1,024, else 256
    tokens       min(batch x (1 + isl / osl), 32768), rounded up: to 256 (at least 2,048) below 4,096,
                 512 below 8,192, else 1,024

The KV bytes per token count every attention layer at the whole sequence (no window) with at least
one KV head per TP rank, or MLA's one latent; an attention-data-parallel engine gives each rank its
share of the checkpoint and one GPU's memory per stage. Hybrid models (Mamba, Gated DeltaNet) add
their recurrent state per request, square the memory fraction and round the batch down to even."""
from __future__ import annotations

import numpy as np

from dse.perf import memory as M

GIB = 2.0 ** 30
KV_FRACTION = 0.95        # calc_engine_setting's kv_cache_gpu_mem_fraction default
MAX_BATCH = 4096          # "cap total batch size to avoid decoder buffer size becoming too large"
MAX_TOKENS = 32768        # "cap num tokens to avoid TRT activation buffer becoming too large"


def _up(x, step):
    return step * np.ceil(x / step)


def finetune(requests, isl, osl, pp, hybrid):
    """(max batch size, max num tokens) of finetune_setting from the KV-cache request count."""
    raw_bs = np.minimum(requests, MAX_BATCH) / pp
    raw_tokens = np.minimum(raw_bs * (1.0 + isl / osl), MAX_TOKENS)
    optimistic = np.where(raw_bs < 256, np.maximum(64.0, _up(raw_bs, 32)),
                          np.where(raw_bs < 1024, _up(raw_bs, 128), _up(raw_bs, 256)))
    batch = np.where(hybrid, 2.0 * np.floor(raw_bs / 2.0), optimistic)
    tokens = np.where(raw_tokens < 4096, np.maximum(2048.0, _up(raw_tokens, 256)),
                      np.where(raw_tokens < 8192, _up(raw_tokens, 512), _up(raw_tokens, 1024)))
    return batch, tokens


def bench_limits(p, w, m, tp, pp):
    """(max_num_seqs, max_num_tokens) trtllm-bench sets for one replica of the Pass `p` (a replica of
    an attention-data-parallel engine is one of its p.a2a ranks)."""
    isl, osl = w["isl"], w["osl"]
    dense, experts = M.parameters_per_gpu(m, 1.0, 1.0, 1.0, etp=1.0)
    checkpoint = (dense * p.operand + experts * p.expert_operand) / p.a2a
    memory = w["memory_capacity_bytes"] / GIB * tp * pp          # the heuristic's GiB
    per_layer = M.kv_cache_bytes_per_token(m, tp, p.kv_bytes) * np.where(m.is_mla, 1.0, tp)
    kv_token = per_layer * m.layers * m.attention_fraction / GIB
    hybrid = (m.mamba_fraction > 0) | (m.linear_fraction > 0)
    state = M.cache_bytes_per_sequence(m, 1.0, p.kv_bytes, 0.0) * m.layers / GIB   # recurrent state only
    fraction = np.where(hybrid, KV_FRACTION ** 2, KV_FRACTION)
    requests = fraction * (memory - checkpoint / GIB) / (kv_token * (isl + osl) + state)
    return finetune(np.maximum(requests, 1.0), isl, osl, pp, hybrid)


def engine_limits(p, w, m, tp, pp):
    """(max_num_seqs, max_num_tokens) of the rows: as stated, or trtllm-bench's where they are 0."""
    seqs, tokens = w["max_num_seqs"], w["max_num_tokens"]
    if not (np.any(seqs == 0) or np.any(tokens == 0)):
        return seqs, tokens
    bench_seqs, bench_tokens = bench_limits(p, w, m, tp, pp)
    return np.where(seqs == 0, bench_seqs, seqs), np.where(tokens == 0, bench_tokens, tokens)
