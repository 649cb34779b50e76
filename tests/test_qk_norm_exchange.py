"""A QK-norm over all heads (MiniMax-M2's `qk_norm_type` per_layer) needs a tensor-parallel all-reduce
of each token's sums of squares on every attention layer (dse.perf.layer.qk_norm_exchange_s); a
per-head norm (Qwen3) needs none."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import dse
from dse import catalog
from dse.catalog import hfconfig

CONFIGS = Path(__file__).parent / "configs"


def _minimax(**changes) -> dict:
    fields = json.loads((CONFIGS / "minimax-m2.5" / "config.json").read_text())
    return hfconfig.map_config(fields | changes)


def test_config_maps_the_norm_kind():
    assert _minimax()["qk_norm_across_heads"] == 1.0
    assert _minimax(qk_norm_type="per_head")["qk_norm_across_heads"] == 0.0
    assert _minimax(use_qk_norm=False)["qk_norm_across_heads"] == 0.0
    models = catalog.models()
    assert models.loc["minimax-m2.5", "qk_norm_across_heads"] == 1
    assert models.loc["qwen3-32b", "qk_norm_across_heads"] == 0   # Qwen3 norms each head alone


def _tpot(tp, across, framework="vllm"):
    row = dict(model="minimax-m2.5", system="b200", gpus=tp, tp=tp, isl=1024, osl=1024, concurrency=16,
               precision="fp8-block", framework=framework, qk_norm_across_heads=across)
    return float(dse.evaluate_serving(pd.DataFrame([row]))["tpot_s"].iloc[0])


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_the_exchange_costs_about_an_all_reduce_per_layer_under_tensor_parallelism(tp):
    extra = _tpot(tp, 1) - _tpot(tp, 0)
    # one small all-reduce per layer and decode step: more than a microsecond, less than 30 us (62 layers)
    assert 62 * 1e-6 < extra < 62 * 30e-6, extra


def test_no_exchange_on_one_gpu():
    assert _tpot(1, 1) == _tpot(1, 0)


def test_training_pays_it_forward_and_backward():
    def tp_comm(across):
        row = dict(model="minimax-m2.5", system="b200", gpus=8, tp=8, ep=8, seq_len=4096, micro_batch=1,
                   global_batch=8, qk_norm_across_heads=across)
        return float(dse.evaluate_training(pd.DataFrame([row]))["tp_comm_s"].iloc[0])
    assert tp_comm(1) > tp_comm(0)
