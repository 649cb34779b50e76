"""dse.workload: parameter counts of catalog models against their published totals, and forward
FLOPs per token against 2 x parameters + the attention term (Narayanan et al. 2021, Kaplan et al. 2020)."""
from __future__ import annotations

import numpy as np
import pytest

from dse import catalog, resolve
from dse.workload import Model


def named(name: str) -> Model:
    cols = {"model": np.array([name], dtype=object)}
    resolve.model(cols)
    return Model({k: np.asarray(cols[k][:], dtype=float) for k in cols if k != "model"})


def model(**kw) -> Model:
    cols = {k: np.array([float(v)]) for k, v in kw.items()}
    resolve.model(cols)
    return Model({k: np.asarray(v, dtype=float) for k, v in cols.items()})


PUBLISHED_TOTAL = {  # name: (parameters, source)
    "gpt3-175b": (175e9, "Brown et al. 2020 Table 2.1"),
    "llama3.1-8b": (8.0e9, "Meta Llama 3.1 model card"),
    "llama3.1-70b": (70.6e9, "Meta Llama 3.1 model card"),
    "llama3.1-405b": (405.9e9, "Meta Llama 3.1 model card"),
    "mixtral-8x7b": (46.7e9, "Mistral AI, Mixtral of experts announcement (Dec 2023)"),
    "mixtral-8x22b": (141e9, "Mistral AI, 'Cheaper, Better, Faster, Stronger' (Apr 2024): 141B parameters, 39B active"),
    "qwen3-235b-a22b": (235e9, "Qwen3-235B-A22B model card: 235B total, 22B activated"),
    "qwen3-30b-a3b": (30.5e9, "Qwen3-30B-A3B model card: 30.5B total, 3.3B activated"),
}
PUBLISHED_ACTIVE = {
    "mixtral-8x7b": (12.9e9, "Mistral AI announcement: 12.9B parameters used per token"),
    "mixtral-8x22b": (39e9, "Mistral AI Mixtral 8x22B announcement: 39B active parameters"),
    "qwen3-235b-a22b": (22e9, "Qwen3-235B-A22B model card"),
    "qwen3-30b-a3b": (3.3e9, "Qwen3-30B-A3B model card"),
}


def test_published_models_are_in_the_catalog():
    names = set(catalog.models().index)
    assert set(PUBLISHED_TOTAL) <= names


@pytest.mark.parametrize("name", list(PUBLISHED_TOTAL))
def test_total_parameters_within_1pct_of_published(name):
    want, source = PUBLISHED_TOTAL[name]
    assert float(named(name).total_params[0]) == pytest.approx(want, rel=0.01), source


@pytest.mark.parametrize("name", list(PUBLISHED_ACTIVE))
def test_active_parameters_within_1pct_of_published(name):
    want, source = PUBLISHED_ACTIVE[name]
    # Qwen3's "22B"/"3.3B" are rounded to 2 digits: allow the rounding
    rel = 0.01 if name == "mixtral-8x7b" else 0.025
    assert float(named(name).active_params[0]) == pytest.approx(want, rel=rel), source


@pytest.mark.parametrize("name", ["gpt3-175b", "llama3.1-70b", "llama2-7b"])
def test_dense_models_have_active_equal_total(name):
    m = named(name)
    assert float(m.active_params[0]) == float(m.total_params[0])


def test_dense_parameter_count_by_hand():
    # MHA, 4h GeLU MLP, untied, no learned positions: the layers hold 12 L h^2 (Kaplan et al. 2020,
    # N ~ 12 L d^2, up to norms and biases), embedding and output layer V h each
    h, L, V = 4096, 32, 50000
    m = model(layers=L, hidden=h, heads=32, vocab=V)
    body = float(m.total_params[0]) - 2 * V * h
    assert body == pytest.approx(12 * L * h**2, rel=1e-3)
    tied = model(layers=L, hidden=h, heads=32, vocab=V, tied_embeddings=1)
    assert float(m.total_params[0] - tied.total_params[0]) == V * h


def test_gqa_and_gated_mlp_parameter_count_by_hand():
    # Llama 3.1 8B: attention h(q + 2 kv) + q h, SwiGLU 3 h f, embedding and output V h each
    h, L, a, kv, d, f, V = 4096, 32, 32, 8, 128, 14336, 128256
    m = named("llama3.1-8b")
    weights = L * (h * (a * d + 2 * kv * d) + a * d * h + 3 * h * f) + 2 * V * h
    norms = float(m.total_params[0]) - weights
    assert 0 <= norms <= L * 2 * h + h  # two norms per layer (+ a final one)


def test_moe_parameter_count_by_hand():
    m = named("mixtral-8x7b")
    L, h, f, E, k = 32, 4096, 14336, 8, 2
    experts = L * E * 3 * h * f
    active_experts = L * k * 3 * h * f
    assert float(m.total_params[0] - m.active_params[0]) == pytest.approx(experts - active_experts, rel=1e-12)


# ---- FLOPs per token ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["llama3.1-8b", "llama3.1-70b", "llama3.1-405b", "mixtral-8x7b"])
@pytest.mark.parametrize("context", [0.0, 2048.0, 8192.0])
def test_forward_flops_per_token_is_2_params_plus_attention(name, context):
    """2 FLOPs per weight that multiplies (all but the input embedding lookup; MoE: the active ones)
    plus scores and attention x V over the context, 4 L (a d) ctx (no causal halving)."""
    m = named(name)
    matmul_params = float(m.active_params[0]) - float(m.vocab[0] * m.hidden[0])  # untied: output layer stays
    attention = 4 * float(m.layers[0] * m.heads[0] * m.head_dim[0]) * context
    assert float(m.forward_flops_per_token(np.array([context]))[0]) == pytest.approx(
        2 * matmul_params + attention, rel=1e-12)


def test_gpt3_forward_flops_match_narayanan():
    """Narayanan et al. 2021 eq. (per iteration, full recompute, 4 passes) 96 B s L h^2 (1 + s/6h + V/16Lh):
    one forward pass is a quarter of it, 24 B s L h^2 (1 + s/6h + V/16Lh); per token, divide by B s."""
    m = named("gpt3-175b")
    L, h, V, s = 96, 12288, 51200, 2048
    narayanan = 24 * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
    # the only difference: dse counts biases and norms (4h per layer), which Narayanan neglects
    assert float(m.forward_flops_per_token(np.array([float(s)]))[0]) == pytest.approx(narayanan, rel=1e-3)


def test_moe_forward_flops_use_active_not_total_parameters():
    m = named("mixtral-8x7b")
    f0 = float(m.forward_flops_per_token(np.array([0.0]))[0])
    assert f0 < 2 * float(m.total_params[0]) / 3
    assert f0 == pytest.approx(2 * float(m.active_params[0] - m.embedding_params[0]), rel=1e-12)
