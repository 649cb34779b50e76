"""Chiplet cost model (Chiplet Actuary, Feng and Ma DAC 2022) and workload economics."""
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse.errors import ConfigError
from dse.hardware import accelerator_columns, evaluate_hardware, workload_costs
from dse.hardware import chiplet


# ---------------------------------------------------------------- Chiplet Actuary reference case
def test_chiplet_actuary_800mm2_die_at_5nm():
    dpw = chiplet.dies_per_wafer(800.0, wafer_diameter_mm=300.0, scribe_mm=0.2, edge_mm=5.0)
    y = chiplet.die_yield(800.0, 0.11, 10.0)
    kgd = chiplet.known_good_die_cost(16988.0, dpw, y)
    assert dpw == pytest.approx(58.8, abs=0.05)
    assert y == pytest.approx(0.430, abs=0.001)
    assert kgd == pytest.approx(672.0, abs=1.0)


def test_chiplet_actuary_case_through_evaluate_hardware():
    out = evaluate_hardware(pd.DataFrame({
        "node": ["n7"], "die_area_mm2": [800.0], "wafer_cost_usd": [16988.0],
        "defect_density_per_cm2": [0.11], "yield_clustering": [10.0]}))
    assert out.dies_per_wafer[0] == pytest.approx(58.8, abs=0.05)
    assert out.die_yield[0] == pytest.approx(0.430, abs=0.001)
    assert out.die_cost_usd[0] == pytest.approx(672.0, abs=1.0)


def _actuary_si_package(die_area, n_dies, kgd, raw):
    """Scalar transcription of Chiplet Actuary package.py `Advanced.cost_RE` (SI, chip-last)."""
    d, s, e = 300.0, 0.2, 5.0
    int_area = 1.1 * n_dies * die_area
    a = int_area + 2 * s * math.sqrt(int_area) + s * s
    n_int = math.pi * (d / 2 - e) ** 2 / a - math.pi * (d - 2 * e) / math.sqrt(2 * a)
    cost_int = 1937.0 / n_int + int_area * 0.005
    cost_sub = 4 * int_area * 0.005
    chips_raw = n_dies * raw + n_dies * die_area * 0.01
    chips_defect = n_dies * (kgd - raw)
    y1 = (1 + 0.06 / 100 * int_area / 6) ** -6
    y2 = 0.95 ** n_dies
    y3 = 0.99
    defect_pkg = cost_int * (1 / (y1 * y2 * y3) - 1) + cost_sub * (1 / y3 - 1)
    wasted = (chips_raw + chips_defect) * (1 / (y2 * y3) - 1)
    return cost_int + cost_sub + n_dies * die_area * 0.01 + defect_pkg + wasted


def test_package_cost_matches_chiplet_actuary_si_formula():
    out = evaluate_hardware({"node": ["n5"], "die_area_mm2": [200.0], "compute_dies": [4],
                             "package": ["si-interposer"], "memory": ["hbm3"], "memory_stacks": [0]})
    raw = 16988.0 / out["dies_per_wafer"][0]
    expect = _actuary_si_package(200.0, 4, out["die_cost_usd"][0], raw)
    assert out["package_cost_usd"][0] == pytest.approx(expect, rel=1e-9)


def test_chiplet_split_lowers_die_cost_and_adds_packaging_cost():
    # One 800 mm2 5 nm die on an organic substrate vs four 200 mm2 chiplets on a Si interposer.
    out = evaluate_hardware(pd.DataFrame({
        "node": ["n5", "n5"], "die_area_mm2": [800.0, 200.0], "compute_dies": [1, 4],
        "package": ["organic", "si-interposer"], "memory": ["gddr7", "gddr7"], "memory_stacks": [0, 0]}))
    silicon = np.array([1, 4]) * out.die_cost_usd.to_numpy()
    assert silicon[1] < 0.75 * silicon[0]             # yield: 4 x (200 mm2 KGD) << one 800 mm2 KGD
    assert out.package_cost_usd[1] > out.package_cost_usd[0]  # interposer, bonding losses
    assert out.die_yield[1] > out.die_yield[0]
    assert out.d2d_area_mm2[1] > 0 and out.d2d_area_mm2[0] == 0
    # Chiplets pay for their D2D PHYs with compute area.
    assert out.tensor_macs[1] < out.tensor_macs[0]


