"""dse.hardware: accelerators derived from technology (calibration, scaling shape, bad input)."""
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse import catalog
from dse.columns import HARDWARE_COLUMNS, resolve_hardware
from dse.errors import ConfigError
from dse.hardware import accelerator_columns, evaluate_hardware, memory_override

SWEEP_NODES = ["n12", "n7", "n5", "n3", "n2", "a16", "a14", "a10"]


def derived(**kw):
    return evaluate_hardware(pd.DataFrame({k: [v] for k, v in kw.items()})).iloc[0]


def rel(a, b):
    return abs(a / b - 1)


# ---------------------------------------------------------------- calibration against real parts
def test_a100_from_n7_technology():
    hw = derived(node="n7", die_area_mm2=826.0, memory="hbm2e", memory_stacks=5, scaleup="nvlink3",
                 package="si-interposer")
    ref = catalog.system("a100-80gb")
    assert rel(hw.peak_bf16_flops_per_s, ref.peak_bf16_flops_per_s) < 0.10
    assert rel(hw.memory_bandwidth_bytes_per_s, ref.memory_bandwidth_bytes_per_s) < 0.10
    assert rel(hw.scaleup_bandwidth_bytes_per_s, ref.scaleup_bandwidth_bytes_per_s) < 0.10
    assert rel(hw.memory_capacity_bytes, ref.memory_capacity_bytes) < 0.10
    assert rel(hw.tdp_w, ref.tdp_w) < 0.10
    assert hw.hw_fits


def test_h100_from_n4_technology():
    hw = derived(node="n4", die_area_mm2=814.0, memory="hbm3", memory_stacks=5, scaleup="nvlink4",
                 package="si-interposer")
    ref = catalog.system("h100-sxm")
    assert rel(hw.peak_bf16_flops_per_s, ref.peak_bf16_flops_per_s) < 0.10
    assert rel(hw.memory_bandwidth_bytes_per_s, ref.memory_bandwidth_bytes_per_s) < 0.10
    assert rel(hw.scaleup_bandwidth_bytes_per_s, ref.scaleup_bandwidth_bytes_per_s) < 0.10
    # SRAM (L2 + L1/shared = 83 MiB) follows from the A100 SRAM area fraction: out-of-sample.
    assert rel(hw.sram_bytes, 83 * 2**20) < 0.15
    assert hw.hw_fits


def test_b200_two_die_n4_class_out_of_sample():
    # Two ~800 mm2 4NP dies (Silicon Analysts, shared/data/gpus_estimates.csv), 8 HBM3e, CoWoS-L.
    hw = derived(node="n4p", die_area_mm2=800.0, compute_dies=2, memory="hbm3e", memory_stacks=8,
                 scaleup="nvlink5", package="cowos-l")
    ref = catalog.system("b200")
    assert rel(hw.peak_bf16_flops_per_s, ref.peak_bf16_flops_per_s) < 0.15
    assert rel(hw.memory_bandwidth_bytes_per_s, ref.memory_bandwidth_bytes_per_s) < 0.15
    assert rel(hw.scaleup_bandwidth_bytes_per_s, ref.scaleup_bandwidth_bytes_per_s) < 0.15
    assert hw.peak_fp8_flops_per_s == pytest.approx(2 * hw.peak_bf16_flops_per_s)
    assert hw.peak_fp4_flops_per_s == pytest.approx(4 * hw.peak_bf16_flops_per_s)
    assert hw.d2d_area_mm2 > 0 and hw.d2d_bandwidth_bytes_per_s > 4e12  # NV-HBI class
    assert hw.hw_fits


# ---------------------------------------------------------------- technology scaling shape
def _node_sweep(power_w):
    f = pd.DataFrame({"node": SWEEP_NODES, "die_area_mm2": 800.0, "memory": "hbm3e",
                      "memory_stacks": 6, "power_w": power_w})
    out = evaluate_hardware(f)
    return out.peak_bf16_flops_per_s.to_numpy(), out.accelerator_cost_usd.to_numpy(), out


@pytest.mark.parametrize("power_w", [700.0, 1000.0])
def test_node_sweep_monotone_peak_and_diminishing_cost_per_flops(power_w):
    peak, cost, out = _node_sweep(power_w)
    assert np.all(np.diff(peak) > 0), "peak FLOP/s must grow with every node"
    assert np.all(out.tdp_w <= power_w + 1e-6)
    assert out.hw_fits.all()
    usd_per_flops = cost / peak
    step = np.log(usd_per_flops[1:] / usd_per_flops[:-1])
    # First falls steeply ...
    assert step[0] < np.log(0.5) and step[1] < np.log(0.7)
    # ... then flattens (per-node gain at least halves) or rises, as wafer prices climb.
    early, late = step[:3].mean(), step[3:].mean()
    assert late > 0.5 * early
    # The silicon itself gets dearer per die every node (wafer price outgrows yield gains).
    assert np.all(np.diff(out.die_cost_usd.to_numpy()) >= 0)


