"""Parameter-efficient fine-tuning with LoRA (Hu et al. 2021, arXiv 2106.09685) as frameworks run it:
the base weights stay frozen and rank-r adapters, A (in x r) and B (r x out), train beside the
attention and dense MLP linear layers (NeMo's llm.peft.LoRA: linear_qkv, linear_proj, linear_fc1,
linear_fc2, dim 32; `adapter_modules` qkv: the QKV projection alone, NeMo 1.x's default). Against
full training:

  - backward: a frozen linear layer computes the gradient of its input (to reach the layers below),
    not of its weight: one GEMM where full training runs two; the output layer likewise; attention,
    the element-wise kernels and the routed experts' data gradients as before;
  - model state: the frozen weights (16-bit); gradients and optimizer states of the adapters only;
  - data parallelism reduces the adapters' gradients only; ZeRO-3 still gathers the frozen weights;
  - the adapters' own GEMMs, 2 r (in + out) FLOPs per token and linear, are under 2% of the
    layer's at r = 32 and hidden >= 4096 and are not timed as FLOPs; their memory traffic is: each
    adapter reads its layer's input and adds its output to the frozen layer's, forward, and reads
    the input and the output gradient twice and adds its input gradient to the frozen layer's,
    backward (lora_*_bytes in dse/catalog/constants.csv): a memory-bound pass over every adapted
    layer's input and output, about as large as the frozen GEMMs' time on an H100 at hidden 4096;
The routed experts of an MoE layer keep no adapters."""
from __future__ import annotations

import numpy as np

from dse import catalog, schema
from dse.perf import layer as L
from dse.perf.layer import Op

K = catalog.constants()

LORA = schema.enum_code("adapter", "lora")
# adapter_modules codes that adapt QKV, the attention output, and the MLP's two projections
ADAPTS_QKV = [schema.enum_code("adapter_modules", v) for v in ("all", "qkv", "attention")]
ADAPTS_PROJ = [schema.enum_code("adapter_modules", v) for v in ("all", "attention")]
ADAPTS_MLP = [schema.enum_code("adapter_modules", v) for v in ("all", "mlp")]


def frozen(w) -> np.ndarray:
    """Rows whose base weights do not train (LoRA)."""
    return w["adapter"] == LORA


def weight_grad_share(w):
    """1 where the linear layers compute their weight gradients, 0 where the weights are frozen."""
    lora = frozen(w)
    return np.where(lora, 0.0, 1.0) if np.any(lora) else 1.0


def adapted_widths(m, modules):
    """(inputs, outputs): the summed input and output widths of one layer's adapted linear layers,
    averaged over the layers, for `modules` (adapter_modules): QKV and the attention output on the
    attention layers, the dense MLP's up (ffn, or 2 ffn gated) and down projections on the dense
    MLP layers, or a subset of them."""
    dense, _ = L.layer_shares(m)
    up = m.mlp_mats - 1.0
    qkv = np.isin(modules, ADAPTS_QKV)
    proj, mlp = np.isin(modules, ADAPTS_PROJ), np.isin(modules, ADAPTS_MLP)
    inputs = (m.attention_fraction * (qkv * m.hidden + proj * m.o_dim)
              + mlp * dense * (m.hidden + m.ffn))
    outputs = (m.attention_fraction * (qkv * (m.q_dim + m.kv_dim + m.v_dim) + proj * m.hidden)
               + mlp * dense * (up * m.ffn + m.hidden))
    return inputs, outputs


def adapter_params_per_gpu(m, rank, tp, pp, modules):
    """LoRA parameters of one GPU's most loaded stage: r (in + out) per adapted linear layer
    (adapted_widths), the adapter split over TP with its layer."""
    inputs, outputs = adapted_widths(m, modules)
    return m.layers / pp * rank * (inputs + outputs) / tp


def adapter_op(m, s, w) -> Op:
    """The adapters' memory traffic in one layer (LoRA rows; weight 0 otherwise) as one stream op:
    per token, lora_fwd_in_bytes per adapted input element and lora_fwd_out_bytes per output
    element forward, the lora_bwd_* bytes backward; each layer's widths split over its TP ranks."""
    inputs, outputs = adapted_widths(m, w["adapter_modules"])
    forward = K["lora_fwd_in_bytes"] * inputs + K["lora_fwd_out_bytes"] * outputs
    backward = K["lora_bwd_in_bytes"] * inputs + K["lora_bwd_out_bytes"] * outputs
    return Op("lora_adapters", "elementwise", "stream", s.tokens, inputs / s.tp, 1.0,
              bytes=s.tokens * forward / s.tp, weight=frozen(w).astype(np.float32),
              backward=np.where(forward > 0, backward / np.maximum(forward, 1.0), 0.0).astype(np.float32))