def test_nre_is_amortised_over_volume():
    out = evaluate_hardware({"node": ["n3", "n3"], "die_area_mm2": [600.0, 600.0], "volume": [1e5, 2e5]})
    assert out["nre_per_unit_usd"][0] == pytest.approx(2 * out["nre_per_unit_usd"][1])
    # Chiplet Actuary: a 300 mm2 chip's NRE equals the node's NRE (+ package NRE).
    one = evaluate_hardware({"node": ["n7"], "die_area_mm2": [300.0], "volume": [1.0], "package": ["organic"],
                             "memory": ["ddr5"], "memory_stacks": [0]})
    pkg_nre = 4 * 300 * 3000 + 300000
    assert one["nre_per_unit_usd"][0] == pytest.approx(298e6 * (0.5 * (300 - one["d2d_area_mm2"][0]) / 300 + 0.5)
                                                       + pkg_nre)


def test_cost_breakdown_adds_up():
    out = evaluate_hardware({"node": ["n4p"], "die_area_mm2": [800.0], "compute_dies": [2], "package": ["cowos-l"],
                             "memory": ["hbm3e"], "memory_stacks": [8], "gross_margin": [0.5]})
    total = 2 * out["die_cost_usd"] + out["package_cost_usd"] + out["hbm_cost_usd"] + out["nre_per_unit_usd"]
    assert out["manufacturing_cost_usd"] == pytest.approx(total)
    assert out["accelerator_cost_usd"] == pytest.approx(2 * total)
    assert out["hbm_cost_usd"][0] == pytest.approx(8 * 24 * 15.0)
    # Calibration check (not a fit): Silicon Analysts put a B200 CoWoS-L package at ~$1,100.
    assert 500 < out["package_cost_usd"][0] < 2500


@settings(max_examples=50, deadline=None)
@given(a=st.floats(10, 850), b=st.floats(10, 850), d0=st.floats(0.01, 0.5), alpha=st.floats(0.5, 20))
def test_yield_and_dies_per_wafer_properties(a, b, d0, alpha):
    lo, hi = min(a, b), max(a, b)
    y_lo, y_hi = chiplet.die_yield(np.array([lo, hi]), d0, alpha)
    assert 0 < y_hi <= y_lo <= 1
    n_lo, n_hi = chiplet.dies_per_wafer(np.array([lo, hi]))
    assert n_hi <= n_lo
    # A bigger known-good die always costs more.
    c = chiplet.known_good_die_cost(10000.0, np.array([n_lo, n_hi]), np.array([y_lo, y_hi]))
    assert c[1] >= c[0] * (1 - 1e-12)


# ---------------------------------------------------------------- workload economics
def _cols(**kw):
    base = {"tdp_w": np.array([700.0]), "scaleout_bandwidth_bytes_per_s": np.array([50e9]),
            "accelerator_cost_usd": np.array([30000.0])}
    base.update({k: np.asarray(v) for k, v in kw.items()})
    return base


def test_workload_costs_hand_computed():
    cols = _cols(train_tokens=np.array([1e12]), lifetime_years=np.array([4.0]), pue=np.array([1.2]),
                 electricity_usd_per_kwh=np.array([0.1]), power_utilization=np.array([0.7]),
                 host_cost_per_gpu_usd=np.array([10000.0]), network_cost_usd_per_gbit_s=np.array([10.0]),
                 host_power_per_gpu_w=np.array([300.0]))
    out = workload_costs(cols, step_time_s=10.0, tokens_per_step=4e6, gpus=1024)
    capex = 1024 * (30000 + 10000 + 10 * 400)
    assert out["system_capex_usd"][0] == pytest.approx(capex)
    energy = 1024 * (700 * 0.7 + 300) * 1.2 * 10.0
    assert out["energy_j"][0] == pytest.approx(energy)
    per_step = capex * 10.0 / (4 * 365.25 * 86400) + energy / 3.6e6 * 0.1
    assert out["cost_per_million_tokens_usd"][0] == pytest.approx(per_step / 4e6 * 1e6)
    assert out["cost_per_run_usd"][0] == pytest.approx(per_step * 1e12 / 4e6)


