"""Quantization-kernel fits (dse.calibrate.quantize, dse.perf.forms.quantize) against measured tables."""
from __future__ import annotations


import numpy as np
import pytest
from conftest import of

from dse.calibrate import error_stats
from dse.calibrate import quantize
from dse.perf.forms import quantize as form



@pytest.fixture(scope="module")
def fits(all_fits, data):
    return {g: of(all_fits, "quantize", g) for g in data.gpus}


def _merged(group):
    return {name: v for f in group for name, v in f.params.items()}


def _bandwidth(data, gpu):
    return float(data.system(gpu)["memory_bandwidth_bytes_per_s"])


def test_error_targets_per_gpu(fits):
    for gpu, group in fits.items():
        if not group:
            continue
        pooled = error_stats("quantize", gpu, np.concatenate([f.measured_s for f in group]),
                             np.concatenate([f.predicted_s for f in group]))
        assert pooled["median_abs_error_pct"] <= 10.0, pooled
        assert pooled["p90_abs_error_pct"] <= 25.0, pooled
        for f in group:
            s = f.stats()
            assert s["median_abs_error_pct"] <= 10.0 and s["p90_abs_error_pct"] <= 25.0, (f.basis, s)


def test_one_fit_per_table_and_distinguishable(fits):
    assert fits["a100_sxm"] == []  # no FP8 quantization tables on Ampere
    for gpu, group in fits.items():
        if gpu == "a100_sxm":
            continue
        assert len(group) == 2, gpu
        assert all(f.family == "quantize" and f.precision == "fp8" and f.gpu == gpu for f in group)
        merged = _merged(group)
        assert set(merged) == {f"{k}_{p}" for k in form.KERNELS for p in form.PARAMS}, merged


def test_parameters_are_physical_and_rounded(fits):
    for gpu, group in fits.items():
        merged = _merged(group)
        for kernel in (form.KERNELS if group else ()):
            assert 0 < merged[f"{kernel}_memory_efficiency"] <= 1, (gpu, merged)
            assert 0 < merged[f"{kernel}_floor_s"] < 1e-4, (gpu, merged)
            assert merged[f"{kernel}_cache_bytes"] >= 0, (gpu, merged)
        for name, v in merged.items():
            assert isinstance(v, float) and v == float(f"{v:.3g}"), (name, v)
        if group:  # dynamic scaling waits for a reduction before the cast: a larger fixed cost
            assert merged["compute_scale_floor_s"] > merged["scale_matrix_floor_s"], (gpu, merged)


def test_stored_predictions_reproduce_from_rounded_params(data, fits):
    for table, kernel in quantize.TABLES.items():
        rows = data.table("h100_sxm", "quantize", table).sort_values(["m", "k"], kind="stable")
        (f,) = [f for f in fits["h100_sxm"] if f"{kernel}_floor_s" in f.params]
        again = form.kernel_time_s(kernel, rows["m"].to_numpy(float), rows["k"].to_numpy(float),
                                   _bandwidth(data, "h100_sxm"), f.params)
        np.testing.assert_array_equal(again, f.predicted_s)


def test_time_monotone_and_cache_only_helps(data, fits):
    sizes = 2.0 ** np.arange(0, 17)
    for gpu, group in fits.items():
        params = _merged(group)
        for kernel in (form.KERNELS if group else ()):
            for fixed in (1.0, 512.0, 8192.0):
                for m, k in ((sizes, fixed), (fixed, sizes)):
                    t = form.kernel_time_s(kernel, m, k, _bandwidth(data, gpu), params)
                    assert np.all(np.diff(t) >= -1e-15), (gpu, kernel, fixed)
                    uncached = form.kernel_time_s(kernel, m, k, _bandwidth(data, gpu),
                                                  {**params, f"{kernel}_cache_bytes": 0.0})
                    assert np.all(uncached >= t), (gpu, kernel)


def test_large_tensors_accurate(data, fits):
    # training-size activations: what the performance model uses the fit for
    for gpu, group in fits.items():
        for f in group:
            kernel = next(k for k in form.KERNELS if f"{k}_floor_s" in f.params)
            table = next(t for t, k in quantize.TABLES.items() if k == kernel)
            rows = data.table(gpu, "quantize", table).sort_values(["m", "k"], kind="stable")
            big = (rows["m"] * rows["k"] >= 2.0 ** 27).to_numpy()
            err = np.abs(f.predicted_s[big] / f.measured_s[big] - 1)
            assert big.sum() >= 10 and np.median(err) <= 0.15, (gpu, kernel, np.median(err))


def test_training_quantization_passes():
    bytes_of = form.training_quantize_bytes_per_element
    assert bytes_of("bf16") == 0.0
    # per-tensor current scaling reads twice; a Hopper transposed copy only adds bytes
    assert bytes_of("fp8", transposed_copy=True) > bytes_of("fp8") > 2 * 2.0
    # two quantized copies (rowwise + columnwise) from one read of the bf16 source where the scales
    # are per block only; NVFP4's per-tensor FP32 scale needs the global amax first: two reads
    for precision in ("fp8-block", "mxfp8", "mxfp4"):
        reads, copies = form.TRAINING_QUANTIZATION[precision]
        assert (reads, copies) == (1, 2), precision
    assert form.TRAINING_QUANTIZATION["nvfp4"] == (2, 2)
    assert bytes_of("mxfp4") < bytes_of("mxfp8") < bytes_of("nvfp4")  # narrower copies; one read more


def test_training_quantize_time(data, fits):
    params = _merged(fits["h100_sxm"])
    bw = _bandwidth(data, "h100_sxm")
    elements = np.array([0.0, 2.0 ** 24, 2.0 ** 28])
    t_fp8 = form.training_quantize_time_s("fp8", elements, bw, params)
    t_block = form.training_quantize_time_s("fp8-block", elements, bw, params)
    assert t_fp8[0] == 0.0 and np.all(np.diff(t_fp8) > 0) and np.all(np.diff(t_block) > 0)
    assert np.all(form.training_quantize_time_s("bf16", elements, bw, params) == 0.0)
    # at least one full read of the bf16 tensor at no more than HBM bandwidth
    assert t_block[-1] >= elements[-1] * 2.0 / bw


def test_fit_is_deterministic(data, fits):
    again = quantize.fit(data, "h100_sxm")
    assert [f.params for f in again] == [f.params for f in fits["h100_sxm"]]
