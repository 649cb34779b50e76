"""Chiplet cost model (Chiplet Actuary, Feng and Ma DAC 2022) and workload economics."""
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse.errors import ConfigError
from dse.economics import workload_costs
from dse.hardware import accelerator, accelerator_columns, evaluate_hardware, tables
from dse.hardware import chiplet

A = tables.assumptions()
WAFER = dict(wafer_diameter_mm=A["wafer_diameter_mm"], scribe_mm=A["scribe_lane_mm"], edge_mm=A["edge_loss_mm"])


# ---------------------------------------------------------------- Chiplet Actuary reference case
def _actuary_die(area, wafer_cost, d0, alpha, d=300.0, s=0.2, e=5.0):
    """Scalar transcription of Chiplet Actuary chip.py (N_die_total, yield, cost per known-good die)."""
    a = area + 2 * s * math.sqrt(area) + s * s
    n = math.pi * (d / 2 - e) ** 2 / a - math.pi * (d - 2 * e) / math.sqrt(2 * a)
    y = (1 + d0 / 100 * area / alpha) ** -alpha
    return n, y, wafer_cost / (n * y)


def test_chiplet_actuary_800mm2_die_at_5nm():
    dpw = chiplet.dies_per_wafer(800.0, wafer_diameter_mm=300.0, scribe_mm=0.2, edge_mm=5.0)
    y = chiplet.die_yield(800.0, 0.11, 10.0)
    kgd = chiplet.known_good_die_cost(16988.0, dpw, y)
    assert (dpw, y, kgd) == pytest.approx(_actuary_die(800.0, 16988.0, 0.11, 10.0), rel=1e-12)
    assert 58 < dpw < 60 and 0.42 < y < 0.44  # an 800 mm2 die: under 60 candidates, under half good


def test_chiplet_actuary_case_through_evaluate_hardware():
    out = evaluate_hardware(pd.DataFrame({
        "node": ["n7"], "die_area_mm2": [800.0], "wafer_cost_usd": [16988.0],
        "defect_density_per_cm2": [0.11], "yield_clustering": [10.0]}))
    expect = _actuary_die(800.0, 16988.0, 0.11, 10.0, A["wafer_diameter_mm"], A["scribe_lane_mm"], A["edge_loss_mm"])
    got = (out.dies_per_wafer[0], out.die_yield[0], out.die_cost_usd[0])
    assert got == pytest.approx(expect, rel=1e-12)


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


def test_organic_substrate_factor_is_chiplet_actuarys_published_step():
    # Chiplet Actuary package.py OS: x1 for one chip; else x1.5, x1.75 above 17x17 mm, x2 above 30x30 mm.
    area = np.array([100.0, 17 * 17, 17 * 17 + 1, 30 * 30, 30 * 30 + 1, 5000.0, 5000.0, np.nan])
    chips = np.array([2, 2, 2, 2, 2, 2, 1, 2])
    assert list(chiplet.organic_substrate_factor(area, chips)) == [1.5, 1.5, 1.75, 1.75, 2.0, 2.0, 1.0, 1.5]
    assert chiplet.organic_substrate_factor(10.0, 3) == 1.5  # scalars broadcast


@settings(max_examples=30, deadline=None)
@given(a=st.floats(1, 5000), b=st.floats(1, 5000), chips=st.integers(2, 12))
def test_organic_substrate_factor_never_falls_with_package_size(a, b, chips):
    lo, hi = chiplet.organic_substrate_factor(np.array([min(a, b), max(a, b)]), chips)
    assert 1.0 < lo <= hi


def test_costs_stage_prices_silicon_package_memory_and_margin():
    cols = {"node": np.array(["n5"] * 3), "gross_margin": np.array([0.0, 0.5, 0.5]),
            "package": np.array(["si-interposer"] * 3), "memory": np.array(["hbm3"] * 3)}
    node, area, _ = accelerator.node_rows({**cols, "die_area_mm2": np.array([200.0, 400.0, 800.0])})
    t = accelerator.technology_rows(cols)
    c = accelerator.costs(cols, node, area, area, np.ones(3), t["package"], t["memory"], np.full(3, 4.0), A)
    assert c["accelerator_cost_usd"][0] == c["manufacturing_cost_usd"][0]
    assert c["accelerator_cost_usd"][1] == pytest.approx(2 * c["manufacturing_cost_usd"][1])
    # bigger die: fewer dies per wafer, lower yield, dearer per mm2 of known-good silicon
    assert np.all(np.diff(c["dies_per_wafer"]) < 0) and np.all(np.diff(c["die_yield"]) < 0)
    assert np.all(np.diff(c["die_cost_usd"] / area) > 0)
    assert np.all(c["hbm_cost_usd"] == 4 * 16 * 15.0)  # 4 HBM3 stacks of 16 GiB at $15/GB (memory.csv)


