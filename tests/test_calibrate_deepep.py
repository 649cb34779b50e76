"""DeepEP dispatch/combine fits (dse.calibrate.deepep, dse.perf.forms.deepep) against the SGLang tables."""
from __future__ import annotations


import numpy as np
import pytest
from conftest import of

from dse.calibrate import deepep, error_stats
from dse.perf.forms import deepep as form

SUBOPS = [f"{m}_{d}" for m in form.MODES for d in form.DIRECTIONS]


@pytest.fixture(scope="module")
def fits(all_fits, data):
    out = {g: of(all_fits, "deepep", g) for g in data.gpus}
    return {g: f for g, f in out.items() if f}


def _params(fits_of_gpu):
    return {k: v for f in fits_of_gpu for k, v in f.params.items()}


def test_error_targets_per_gpu(fits):
    assert len(fits) >= 6  # every folder with DeepEP tables (A100 has none)
    for gpu, fs in fits.items():
        pooled = error_stats("deepep", gpu, np.concatenate([f.measured_s for f in fs]),
                             np.concatenate([f.predicted_s for f in fs]))
        assert pooled["median_abs_error_pct"] <= 10.0, pooled
        assert pooled["p90_abs_error_pct"] <= 25.0, pooled


def test_one_fit_per_kernel_and_direction(fits):
    for gpu, fs in fits.items():
        assert [f.family for f in fs] == ["deepep"] * 4 and all(f.precision == "all" for f in fs)
        names = set(_params(fs))
        assert names == {f"{s}_{p}" for s in SUBOPS for p in form.PARAMS}, (gpu, names)


def test_parameters_are_physical_and_rounded(fits):
    for gpu, fs in fits.items():
        p = _params(fs)
        for name, v in p.items():
            assert isinstance(v, float) and v == float(f"{v:.3g}") and v >= 0, (gpu, name, v)
        for s in SUBOPS:
            assert 0 < p[f"{s}_efficiency"] <= 1, (gpu, s)
            assert 1e-6 < p[f"{s}_floor_s"] < 1e-4, (gpu, s)
            assert p[f"{s}_sm_bytes_per_s"] > 0, (gpu, s)
        for d in form.DIRECTIONS:  # low-latency kernels exist to have the smaller fixed cost
            assert p[f"low_latency_{d}_floor_s"] < p[f"normal_{d}_floor_s"], (gpu, d)


def test_form_is_monotone_where_physics_says(data, fits):
    tokens = 2.0 ** np.arange(0, 18)
    for gpu, fs in fits.items():
        p, ranks = _params(fs), deepep.node_gpus(data, gpu)
        bw = float(data.system(gpu)["scaleup_bandwidth_bytes_per_s"])
        for mode in form.MODES:
            for d in form.DIRECTIONS:
                base = dict(num_tokens=tokens, hidden_size=7168.0, topk=8.0, num_experts=256.0, num_ranks=ranks,
                            scaleup_bandwidth_bytes_per_s=bw, params=p, sms=20)
                t = lambda **kw: form.deepep_time_for(mode, d, **{**base, **kw})
                assert np.all(np.diff(t()) > 0), (gpu, mode, d)          # more tokens take longer
                assert np.all(t(sms=24) <= t(sms=8)), (gpu, mode, d)     # more SMs never slower
                assert np.all(t(hidden_size=4096.0) <= t()), (gpu, mode, d)
                assert np.all(t(scaleup_bandwidth_bytes_per_s=2 * bw) <= t()), (gpu, mode, d)


def test_traffic_helpers():
    assert form.ranks_hit(1.0, 256.0, 8.0) == pytest.approx(1.0)
    assert form.ranks_hit(8.0, 8.0, 8.0) == pytest.approx(8.0)       # one expert per rank: all hit
    hits = form.ranks_hit(np.arange(1.0, 23.0), 256.0, 8.0)
    assert np.all(np.diff(hits) > 0) and hits[-1] <= 8.0
    # uniform routing: P(rank missed) = C(224, 8)/C(256, 8) for DeepSeek-V3 on 8 GPUs
    miss = np.prod([(224 - i) / (256 - i) for i in range(8)])
    assert form.ranks_hit(8.0, 256.0, 8.0) == pytest.approx(8 * (1 - miss))
    # normal mode deduplicates per rank, low-latency mode sends one copy per selected expert
    normal, _ = form.normal_traffic(128.0, 7168.0, 8.0, 256.0, 8.0, form.FP8_ELEMENT_BYTES)
    ll, _ = form.low_latency_traffic(128.0, 7168.0, 8.0, 8.0, "dispatch")
    assert ll > normal
    combine, _ = form.low_latency_traffic(128.0, 7168.0, 8.0, 8.0, "combine")
    assert combine / ll == pytest.approx(2 * 7168 / (7168 * form.FP8_ELEMENT_BYTES + 16))


def test_node_size_from_system_file(data):
    assert deepep.node_gpus(data, "h100_sxm") == 8
    assert deepep.node_gpus(data, "gb200") == 4


def test_fit_is_deterministic(data, fits):
    assert [f.params for f in deepep.fit(data, "gb200")] == [f.params for f in fits["gb200"]]
