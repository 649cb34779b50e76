"""`dse calibrate` attention family: fits to the measured TensorRT-LLM attention kernels and the
physics the fitted forms must keep (dse.perf.forms.attention)."""

import numpy as np
import pytest
from conftest import KERNEL_GPUS as GPUS
from conftest import of

from dse.calibrate import attention


@pytest.fixture(scope="module")
def fits(all_fits):
    return {gpu: of(all_fits, "attention", gpu) for gpu in GPUS}


def test_fit_shape(fits):
    for gpu, found in fits.items():
        precisions = [f.precision for f in found]
        assert "bf16" in precisions and set(precisions) <= {"bf16", "fp8"}, gpu
        for f in found:
            assert f.family == "attention" and f.gpu == gpu
            assert all(type(v) is float for v in f.params.values())
            assert np.all(np.isfinite(f.predicted_s)) and np.all(f.predicted_s > 0)


def test_parameters_are_physical(fits):
    for found in fits.values():
        for f in found:
            p = f.params
            for name in ("prefill_efficiency_max", "prefill_memory_efficiency", "decode_bandwidth_efficiency"):
                assert 0.0 < p[name] <= 1.0, (f.gpu, f.precision, name, p[name])
            assert 0.0 <= p["decode_reread_fraction"] <= 1.0, (f.gpu, f.precision)
            for name in ("prefill_floor_s", "decode_floor_s"):
                assert 1e-6 < p[name] < 1e-4, (f.gpu, name, p[name])
            assert p["prefill_softmax_dim"] >= 0.0
            for name in ("prefill_tile_s", "decode_head_floor_s", "decode_cta_s", "decode_key_s", "decode_query_s",
                         "decode_head_cta_s", "decode_head_key_s", "decode_split_s", "decode_head_split_s",
                         "decode_empty_split_s"):
                assert 0.0 <= p[name] < 1e-4, (f.gpu, name)   # seconds: at most tens of microseconds
            assert p["prefill_q_tile_rows"] in (64.0, 128.0)
            assert 64.0 <= p["decode_sm_count"] <= 200.0
            assert p["decode_grouped_min_items"] in (0.0, p["decode_sm_count"] / 4)


def test_decode_dispatch_is_recovered(fits):
    """The split and wave steps pin the SM count of Hopper (132), and only its bf16-cache XQA kernel
    needs a quarter of the SMs in (sequence x KV head x 128-key block) items to run."""
    for gpu in ("h100_sxm", "h200_sxm"):
        for f in fits[gpu]:
            assert abs(f.params["decode_sm_count"] - 132.0) <= 8.0, (gpu, f.precision)
            gated = f.params["decode_grouped_min_items"] > 0
            assert gated == (f.precision == "bf16"), (gpu, f.precision)


def test_grouped_splits_follow_tensorrt_llm():
    """TensorRT-LLM's XQA multi-block count: history / 128 blocks, at most ~sqrt(8 x that), cut to
    8 waves of the SMs."""
    from dse.perf.forms import attention as form
    history = np.array([127, 511, 4095, 65535, 8191, 4095], float)
    items = np.array([8, 8, 8, 8, 64, 512], float)
    assert form.grouped_splits(history, items, 132.0).tolist() == [1, 3, 16, 64, 16, 2]
    assert form.grouped_splits(history, items, 132.0, split_keys=0.0).tolist() == [1] * 6


def test_predictions_reproduce_from_rounded_params(data, fits):
    """The stored predictions are the public forms evaluated with the rounded (catalog) values."""
    f = next(f for f in fits["h100_sxm"] if f.precision == "bf16")
    system = data.system("h100_sxm")
    ctx = attention.read_table(data, "h100_sxm", "attention", "context_attention_perf")
    ctx = ctx[(ctx.kernel_source == attention.KERNEL_SOURCE) & (ctx.kv_cache_dtype == "bfloat16")]
    pre = attention.prefill_s(f.params, attention._shapes(ctx, 2.0), float(system["peak_bf16_flops_per_s"]),
                              float(system["memory_bandwidth_bytes_per_s"]))
    np.testing.assert_allclose(pre, f.predicted_s[:len(ctx)], rtol=1e-12)
    gen = attention.read_table(data, "h100_sxm", "attention", "generation_attention_perf")
    gen = gen[(gen.kernel_source == attention.KERNEL_SOURCE) & (gen.kv_cache_dtype == "bfloat16")]
    dec = attention.decode_s(f.params, attention._shapes(gen, 2.0), float(system["peak_bf16_flops_per_s"]),
                             float(system["memory_bandwidth_bytes_per_s"]))
    np.testing.assert_allclose(dec, f.predicted_s[len(ctx):], rtol=1e-12)