def test_workload_costs_defaults_catalog_prices_and_no_tokens():
    cols = {"system": np.array(["h100-sxm", "b200", "v100-32gb"]), "tdp_w": np.array([700.0, 1000.0, 350.0])}
    out = workload_costs(cols, step_time_s=np.array([1.0, 1.0, 1.0]), tokens_per_step=1e6, gpus=8)
    assert list(out["accelerator_cost_usd"][:2]) == [30000.0, 40000.0]
    assert np.isnan(out["accelerator_cost_usd"][2])  # no sourced price: NaN, never invented
    assert np.isnan(out["cost_per_run_usd"]).all()   # no train_tokens / serve_tokens given
    assert np.all(out["energy_j"] > 0) and np.isfinite(out["cost_per_million_tokens_usd"][:2]).all()
    serve = workload_costs({**cols, "serve_tokens": np.array([1e9] * 3)}, 1.0, 1e6, 8)
    assert serve["cost_per_run_usd"][0] == pytest.approx(serve["cost_per_million_tokens_usd"][0] * 1e3)


def test_derived_hardware_price_flows_into_economics():
    hw = accelerator_columns({"node": np.array(["n3"]), "die_area_mm2": np.array([800.0])})
    cols = {"tdp_w": hw["tdp_w"], "accelerator_cost_usd": hw["accelerator_cost_usd"],
            "scaleout_bandwidth_bytes_per_s": hw["scaleout_bandwidth_bytes_per_s"]}
    out = workload_costs(cols, 1.0, 1e6, 8)
    assert out["accelerator_cost_usd"][0] == pytest.approx(hw["accelerator_cost_usd"][0])
    assert out["system_capex_usd"][0] > 8 * hw["accelerator_cost_usd"][0]


@pytest.mark.parametrize("field,value", [("pue", 0.9), ("lifetime_years", 0.0), ("electricity_usd_per_kwh", -1.0)])
def test_bad_economic_inputs(field, value):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        workload_costs(_cols(**{field: np.array([value])}), 1.0, 1e6, 8)


def test_cost_columns_in_training_results_for_catalog_and_derived():
    training = pytest.importorskip("dse.perf.training")
    base = {"model": ["gpt3-175b"], "gpus": [1024], "tp": [8], "pp": [8], "global_batch": [1536],
            "micro_batch": [1], "train_tokens": [300e9]}
    catalog_run = training.evaluate_training(pd.DataFrame({**base, "system": ["a100-80gb"]}))
    derived_run = training.evaluate_training(pd.DataFrame({**base, "node": ["n3"], "die_area_mm2": [800.0],
                                                           "memory_stacks": [6]}))
    for out in (catalog_run, derived_run):
        for col in ("accelerator_cost_usd", "system_capex_usd", "energy_j", "cost_per_run_usd",
                    "cost_per_million_tokens_usd"):
            assert col in out.columns, col
            assert np.isfinite(out[col]).all(), col
    assert catalog_run.accelerator_cost_usd[0] == 15000.0
    run = catalog_run.iloc[0]
    steps = 300e9 / run.tokens_per_step
    assert run.cost_per_run_usd == pytest.approx(run.cost_per_million_tokens_usd * 300e9 / 1e6)
    assert run.energy_j * steps > 0


def test_inference_results_carry_cost_columns_for_catalog_and_derived_hardware():
    frame = pd.DataFrame(dict(model="llama3.1-70b", system=["h100-sxm", None], node=[None, "n3"],
                              die_area_mm2=[np.nan, 800.0], compute_dies=[np.nan, 2], package=[None, "cowos-l"],
                              memory=[None, "hbm4"], memory_stacks=[np.nan, 8], scaleup=[None, "nvlink5"],
                              scaleup_domain=[np.nan, 72], scaleout=[None, "ib-xdr"], gpus=8, tp=8,
                              batch=64, isl=1024, osl=512, serve_tokens=1e9))
    out = dse.evaluate_inference(frame)
    for col in ("accelerator_cost_usd", "system_capex_usd", "energy_j", "cost_per_run_usd",
                "cost_per_million_tokens_usd"):
        assert np.isfinite(out[col]).all() and (out[col] > 0).all(), col
    # cost per run = cost per token x tokens served
    np.testing.assert_allclose(out["cost_per_run_usd"], out["cost_per_million_tokens_usd"] * 1e3, rtol=1e-9)