def test_power_budget_limits_the_clock():
    free = derived(node="n3", die_area_mm2=800.0, memory="hbm3e", memory_stacks=6)
    capped = derived(node="n3", die_area_mm2=800.0, memory="hbm3e", memory_stacks=6, power_w=500.0)
    assert capped.tdp_w == pytest.approx(500.0)
    assert capped.frequency_hz < free.frequency_hz
    assert capped.peak_bf16_flops_per_s < free.peak_bf16_flops_per_s
    fixed = derived(node="n3", die_area_mm2=800.0, memory="hbm3e", memory_stacks=6, frequency_hz=1.0e9)
    assert fixed.peak_bf16_flops_per_s == pytest.approx(2 * fixed.tensor_macs * 1.0e9)


# ---------------------------------------------------------------- bad input
def test_unknown_node_names_field_and_closest():
    with pytest.raises(ConfigError) as e:
        evaluate_hardware({"node": ["n3", "n33"], "die_area_mm2": [600.0, 600.0]})
    msg = str(e.value)
    assert msg.startswith("node:") and "n33" in msg and "n3" in msg


@pytest.mark.parametrize("field,value", [("memory", "hbm5"), ("package", "cowos-x"), ("scaleup", "nvlink9"),
                                         ("scaleout", "ib-zdr")])
def test_unknown_technology_names(field, value):
    with pytest.raises(ConfigError, match=f"^{field}:"):
        evaluate_hardware({"node": ["n5"], "die_area_mm2": [600.0], field: [value]})


def test_wrong_link_kind_is_config_error():
    with pytest.raises(ConfigError, match="^scaleout:"):
        evaluate_hardware({"node": ["n5"], "die_area_mm2": [600.0], "scaleout": ["nvlink4"]})


@pytest.mark.parametrize("field,value", [("die_area_mm2", -100.0), ("die_area_mm2", 0.0),
                                         ("compute_dies", 0), ("compute_dies", 1.5),
                                         ("memory_stacks", -1), ("power_w", -5.0)])
def test_bad_numbers_are_config_errors(field, value):
    cols = {"node": ["n5"], "die_area_mm2": [600.0], field: [value]}
    with pytest.raises(ConfigError, match=f"^{field}:"):
        evaluate_hardware(cols)


def test_too_many_stacks_is_an_infeasible_row_not_an_error():
    out = evaluate_hardware({"node": ["n3", "n3"], "die_area_mm2": [200.0, 800.0],
                             "memory": ["hbm3e", "hbm3e"], "memory_stacks": [8, 6]})
    assert list(out["hw_fits"]) == [False, True]
    assert "shoreline" in out["hw_infeasible_reason"][0]
    assert out["hw_infeasible_reason"][1] == ""
    assert out["max_memory_stacks"][1] >= 6  # A100/H100-size dies carry 6 HBM sites


def test_reticle_limit_and_package_rules():
    out = evaluate_hardware({
        "node": ["n3"] * 4,
        "die_area_mm2": [900.0, 800.0, 600.0, 800.0],
        "compute_dies": [1, 1, 1, 4],
        "package": ["si-interposer", "organic", "organic", "si-interposer"],
        "memory": ["hbm3e", "hbm3e", "gddr7", "hbm3e"],
        "memory_stacks": [6, 6, 8, 16],
    })
    reason = list(out["hw_infeasible_reason"])
    assert not out["hw_fits"][0] and "reticle" in reason[0]
    assert not out["hw_fits"][1] and "2.5D" in reason[1]
    assert out["hw_fits"][2], reason[2]  # GDDR on an organic substrate is fine
    assert not out["hw_fits"][3] and "interposer" in reason[3]  # 4 x 800 mm2 + 16 stacks > CoWoS-S


# ---------------------------------------------------------------- contract and vectorization
def test_dataframe_in_dataframe_out_same_index_and_all_columns():
    f = pd.DataFrame({"node": pd.Categorical(["n5", "a14", "n7"]), "die_area_mm2": [500.0, 700.0, 300.0]},
                     index=[10, 3, 7])
    out = dse.evaluate_hardware(f)
    assert list(out.index) == [10, 3, 7]
    needed = set(HARDWARE_COLUMNS) | {"sram_bytes", "dies_per_wafer", "die_yield", "die_cost_usd",
                                      "package_cost_usd", "hbm_cost_usd", "nre_per_unit_usd",
                                      "accelerator_cost_usd", "hw_fits", "hw_infeasible_reason"}
    assert needed <= set(out.columns)
    assert out[list(HARDWARE_COLUMNS)].notna().all().all()
    # Scalars broadcast; dict in, dict out.
    d = evaluate_hardware({"node": "n2", "die_area_mm2": np.array([100.0, 400.0])})
    assert isinstance(d, dict) and d["peak_bf16_flops_per_s"].shape == (2,)


