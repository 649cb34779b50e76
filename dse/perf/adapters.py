"""Parameter-efficient fine-tuning with LoRA (Hu et al. 2021, arXiv 2106.09685) as frameworks run it:
the base weights stay frozen and rank-r adapters, A (in x r) and B (r x out), train beside the
attention and dense MLP linear layers (NeMo's llm.peft.LoRA: linear_qkv, linear_proj, linear_fc1,
linear_fc2, dim 32). Against full training:

  - backward: a frozen linear layer computes the gradient of its input (to reach the layers below),
    not of its weight: one GEMM where full training runs two; the output layer likewise; attention,
    the element-wise kernels and the routed experts' data gradients as before;
  - model state: the frozen weights (16-bit); gradients and optimizer states of the adapters only;
  - data parallelism reduces the adapters' gradients only; ZeRO-3 still gathers the frozen weights;
  - the adapters' own GEMMs, 2 r (in + out) FLOPs per token and linear, are under 2% of the
    layer's at r = 32 and hidden >= 4096 and are not timed.
The routed experts of an MoE layer keep no adapters."""
from __future__ import annotations

import numpy as np

from dse import schema
from dse.perf import layer as L

LORA = schema.enum_code("adapter", "lora")


def frozen(w) -> np.ndarray:
    """Rows whose base weights do not train (LoRA)."""
    return w["adapter"] == LORA


def weight_grad_share(w):
    """1 where the linear layers compute their weight gradients, 0 where the weights are frozen."""
    lora = frozen(w)
    return np.where(lora, 0.0, 1.0) if np.any(lora) else 1.0


def adapter_params_per_gpu(m, rank, tp, pp):
    """LoRA parameters of one GPU's most loaded stage: r (in + out) per adapted linear layer (QKV,
    attention output, and the dense MLP's up and down projections), the adapter split over TP with
    its layer."""
    dense, _ = L.layer_shares(m)
    up = m.mlp_mats - 1.0                      # fc1 outputs ffn (GeLU) or 2 ffn (gated)
    attention = (m.hidden + m.q_dim + m.kv_dim + m.v_dim) + (m.o_dim + m.hidden)
    mlp = (m.hidden + up * m.ffn) + (m.ffn + m.hidden)
    per_layer = rank * (m.attention_fraction * attention + dense * mlp)
    return m.layers / pp * per_layer / tp
