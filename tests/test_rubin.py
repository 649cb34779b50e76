"""NVIDIA Vera Rubin NVL72 (`vr200`), a catalog part without kernel tables: its peaks, HBM and links
are its own (announced figures), every fitted efficiency is GB300's carried over (the 'rubin' row of
efficiency_projection.csv). What a user can rely on is checked as relationships: the names
Megatron-Bridge's recipes use resolve, the carried fits are GB300's exactly, and the same job gains at
most what the hardware ratios allow, and most of it where one resource bounds the job."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import dse
from dse import catalog
from dse.catalog.fitted import fitted_columns


@pytest.mark.parametrize("name", ["vr200", "VR200", "VRNVL72", "VR NVL72", "Vera Rubin NVL72"])
def test_megatron_bridge_spellings_resolve(name):
    # scripts/performance/argument_parser.py (Megatron-Bridge @067f987df) names the part 'vr200', its
    # perf recipes 'vrnvl72'
    assert catalog.resolve_system(name) == "vr200"


def test_fitted_parameters_are_gb300s_and_peaks_are_its_own():
    systems = catalog.systems()
    # a column the part's own catalog row states (the scale-up latency) is its own; the rest carry over
    own = {"scaleup_latency_s", "scaleout_latency_s"}
    fitted = [c for c in fitted_columns().columns
              if c in systems and c not in own and systems.loc["gb300", c] == systems.loc["gb300", c]]
    assert len(fitted) > 20
    pd.testing.assert_series_equal(systems.loc["vr200", fitted], systems.loc["gb300", fitted], check_names=False)
    for column in ("peak_bf16_flops_per_s", "peak_fp8_flops_per_s", "memory_bandwidth_bytes_per_s",
                   "scaleup_bandwidth_bytes_per_s", "scaleout_bandwidth_bytes_per_s"):
        assert systems.loc["vr200", column] > systems.loc["gb300", column], column
    # the announced rack figures: 1.2 EF FP8 and 2.5 EF NVFP4 training over 72 GPUs, 22 TB/s HBM4
    assert systems.loc["vr200", "peak_fp8_flops_per_s"] * 72 == pytest.approx(1.2e18, rel=0.01)
    assert systems.loc["vr200", "peak_fp4_flops_per_s"] * 72 == pytest.approx(2.5e18, rel=0.01)
    assert systems.loc["vr200", "memory_bandwidth_bytes_per_s"] == pytest.approx(22e12)


def _train(system, precision="bf16", **kw):
    row = dict(model="llama3.1-405b", system=system, precision=precision, gpus=256, tp=4, pp=8, micro_batch=1,
               global_batch=512, seq_len=8192, framework="megatron-bridge") | kw
    return dse.evaluate_training(pd.DataFrame([row])).iloc[0]


@pytest.mark.parametrize("precision, peak", [("bf16", "peak_bf16_flops_per_s"), ("fp8", "peak_fp8_flops_per_s")])
def test_dense_training_gains_close_to_the_peak_ratio_and_never_more(precision, peak):
    gb300, vr200 = _train("gb300", precision), _train("vr200", precision)
    assert gb300["fits"] and vr200["fits"]
    peaks = catalog.systems()[peak]
    ratio = peaks["vr200"] / peaks["gb300"]
    speedup = gb300["step_time_s"] / vr200["step_time_s"]
    # the GEMMs reach the same fraction of the larger peak; the collectives and memory-bound ops gain
    # less than the peak ratio (NVLink 6 and HBM4 grow 2x and 2.75x against 3.4x)
    assert 0.75 * ratio < speedup <= ratio
    assert vr200["compute_s"] == pytest.approx(gb300["compute_s"] / ratio, rel=0.15)


def test_decode_gains_at_most_the_bandwidth_ratio():
    rows = [dict(model="llama3.1-70b", system=s, precision="fp8", framework="tensorrt-llm", gpus=8, tp=8,
                 concurrency=c, isl=1024, osl=1024) for s in ("gb300", "vr200") for c in (1, 16, 256)]
    out = dse.evaluate_serving(pd.DataFrame(rows))
    assert out["fits"].all()
    tpot = out.pivot_table(index="concurrency", columns="system", values="tpot_s")
    bandwidth = catalog.systems()["memory_bandwidth_bytes_per_s"]
    gain = tpot["gb300"] / tpot["vr200"]
    assert (gain > 1.0).all()
    assert (gain <= bandwidth["vr200"] / bandwidth["gb300"]).all()
    # a 70B FP8 decode step at 8-way TP is more than its weight stream: the all-reduces and launch
    # floors do not scale with HBM, so the batch-1 step gains well below 2.75x
    assert np.all(gain < 2.0)