def test_rows_without_node_are_nan_for_catalog_fill():
    out = accelerator_columns({"node": np.array(["n5", None], dtype=object),
                               "die_area_mm2": np.array([600.0, np.nan])})
    assert np.isfinite(out["peak_bf16_flops_per_s"][0]) and np.isnan(out["peak_bf16_flops_per_s"][1])


def test_resolve_hardware_uses_derived_columns():
    cols = {"node": np.array(["n3"]), "die_area_mm2": np.array([800.0]), "memory": np.array(["hbm4"]),
            "memory_stacks": np.array([6])}
    resolve_hardware(cols)
    assert cols["memory_bandwidth_bytes_per_s"][0] == pytest.approx(6 * 2048 * 10.74e9 / 8)
    assert cols["memory_capacity_bytes"][0] == 6 * 36 * 2**30


def test_memory_override_keeps_catalog_numbers_for_own_memory_and_scales_others():
    same = memory_override({"system": np.array(["h100-sxm", "a100-40gb"]), "memory": np.array(["hbm3", "hbm2"])})
    assert same["memory_bandwidth_bytes_per_s"] == pytest.approx([3.35e12, 1.555e12])
    assert same["memory_capacity_bytes"] == pytest.approx([80 * 2**30, 40 * 2**30])
    assert list(same["memory_stacks"]) == [5, 5]
    up = memory_override({"system": np.array(["h100-sxm"]), "memory": np.array(["hbm3e"]),
                          "memory_stacks": np.array([6])})
    assert up["memory_bandwidth_bytes_per_s"][0] == pytest.approx(6 * 962.5e9, rel=1e-3)
    assert up["memory_capacity_bytes"][0] == pytest.approx(6 * 24 * 2**30)


def test_systems_catalog_has_sourced_stacks_and_prices():
    t = pd.read_csv(__import__("importlib.resources").resources.files("dse.catalog").joinpath("systems.csv"))
    assert t.memory_stacks.notna().all()
    priced = t[t.price_usd.notna()]
    assert {"a100-80gb", "h100-sxm", "b200"} <= set(priced.name)
    assert priced.price_source.str.len().gt(10).all()


@settings(max_examples=40, deadline=None)
@given(area=st.floats(50, 850), node=st.sampled_from(SWEEP_NODES), dies=st.integers(1, 4))
def test_properties_bigger_die_more_flops_and_cost(area, node, dies):
    out = evaluate_hardware({"node": [node, node], "die_area_mm2": [area, area * 0.9],
                             "compute_dies": [dies, dies], "memory": "hbm3", "memory_stacks": 2 * dies,
                             "package": "cowos-l"})
    peak, cost = out["peak_bf16_flops_per_s"], out["die_cost_usd"]
    assert np.all(np.isfinite(peak)) and np.all(peak >= 0)
    assert peak[0] > peak[1] or out["d2d_area_mm2"][0] >= area * 0.5
    assert cost[0] > cost[1]
    assert 0 < out["die_yield"][0] < out["die_yield"][1] <= 1


def test_vectorized_batch_equals_row_by_row():
    # Speed is a benchmark's business; here: a long batch gives each row what it gives alone.
    n = 20_000
    rng = np.random.default_rng(0)
    cols = {"node": pd.Categorical(rng.choice(SWEEP_NODES, n)), "die_area_mm2": rng.uniform(100, 850, n),
            "compute_dies": rng.integers(1, 5, n), "memory": pd.Categorical(rng.choice(["hbm3e", "hbm4"], n)),
            "memory_stacks": rng.integers(0, 9, n)}
    out = accelerator_columns(cols)
    assert out["peak_bf16_flops_per_s"].shape == (n,)
    for i in rng.choice(n, 5, replace=False):
        one = accelerator_columns({k: (v[i:i + 1] if not isinstance(v, pd.Categorical) else np.asarray(v)[i:i + 1])
                                   for k, v in cols.items()})
        for col in ("peak_bf16_flops_per_s", "accelerator_cost_usd", "memory_bandwidth_bytes_per_s"):
            assert one[col][0] == pytest.approx(out[col][i], rel=1e-12, nan_ok=True)


def test_default_memory_stacks_four_per_die_capped_by_shoreline():
    out = evaluate_hardware({"node": ["n3", "n3", "n3", "n3"], "die_area_mm2": [800.0, 800.0, 100.0, 800.0],
                             "compute_dies": [1, 2, 1, 2],
                             "package": ["si-interposer", "cowos-l", "si-interposer", "si-interposer"]})
    assert list(out["memory_stacks"]) == [4, 8, 2, 8]  # 100 mm2 die: one HBM3e per long edge
    assert list(out["hw_fits"]) == [True, True, True, False]  # B200-size on CoWoS-S: interposer too big
    assert "interposer" in out["hw_infeasible_reason"][3]