def _rates(data, fits, gpu, precision="bf16"):
    f = next(f for f in fits[gpu] if f.precision == precision)
    s = data.system(gpu)
    peak = float(s["peak_bf16_flops_per_s" if precision == "bf16" else "peak_fp8_flops_per_s"])
    return f.params, peak, float(s["memory_bandwidth_bytes_per_s"])


@pytest.mark.parametrize("gpu", GPUS)
def test_prefill_longer_sequences_not_slower_per_flop(data, fits, gpu):
    from dse.perf.forms import attention as form
    p, peak, bw = _rates(data, fits, gpu)
    seq = np.array([128, 512, 2048, 8192, 32768], float)
    t = form.attention_prefill_time_s(2.0, seq, 32.0, 8.0, 128.0, 0.0, 2.0, peak, bw, p)
    rate = form.prefill_flops(2.0, seq, 32.0, 128.0, 128.0, 0.0) / t
    assert np.all(np.diff(t) > 0) and np.all(np.diff(rate) > 0)
    assert rate[-1] / peak <= p["prefill_efficiency_max"]
    # more heads or sequences in the batch: more time, not a lower FLOP rate
    t_wide = form.attention_prefill_time_s(8.0, seq, 64.0, 8.0, 128.0, 0.0, 2.0, peak, bw, p)
    assert np.all(t_wide > t)
    assert np.all(form.prefill_flops(8.0, seq, 64.0, 128.0, 128.0, 0.0) / t_wide >= rate * (1 - 1e-9))


@pytest.mark.parametrize("gpu", GPUS)
def test_window_and_kv_length(data, fits, gpu):
    from dse.perf.forms import attention as form
    p, peak, bw = _rates(data, fits, gpu)
    seq = np.array([1024, 4096, 16384], float)
    full = form.attention_prefill_time_s(4.0, seq, 32.0, 8.0, 128.0, 0.0, 2.0, peak, bw, p)
    windowed = form.attention_prefill_time_s(4.0, seq, 32.0, 8.0, 128.0, 1024.0, 2.0, peak, bw, p)
    assert np.all(windowed <= full) and windowed[-1] < full[-1]
    kv = np.array([128, 1024, 8192, 65536], float)
    dec = form.attention_decode_time_s(16.0, kv, 32.0, 8.0, 128.0, 0.0, 2.0, peak, bw, p)
    assert np.all(np.diff(dec) > 0)
    dec_w = form.attention_decode_time_s(16.0, kv, 32.0, 8.0, 128.0, 1024.0, 2.0, peak, bw, p)
    # beyond the window only the splits outside it (no keys) still cost: far less than the KV read
    assert np.all(dec_w <= dec * (1 + 1e-9)) and dec_w[-1] - dec_w[-2] < 0.1 * (dec[-1] - dec[-2])
    more = form.attention_decode_time_s(64.0, kv, 32.0, 8.0, 128.0, 0.0, 2.0, peak, bw, p)
    assert np.all(more > dec) and np.all(more < 4.0 * dec + 1e-12)   # batching amortises fixed costs


@pytest.mark.parametrize("gpu", [g for g in GPUS if g != "a100_sxm"])
def test_fp8_cache_decodes_long_contexts_faster(data, fits, gpu):
    """At long context decode is bandwidth-bound: an FP8 cache (half the bytes) must be faster."""
    from dse.perf.forms import attention as form
    bf16, peak16, bw = _rates(data, fits, gpu, "bf16")
    fp8, peak8, _ = _rates(data, fits, gpu, "fp8")
    kv = np.array([16384.0, 65536.0])
    t16 = form.attention_decode_time_s(32.0, kv, 32.0, 8.0, 128.0, 0.0, 2.0, peak16, bw, bf16)
    t8 = form.attention_decode_time_s(32.0, kv, 32.0, 8.0, 128.0, 0.0, 1.0, peak8, bw, fp8)
    assert np.all(t8 < t16)


@pytest.mark.parametrize("gpu", GPUS)
def test_small_batch_long_context_streams_the_cache(data, fits, gpu):
    """Split-KV: one sequence with a long context still reads its cache at a good fraction of the
    HBM bandwidth (without splits, eight CTAs could not)."""
    from dse.perf.forms import attention as form
    p, peak, bw = _rates(data, fits, gpu)
    kv = 131072.0
    t = form.attention_decode_time_s(1.0, kv, 64.0, 8.0, 128.0, 0.0, 2.0, peak, bw, p)
    assert 0.3 * bw < kv * 8 * 2 * 128 * 2.0 / t <= bw


def test_fit_is_deterministic(data, fits):
    again = attention.fit(data, "a100_sxm")
    assert [f.params for f in again] == [f.params for f in fits["a100_sxm"]]
