"""GEMM fits (dse.calibrate.gemm, dse.perf.forms.gemm) against the measured kernel tables."""
from __future__ import annotations


import numpy as np
import pytest
from conftest import of

from dse.calibrate import error_stats
from dse.calibrate import gemm
from dse.perf.forms import gemm as form

LOW = ("fp8", "fp8-block", "nvfp4")


@pytest.fixture(scope="module")
def fits(all_fits, data):
    return {g: {f.precision: f for f in of(all_fits, "gemm", g)} for g in data.gpus}


def _rates(data, gpu, precision):
    s = data.system(gpu)
    return float(s[form.PEAK_COLUMN[precision]]), float(s["memory_bandwidth_bytes_per_s"])


def test_error_targets_per_gpu(fits):
    for gpu, by in fits.items():
        pooled = error_stats("gemm", gpu, np.concatenate([f.measured_s for f in by.values()]),
                             np.concatenate([f.predicted_s for f in by.values()]))
        assert pooled["median_abs_error_pct"] <= 10.0, pooled
        assert pooled["p90_abs_error_pct"] <= 25.0, pooled
        for f in by.values():
            s = f.stats()
            assert s["median_abs_error_pct"] <= 10.0 and s["p90_abs_error_pct"] <= 25.0, (f.precision, s)


def test_formats_mapped_and_skipped(fits):
    for gpu, by in fits.items():
        assert "bf16" in by, gpu
        assert set(by) <= set(form.FORMATS), by.keys()  # no int4/int8 weight-only or smooth-quant
        for f in by.values():
            assert f.family == "gemm" and f.gpu == gpu and f.points > 1000
    assert set(fits["a100_sxm"]) == {"bf16"}
    assert {"bf16", "fp8", "fp8-block", "nvfp4"} <= set(fits["b200_sxm"])


def test_parameters_are_physical_and_rounded(fits):
    for gpu, by in fits.items():
        for precision, f in by.items():
            p = f.params
            assert 0 < p["efficiency_max"] <= 1 and 0 < p["memory_efficiency"] <= 1, (gpu, precision, p)
            assert 0 < p["floor_s"] < 1e-4 and p["tiles_per_wave"] > 1, (gpu, precision, p)
            assert p["k_ramp"] >= 0 and p["split_k_min_depth"] > 0, (gpu, precision, p)
            assert ("quantize_memory_efficiency" in p) == (precision in LOW)
            if precision in LOW:
                assert 0 < p["quantize_memory_efficiency"] <= 1
            for name, v in p.items():
                assert isinstance(v, float) and v == float(f"{v:.3g}"), (name, v)


def test_stored_predictions_reproduce_from_rounded_params(data, fits):
    for gpu in ("h100_sxm", "b200_sxm"):
        peak_bw = {p: _rates(data, gpu, p) for p in fits[gpu]}
        for precision, _source, rows in gemm._rows(data, gpu):
            m, n, k = (rows[c].to_numpy(float) for c in ("m", "n", "k"))
            again = form.gemm_time_for(precision, m, n, k, *peak_bw[precision], fits[gpu][precision].params)
            np.testing.assert_array_equal(again, fits[gpu][precision].predicted_s)


def test_large_gemms_accurate(data, fits):
    # training-sized GEMMs are what end-to-end step times hinge on
    for gpu, by in fits.items():
        for precision, _source, rows in gemm._rows(data, gpu):
            big = ((rows["m"] >= 4096) & (rows["n"] >= 4096) & (rows["k"] >= 4096)).to_numpy()
            f = by[precision]
            err = np.abs(f.predicted_s[big] / f.measured_s[big] - 1)
            assert big.sum() > 100 and np.median(err) <= 0.15, (gpu, precision, np.median(err))


def test_larger_square_gemms_not_slower_per_flop(data, fits):
    d = 2.0 ** np.arange(5, 16)
    for gpu, by in fits.items():
        for precision, f in by.items():
            frac = form.achieved_fraction_of_peak(precision, d, d, d, *_rates(data, gpu, precision), f.params)
            assert np.all(np.diff(frac) >= -1e-12), (gpu, precision, frac)
            assert 0 < frac[-1] <= f.params["efficiency_max"]


def test_time_monotone_in_each_dimension(data, fits):
    grid = np.unique(np.r_[1, 2, 7, 8 * np.arange(1, 40), 2.0 ** np.arange(9, 17)])
    for gpu, by in fits.items():
        for precision, f in by.items():
            peak, bw = _rates(data, gpu, precision)
            for fixed in (64.0, 1024.0, 8192.0):
                for axis in range(3):
                    shape = [np.full_like(grid, fixed) for _ in range(3)]
                    shape[axis] = grid
                    t = form.gemm_time_for(precision, *shape, peak, bw, f.params)
                    assert np.all(np.diff(t) >= -1e-15), (gpu, precision, axis, fixed)


def test_low_precision_beats_bf16_on_large_gemms(data, fits):
    for gpu, by in fits.items():
        t = {p: form.gemm_time_for(p, 8192.0, 8192.0, 8192.0, *_rates(data, gpu, p), f.params)
             for p, f in by.items()}
        for precision in LOW:
            if precision in t:
                assert t[precision] < t["bf16"], (gpu, precision, t)


def test_quantize_pass_costs_time_and_empty_gemm_is_free(data, fits):
    f = fits["h100_sxm"]["fp8"]
    peak, bw = _rates(data, "h100_sxm", "fp8")
    with_q = form.gemm_time_for("fp8", 4096.0, 4096.0, 4096.0, peak, bw, f.params)
    without = form.gemm_time_for("fp8", 4096.0, 4096.0, 4096.0, peak, bw, f.params, include_quantize=False)
    assert with_q > without > 0
    zero = form.gemm_time_for("bf16", np.array([0.0, 8.0]), 8.0, np.array([8.0, 0.0]), peak, bw,
                              fits["h100_sxm"]["bf16"].params)
    np.testing.assert_array_equal(zero, 0.0)


def test_fit_is_deterministic(data, fits):
    again = {f.precision: f.params for f in gemm.fit(data, "a100_sxm")}
    assert again == {p: f.params for p, f in fits["a100_sxm"].items()}
