"""Collective (NCCL, TensorRT-LLM custom all-reduce) fits against the measured kernel tables."""
from __future__ import annotations


import numpy as np
import pytest
from conftest import of

from dse.calibrate import error_stats
from dse.calibrate import nccl
from dse.perf.forms import collective as form

SIZES = 2.0 ** np.arange(8, 31)  # 256 B .. 1 GiB
GROUPS = np.array([2.0, 3.0, 4.0, 8.0, 16.0, 72.0])


@pytest.fixture(scope="module")
def fits(all_fits, data):
    return {g: of(all_fits, "nccl", g) for g in data.gpus}


def _by_precision(fits_of_gpu):
    return {f.precision: f for f in fits_of_gpu}


def test_error_targets_per_gpu(fits):
    for gpu, group in fits.items():
        pooled = error_stats("nccl", gpu, np.concatenate([f.measured_s for f in group]),
                             np.concatenate([f.predicted_s for f in group]))
        assert pooled["median_abs_error_pct"] <= 10.0, pooled
        assert pooled["p90_abs_error_pct"] <= 25.0, pooled
        for f in group:
            s = f.stats()
            assert s["median_abs_error_pct"] <= 10.0 and s["p90_abs_error_pct"] <= 25.0, (f.precision, s)


def test_every_collective_and_payload_is_fitted(fits):
    # guards against the four collectives collapsing into one (op_name is a key of nccl_perf)
    for gpu, group in fits.items():
        by = _by_precision(group)
        assert {"bf16", "fp8", "all"} <= set(by), gpu
        for precision in ("bf16", "fp8"):
            for op in form.OPS:
                assert set(form.collective_params(by[precision].params, op)), (gpu, op)
        assert set(form.custom_params(by["all"].params)) == set(form.CUSTOM_PARAMS)


def test_parameters_are_physical(fits):
    for gpu, group in fits.items():
        by = _by_precision(group)
        for precision in ("bf16", "fp8"):
            for op in form.OPS:
                p = form.collective_params(by[precision].params, op)
                # only an in-switch reduction (NVLS) can beat the ring volume, and by less than
                # 2(n-1)/n; collectives that do not reduce cannot beat the link
                ceiling = 2.0 if op == "all_reduce" else 1.0
                assert 0.0 < p["efficiency_max"] <= ceiling, (gpu, op, p)
                assert 0.0 <= p["local_copy_fraction"] <= 1.0
                assert 0.0 < p["floor_s"] < 50e-6 and 0.0 <= p["step_latency_s"] < 10e-6
                assert p["half_bytes"] > 0
        custom = form.custom_params(by["all"].params)
        assert 0.0 < custom["oneshot_efficiency"] <= 1.0 and 0.0 < custom["twoshot_efficiency"] <= 1.0
        # the custom all-reduce exists because its fixed cost is below NCCL's
        ar = form.collective_params(by["bf16"].params, "all_reduce")
        assert custom["floor_s"] < ar["floor_s"] + 2 * ar["step_latency_s"], gpu


def test_forms_monotone_in_size_and_group(data, fits):
    for gpu, group in fits.items():
        bandwidth = float(data.system(gpu)["scaleup_bandwidth_bytes_per_s"])
        by = _by_precision(group)
        for op in form.OPS:
            p = form.collective_params(by["bf16"].params, op)
            t = form.collective_s(op, GROUPS[:, None], SIZES[None, :], bandwidth, **p)
            assert np.all(np.diff(t, axis=1) > 0), (gpu, op)   # more bytes take longer
            assert np.all(np.diff(t, axis=0) >= 0), (gpu, op)  # more ranks are not faster
            busbw = form.volume_factor(op, GROUPS[:, None]) * SIZES[None, :] / t
            assert np.all(np.diff(busbw, axis=1) > 0), (gpu, op)  # larger messages use links better
            assert np.all(busbw <= p["efficiency_max"] * bandwidth * (1 + 1e-9))
        ar = form.collective_s("all_reduce", GROUPS[:, None], SIZES[None, :], bandwidth,
                               **form.collective_params(by["bf16"].params, "all_reduce"))
        custom = form.custom_all_reduce_s(GROUPS[:, None], SIZES[None, :], bandwidth,
                                          **form.custom_params(by["all"].params), fallback_s=ar)
        assert np.all(custom <= ar) and np.all(np.diff(custom, axis=1) >= 0)


def test_no_time_for_one_rank_or_empty_message():
    p = dict(floor_s=5e-6, step_latency_s=1e-6, efficiency_max=0.8, half_bytes=4e6, local_copy_fraction=0.5)
    for op in form.OPS:
        assert form.collective_s(op, 1, 1e6, 450e9, **p) == 0.0
        assert form.collective_s(op, 8, 0.0, 450e9, **p) == 0.0
    assert form.custom_all_reduce_s(1, 1e6, 450e9, 3e-6, 0.6, 0.3, fallback_s=1.0) == 0.0


def test_message_size_is_elements(data):
    # half and int8 all-gathers move the same bytes at the same speed: message_size counts
    # elements (bytes = elements x element size), as AIConfigurator's collector writes it
    t = nccl._nccl_table(data, "h100_sxm")
    t = t[t["op_name"] == "all_gather"].assign(
        bytes=lambda d: d["message_size"] * d["nccl_dtype"].map({"half": 2, "int8": 1}))
    p = t.pivot_table(index=["num_gpus", "bytes"], columns="nccl_dtype", values="latency_s").dropna()
    assert len(p) > 40
    assert abs(np.median(p["half"] / p["int8"]) - 1.0) < 0.05


def test_stored_predictions_follow_from_rounded_params(data, fits):
    gpu = "h100_sxm"
    bandwidth = float(data.system(gpu)["scaleup_bandwidth_bytes_per_s"])
    by = _by_precision(fits[gpu])
    t = nccl._nccl_table(data, gpu)
    t = t[t["nccl_dtype"] == "half"]
    predicted = []
    for op in form.OPS:
        s = t[t["op_name"] == op]
        predicted.append(form.collective_s(op, s["num_gpus"].to_numpy(float), s["message_size"].to_numpy(float) * 2,
                                           bandwidth, **form.collective_params(by["bf16"].params, op)))
    np.testing.assert_array_equal(np.concatenate(predicted), by["bf16"].predicted_s)
    for f in fits[gpu]:
        assert all(float(f"{v:.3g}") == v for v in f.params.values())


def test_fit_is_deterministic(data, fits):
    again = nccl.fit(data, "b200_sxm")
    assert [f.params for f in again] == [f.params for f in fits["b200_sxm"]]
