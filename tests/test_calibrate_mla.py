"""`dse calibrate` mla family: fits to the measured TensorRT-LLM DeepSeek-V3 MLA kernels and the
physics the fitted forms must keep (mla_* in dse.perf.forms.attention)."""

import numpy as np
import pytest
from conftest import KERNEL_GPUS as GPUS
from conftest import of


@pytest.fixture(scope="module")
def fits(all_fits):
    return {gpu: of(all_fits, "mla", gpu) for gpu in GPUS}


def test_fit_shape_and_physical_parameters(fits):
    for gpu, found in fits.items():
        precisions = [f.precision for f in found]
        # Ampere has no FP8 units: its rows labelled fp8 time a bf16 kernel and are not fitted.
        assert precisions == (["bf16"] if gpu == "a100_sxm" else ["bf16", "fp8"]), gpu
        for f in found:
            p = f.params
            assert f.family == "mla" and all(type(v) is float for v in p.values())
            for name in ("prefill_efficiency_max", "prefill_memory_efficiency", "decode_bandwidth_efficiency"):
                assert 0.0 < p[name] <= 1.0, (gpu, f.precision, name)
            assert 1e-6 < p["prefill_floor_s"] < 1e-4 and 1e-6 < p["decode_floor_s"] < 1e-4
            assert min(p["prefill_tile_s"], p["decode_cta_s"], p["decode_key_s"], p["decode_query_s"],
                       p["decode_split_s"]) >= 0.0
            # the latent KV is shared: no per-head kernel, no re-reads
            assert not any(k.startswith("decode_head_") for k in p) and "decode_reread_fraction" not in p
            assert 64.0 <= p["decode_sm_count"] <= 200.0
            # the A100 tables' SM80 path runs one CTA per sequence; Hopper and Blackwell split the KV
            assert (p["decode_split_keys"] == 0.0) == (gpu == "a100_sxm"), (gpu, f.precision)


def _rates(data, fits, gpu, precision="bf16"):
    f = next(f for f in fits[gpu] if f.precision == precision)
    s = data.system(gpu)
    peak = float(s["peak_bf16_flops_per_s" if precision == "bf16" else "peak_fp8_flops_per_s"])
    return f.params, peak, float(s["memory_bandwidth_bytes_per_s"])


@pytest.mark.parametrize("gpu", GPUS)
def test_prefill_monotone_and_saturating(data, fits, gpu):
    from dse.perf.forms import attention as form
    p, peak, bw = _rates(data, fits, gpu)
    seq = np.array([256, 1024, 4096, 16384], float)
    t = form.mla_prefill_time_s(2.0, seq, 128.0, 2.0, peak, bw, p)
    rate = form.prefill_flops(2.0, seq, 128.0, 192.0, 128.0, 0.0) / t
    assert np.all(np.diff(t) > 0) and np.all(np.diff(rate) > 0)
    assert rate[-1] / peak <= p["prefill_efficiency_max"]
    # fewer heads per GPU (higher TP): less time per GPU, never a higher FLOP rate
    t16 = form.mla_prefill_time_s(2.0, seq, 16.0, 2.0, peak, bw, p)
    assert np.all(t16 < t)
    assert np.all(form.prefill_flops(2.0, seq, 16.0, 192.0, 128.0, 0.0) / t16 <= rate * (1 + 1e-9))


@pytest.mark.parametrize("gpu", GPUS)
def test_decode_monotone(data, fits, gpu):
    from dse.perf.forms import attention as form
    p, peak, bw = _rates(data, fits, gpu)
    kv = np.array([256, 4096, 32768, 131072], float)
    t = form.mla_decode_time_s(64.0, kv, 128.0, 2.0, peak, bw, p)
    assert np.all(np.diff(t) > 0)
    assert np.all(form.mla_decode_time_s(256.0, kv, 128.0, 2.0, peak, bw, p) > t)
    assert np.all(form.mla_decode_time_s(64.0, kv, 16.0, 2.0, peak, bw, p) <= t)
    # at long context decode MLA streams the latent cache: it cannot beat the HBM bandwidth
    assert np.all(64.0 * kv[-1] * form.MLA_LATENT_DIM * 2.0 / t[-1] <= bw)


@pytest.mark.parametrize("gpu", [g for g in GPUS if g != "a100_sxm"])
def test_fp8_latent_cache_decodes_long_contexts_faster(data, fits, gpu):
    from dse.perf.forms import attention as form
    bf16, peak16, bw = _rates(data, fits, gpu, "bf16")
    fp8, peak8, _ = _rates(data, fits, gpu, "fp8")
    kv = np.array([32768.0, 131072.0])
    assert np.all(form.mla_decode_time_s(64.0, kv, 16.0, 1.0, peak8, bw, fp8)
                  < form.mla_decode_time_s(64.0, kv, 16.0, 2.0, peak16, bw, bf16))
