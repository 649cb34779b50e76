"""Inference model: boundedness per GEMM, monotonicity properties, KV cache, feasibility, CLI."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse import catalog
from dse.errors import ConfigError
from dse.evaluate import evaluate_inference
from dse.optable import roofline_table
from dse.perf.inference import OUTPUT_COLUMNS

SYSTEMS = list(catalog.systems().index)
MODELS = ["llama2-7b", "llama2-13b", "llama3.1-8b", "llama2-70b", "mixtral-8x7b"]
PROPERTY = settings(max_examples=40, deadline=None, derandomize=True)


def one(**kw):
    """Evaluate one design point; returns a dict of scalars."""
    out = evaluate_inference(pd.DataFrame([kw]))
    return out.iloc[0].to_dict()


# ---- boundedness --------------------------------------------------------------------------
def test_roofline_table_decode_batch1_memory_prefill_long_compute_on_every_gpu():
    table = roofline_table("llama2-7b", SYSTEMS, batch=1, isl=8192, osl=128)
    assert set(table["system"]) == set(SYSTEMS)
    for col in ("flops", "bytes", "arithmetic_intensity", "ridge_flops_per_byte", "bound", "time_s"):
        assert col in table.columns
    decode = table[table["phase"] == "decode"]
    assert (decode["bound"] == "memory").all(), decode[decode["bound"] != "memory"]
    # every GEMM over the prompt's tokens (the LM head sees only the last token of each sequence)
    prefill = table[(table["phase"] == "prefill") & (table["op"] != "lm_head")]
    assert (prefill["bound"] == "compute").all(), prefill[prefill["bound"] != "compute"]
    assert (prefill["arithmetic_intensity"] > prefill["ridge_flops_per_byte"]).all()
    assert (decode["arithmetic_intensity"] < decode["ridge_flops_per_byte"]).all()


def test_evaluate_inference_bounds_on_every_gpu():
    n = len(SYSTEMS)
    out = evaluate_inference({"model": np.full(n, "llama2-7b", dtype=object), "system": np.asarray(SYSTEMS, dtype=object),
                              "tp": 1, "gpus": 1, "batch": 1, "isl": 8192, "osl": 128})
    assert list(out["prefill_bound"]) == ["compute"] * n
    assert list(out["decode_bound"]) == ["memory"] * n


# ---- outputs and contract -----------------------------------------------------------------
def test_dataframe_in_dataframe_out_same_rows():
    frame = pd.DataFrame({"model": ["llama2-7b", "llama2-70b", "llama3.1-8b"], "system": ["a100-80gb", "h100-sxm", "b200"],
                          "tp": [1, 4, 2], "gpus": [1, 4, 2], "batch": [8, 16, 32], "isl": [512, 1024, 2048],
                          "osl": [128, 256, 64], "precision": ["bf16", "fp8", "fp8"], "kv_precision": ["bf16", "fp8", "bf16"]},
                         index=[10, 20, 30])
    out = evaluate_inference(frame)
    assert list(out.index) == [10, 20, 30]
    for col in OUTPUT_COLUMNS:
        assert col in out.columns
    assert out["fits"].all()
    np.testing.assert_allclose(out["e2e_latency_s"], out["ttft_s"] + (frame["osl"] - 1) * out["tpot_s"])
    np.testing.assert_allclose(out["ttft_s"], out[["prefill_compute_s", "prefill_memory_s", "prefill_comm_s",
                                                   "prefill_overhead_s"]].sum(axis=1))
    np.testing.assert_allclose(out["tpot_s"], out[["decode_compute_s", "decode_memory_s", "decode_comm_s",
                                                   "decode_overhead_s"]].sum(axis=1))
    assert set(out["decode_bound"]) <= {"compute", "memory", "network"}


def test_dict_in_dict_out_and_public_api():
    out = dse.evaluate_inference({"model": "llama2-7b", "system": "h100-sxm", "batch": np.array([1, 2, 4])})
    assert isinstance(out, dict) and len(out["tpot_s"]) == 3
    assert np.all(np.diff(out["output_tokens_per_s"]) > 0)


def test_explicit_hardware_columns_without_system():
    out = one(model="llama2-7b", peak_bf16_flops_per_s=1e15, memory_bandwidth_bytes_per_s=3e12,
              memory_capacity_bytes=80e9, batch=1, isl=128, osl=128)
    assert out["fits"] and out["tpot_s"] > 0


def test_unknown_model_is_config_error():
    with pytest.raises(ConfigError):
        evaluate_inference({"model": "no-such-model-9b", "system": "h100-sxm"})
    with pytest.raises(ConfigError):
        roofline_table("no-such-model-9b", ["h100-sxm"])


# ---- feasibility ------------------------------------------------------------------------------
def test_oversized_batch_is_a_row_not_an_exception():
    out = evaluate_inference(pd.DataFrame({"model": "llama2-70b", "system": "a100-80gb", "tp": [8, 8], "gpus": [8, 8],
                                           "batch": [1, 4096], "isl": 4096, "osl": 4096}))
    assert bool(out["fits"].iloc[0])
    assert not bool(out["fits"].iloc[1])
    assert "out of memory" in out["infeasible_reason"].iloc[1]
    assert np.isfinite(out["tpot_s"]).all()


def test_weights_alone_over_capacity():
    out = one(model="llama2-70b", system="a100-80gb", tp=1, gpus=1, batch=1, isl=128, osl=128)
    assert not out["fits"] and "out of memory" in out["infeasible_reason"]


@pytest.mark.parametrize("kw, text", [
    (dict(tp=3, gpus=3), "tp_heads"),
    (dict(tp=2, dp=1, gpus=8), "split"),
    (dict(pp=40, gpus=40), "pp_layers"),
    (dict(ep=2, dp=2, gpus=2), "ep_dense"),
    (dict(batch=0), "domain"),
])
def test_infeasible_splits_have_reasons(kw, text):
    out = one(model="llama2-7b", system="h100-sxm", **{"batch": 4, "isl": 256, "osl": 64, **kw})
    assert not out["fits"]
    from dse.schema import REASON_CODE, REASON_TEXT
    assert out["infeasible_code"] == REASON_CODE[text]
    expected = schema_text = REASON_TEXT[REASON_CODE[text]] if text != "domain" else "batch: outside its domain"
    assert str(out["infeasible_reason"]).startswith(expected), schema_text


def test_moe_expert_parallel_and_active_experts():
    base = dict(model="mixtral-8x7b", system="h100-sxm", tp=2, dp=2, ep=2, gpus=4, isl=512, osl=128)
    small, large = one(batch=2, **base), one(batch=256, **base)
    assert small["fits"] and large["fits"]
    assert small["decode_comm_s"] > 0
    # batch 1 touches top_k of the experts: its decode step reads less than a dense 47B would
    dense_equiv = one(model="mixtral-8x7b", system="h100-sxm", tp=2, dp=2, ep=2, gpus=4, batch=2, isl=512, osl=128,
                      top_k=8)
    assert small["decode_memory_s"] < dense_equiv["decode_memory_s"]


# ---- properties -------------------------------------------------------------------------------
points = st.fixed_dictionaries({
    "model": st.sampled_from(MODELS),
    "system": st.sampled_from(["a100-80gb", "h100-sxm", "h200", "b200", "mi300x"]),
    "tp": st.sampled_from([1, 2, 4, 8]),
    "pp": st.sampled_from([1, 2]),
    "batch": st.integers(1, 512),
    "isl": st.integers(1, 8192),
    "osl": st.integers(1, 4096),
    "precision": st.sampled_from(["bf16", "fp8"]),
    "kv_precision": st.sampled_from(["bf16", "fp8"]),
})


@PROPERTY
@given(points, st.floats(1.0, 8.0))
def test_more_memory_bandwidth_never_raises_tpot(p, factor):
    bw = catalog.system(p["system"])["memory_bandwidth_bytes_per_s"]
    frame = pd.DataFrame([p, p])
    frame["gpus"] = frame["tp"] * frame["pp"]
    frame["memory_bandwidth_bytes_per_s"] = [bw, bw * factor]
    out = evaluate_inference(frame)
    assert out["tpot_s"].iloc[1] <= out["tpot_s"].iloc[0] * (1 + 1e-12)
    assert out["ttft_s"].iloc[1] <= out["ttft_s"].iloc[0] * (1 + 1e-12)


@PROPERTY
@given(points, st.integers(2, 8))
def test_a_multiple_of_the_batch_never_lowers_throughput_while_it_fits(p, factor):
    """k times the batch is never slower per token. (One more sequence can be: when the tokens cross
    a GEMM tile boundary a new wave of tiles starts, the fitted wave quantization of real kernels.)"""
    frame = pd.DataFrame([p, {**p, "batch": p["batch"] * factor}])
    frame["gpus"] = frame["tp"] * frame["pp"]
    out = evaluate_inference(frame)
    if out["fits"].all():
        assert out["output_tokens_per_s"].iloc[1] >= out["output_tokens_per_s"].iloc[0] * (1 - 1e-9)


@PROPERTY
@given(points, st.integers(2, 8))
def test_kv_cache_grows_linearly_in_context_and_batch(p, k):
    rows = [p, {**p, "batch": p["batch"] * k}, {**p, "isl": p["isl"] * k, "osl": p["osl"] * k}]
    frame = pd.DataFrame(rows)
    frame["gpus"] = frame["tp"] * frame["pp"]
    kv = evaluate_inference(frame)["kv_cache_bytes"].to_numpy()
    np.testing.assert_allclose(kv[1], k * kv[0], rtol=1e-12)
    np.testing.assert_allclose(kv[2], k * kv[0], rtol=1e-12)


def test_kv_cache_is_gqa_aware_and_fp8_halves_it():
    mha = one(model="llama2-7b", system="h100-sxm", batch=4, isl=1000, osl=24)
    gqa = one(model="llama3.1-8b", system="h100-sxm", batch=4, isl=1000, osl=24)
    fp8 = one(model="llama2-7b", system="h100-sxm", batch=4, isl=1000, osl=24, kv_precision="fp8")
    # 2 (K,V) x heads x head_dim x layers x bytes x tokens
    assert mha["kv_cache_bytes"] == pytest.approx(2 * 32 * 128 * 32 * 2 * 4 * 1024)
    assert gqa["kv_cache_bytes"] == pytest.approx(mha["kv_cache_bytes"] / 4)
    assert fp8["kv_cache_bytes"] == pytest.approx(mha["kv_cache_bytes"] / 2)


# ---- CLI and validation ------------------------------------------------------------------------
def test_roofline_cli_writes_png(tmp_path, capsys):
    from dse.cli import main
    code = main(["roofline", "llama2-7b", "--systems", "a100-80gb,h100-sxm,b200", "--batch", "4", "--isl", "1024",
                 "--osl", "128", "--out", str(tmp_path)])
    assert code == 0
    pngs = list(tmp_path.glob("*.png"))
    assert len(pngs) == 1 and pngs[0].stat().st_size > 10_000
    assert pngs[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "compute" in capsys.readouterr().out


def test_roofline_cli_unknown_system_exits_2(tmp_path):
    from dse.cli import main
    assert main(["roofline", "llama2-7b", "--systems", "no-such-gpu", "--out", str(tmp_path)]) == 2


def test_inference_validation_suite():
    from dse.validate import SUITES, summary
    res = SUITES["inference"]()
    assert list(res.columns) == ["id", "suite", "source", "model", "system", "metric", "unit", "measured",
                                 "predicted", "error_pct", "skipped", "fits"]
    table = summary(res)
    assert table.loc["NeMo Llama-2 latency", "mape_pct"] <= 8.0
    assert table.loc["NeMo Llama-2 latency", "max_abs_pct"] <= 20.0
    assert table.loc["TensorRT-LLM fixed-batch throughput", "mape_pct"] <= 15.0


def test_a_format_the_tensor_cores_lack_serves_weight_only():
    # FP8 on an A100: infeasible to train, but inference streams FP8 weights and multiplies at the
    # BF16 peak (Marlin-style weight-only): decode reads fewer bytes, prefill computes no faster
    base = dict(model="llama3.1-8b", system="a100-80gb", gpus=1, tp=1, batch=1, isl=4096, osl=128)
    out = dse.evaluate_inference(pd.DataFrame([dict(base, precision="bf16"), dict(base, precision="fp8")]))
    assert out["fits"].all()
    assert out["decode_memory_s"][1] < 0.8 * out["decode_memory_s"][0]
    assert out["prefill_compute_s"][1] == pytest.approx(out["prefill_compute_s"][0], rel=0.01)
    train = dict(model="llama3.1-8b", system="a100-80gb", gpus=64, tp=8, pp=1, global_batch=64, precision="fp8")
    assert dse.evaluate_training(pd.DataFrame([train]))["infeasible_reason"][0].startswith("the GPU's tensor cores")