def test_bridge_silicon_priced_per_mm2_as_the_si_interposer_wafer():
    usable_mm2 = math.pi * (A["wafer_diameter_mm"] / 2 - A["edge_loss_mm"]) ** 2
    si = tables.table("packaging.csv").loc["si-interposer"]
    assert accelerator.bridge_silicon_usd_per_mm2(A) == pytest.approx(si.interposer_wafer_cost_usd / usable_mm2)


# Published bills of materials (manufacturing cost per GPU, USD). Not fitted: the model must land near.
# H100: Raymond James 2023 (via Barron's / Epoch AI) $3,320; HBM3 80 GB ~$1,400 (Silicon Analysts).
# B200: Silicon Analysts 2026 B200 cost breakdown: $6,400 total, HBM3e 192 GB ~$2,900, CoWoS-L ~$1,100.
PUBLISHED_BOM = {
    "h100": dict(part=dict(node="n4", die_area_mm2=814.0, compute_dies=1, memory="hbm3", memory_stacks=5,
                           scaleup="nvlink4", package="si-interposer"), total=3320.0, hbm=1400.0, price=30000.0),
    "b200": dict(part=dict(node="n4p", die_area_mm2=800.0, compute_dies=2, memory="hbm3e", memory_stacks=8,
                           scaleup="nvlink5", package="cowos-l"), total=6400.0, hbm=2900.0, price=40000.0),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_BOM))
def test_published_bill_of_materials_reproduced(name):
    ref = PUBLISHED_BOM[name]
    out = evaluate_hardware({k: [v] for k, v in ref["part"].items()})
    assert out["manufacturing_cost_usd"][0] == pytest.approx(ref["total"], rel=0.35)
    assert out["hbm_cost_usd"][0] == pytest.approx(ref["hbm"], rel=0.2)
    # price at the catalog gross margin vs the catalog's sourced price (systems.csv price_usd)
    assert out["accelerator_cost_usd"][0] == pytest.approx(ref["price"], rel=0.25)


def test_b200_costs_more_than_h100_and_chiplets_pay_in_package():
    h, b = (evaluate_hardware({k: [v] for k, v in PUBLISHED_BOM[n]["part"].items()}) for n in ("h100", "b200"))
    assert b["manufacturing_cost_usd"][0] > h["manufacturing_cost_usd"][0]
    assert b["package_cost_usd"][0] > h["package_cost_usd"][0]


@settings(max_examples=50, deadline=None)
@given(a=st.floats(10, 850), b=st.floats(10, 850), d0=st.floats(0.01, 0.5), alpha=st.floats(0.5, 20))
def test_yield_and_dies_per_wafer_properties(a, b, d0, alpha):
    lo, hi = min(a, b), max(a, b)
    y_lo, y_hi = chiplet.die_yield(np.array([lo, hi]), d0, alpha)
    assert 0 < y_hi <= y_lo <= 1
    n_lo, n_hi = chiplet.dies_per_wafer(np.array([lo, hi]), **WAFER)
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
    from dse import resolve
    cols = {"system": np.array(["h100-sxm", "b200", "v100-32gb"], dtype=object), "tdp_w": np.array([700.0, 1000.0, 350.0])}
    resolve.system(cols)  # names -> numbers (price_usd of systems.csv) happen before economics
    out = workload_costs(cols, step_time_s=np.array([1.0, 1.0, 1.0]), tokens_per_step=1e6, gpus=8)
    assert list(out["accelerator_cost_usd"][:2]) == [30000.0, 40000.0]
    assert out["accelerator_cost_usd"][2] == 10000.0  # the V100's price estimate (systems.csv, with its basis)
    import pandas as pd
    from dse import catalog
    assert catalog.prices() and not pd.isna(list(catalog.prices().values())).any()  # every system has a price
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
    training = pytest.importorskip("dse.evaluate")
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


def test_serving_energy_is_the_pools_facility_power_and_prices_its_tokens():
    # serving has no step: its energy_j is one second of the pool (J/s = W), and a million output
    # tokens cost what the pool's capex share and energy cost over the seconds they take
    from dse import catalog
    frame = pd.DataFrame(dict(model="llama3.1-70b", system=["h100-sxm", "b200"], precision="fp8", framework="vllm",
                              gpus=8, tp=8, concurrency=64, isl=1024, osl=1024))
    out = dse.evaluate_serving(frame)
    a = catalog.assumptions()
    tdp = catalog.systems().loc[["h100-sxm", "b200"], "tdp_w"].to_numpy()
    power = out["serving_gpus"] * (tdp * a["power_utilization"] + a["host_power_per_gpu_w"]) * a["pue"]
    np.testing.assert_allclose(out["energy_j"], power, rtol=1e-6)
    per_second = (out["system_capex_usd"] / (a["lifetime_years"] * 365.25 * 86400)
                  + out["energy_j"] / 3.6e6 * a["electricity_usd_per_kwh"])
    np.testing.assert_allclose(out["cost_per_million_tokens_usd"], per_second / out["output_tokens_per_s"] * 1e6, rtol=1e-6)
