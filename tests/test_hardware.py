"""dse.hardware: accelerators derived from technology (calibration, scaling shape, bad input)."""
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dse
from dse import catalog
from dse.evaluate import hardware_stage
from dse.schema import HARDWARE_COLUMNS
from dse.errors import ConfigError
from dse.hardware import accelerator, accelerator_columns, evaluate_hardware, memory_override, tables, tech

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


@pytest.mark.parametrize("part", ["a100", "h100"])
def test_calibration_anchor_reproduced_exactly_from_calibration_csv(part):
    # The scaling is anchored on these parts: the anchor node, die, memory and link must give
    # back the published MACs, tensor clock and TDP (calibration.csv), to rounding.
    a = tables.calibration().loc[part]
    hw = derived(node=a["node"], die_area_mm2=a["die_area_mm2"], memory=a["memory"],
                 memory_stacks=a["memory_stacks"], scaleup=a["scaleup"], package="si-interposer")
    assert hw.d2d_area_mm2 == 0  # one die: no die-to-die PHYs
    assert hw.tensor_macs == pytest.approx(a["tensor_macs_bf16_per_clock"], rel=1e-12)
    assert hw.frequency_hz == pytest.approx(a["tensor_clock_hz"], rel=1e-12)
    assert hw.tdp_w == pytest.approx(a["tdp_w"], rel=1e-12)
    if part == tables.defaults()["sram_anchor"]:
        assert hw.sram_bytes == pytest.approx(a["sram_mib"] * 2**20, rel=1e-12)


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
    assert msg.startswith("node: unknown node 'n33' (closest:") and "n3" in msg
    assert msg.endswith("see `dse list nodes`")


@pytest.mark.parametrize("field,value,kind,listing", [
    ("memory", "hbm5", "memory", "memories"), ("package", "cowos-x", "package", "packages"),
    ("scaleup", "nvlink9", "network", "networks"), ("scaleout", "ib-zdr", "network", "networks")])
def test_unknown_technology_names(field, value, kind, listing):
    # One resolver for every catalog (dse.catalog.resolve): field, kind, closest names, listing command.
    with pytest.raises(ConfigError, match=f"^{field}: unknown {kind} '{value}' .*; see `dse list {listing}`$"):
        evaluate_hardware({"node": ["n5"], "die_area_mm2": [600.0], field: [value]})


def test_technology_aliases_resolve_like_catalog_names():
    vendor = evaluate_hardware({"node": ["4N"], "die_area_mm2": [814.0], "memory": ["HBM3"],
                                "package": ["CoWoS-S"], "scaleup": ["NVLink 4"]})
    canon = evaluate_hardware({"node": ["n4"], "die_area_mm2": [814.0], "memory": ["hbm3"],
                               "package": ["si-interposer"], "scaleup": ["nvlink4"]})
    for col in HARDWARE_COLUMNS:
        assert vendor[col][0] == canon[col][0], col
    assert tables.resolve("scaleup", "UCIe-A") == "ucie"


def test_wrong_link_kind_is_config_error():
    with pytest.raises(ConfigError, match="^scaleout:"):
        evaluate_hardware({"node": ["n5"], "die_area_mm2": [600.0], "scaleout": ["nvlink4"]})


@pytest.mark.parametrize("field,value", [("die_area_mm2", -100.0), ("die_area_mm2", 0.0),
                                         ("compute_dies", 0), ("compute_dies", 1.5),
                                         ("memory_stacks", -1), ("memory_stacks", -np.inf), ("power_w", -5.0),
                                         ("defect_density_per_cm2", np.inf), ("gross_margin", 1.0)])
def test_bad_numbers_make_the_row_unbuildable_not_the_batch(field, value):
    cols = {"node": ["n5", "n5"], "die_area_mm2": [600.0, 600.0], field: [value, np.nan]}
    if field == "die_area_mm2":
        cols[field] = [value, 600.0]
    out = evaluate_hardware(cols)
    assert list(out["hw_fits"]) == [False, True]
    assert out["hw_infeasible_reason"][0].startswith(f"{field}: outside its domain")
    assert all(np.isfinite(np.asarray(out[k], dtype=float)).all() for k in ("peak_bf16_flops_per_s", "tdp_w"))


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
    hardware_stage(cols)
    m = dse.hardware.memories().loc["hbm4"]
    # stacks x interface width x pin rate as shipped (Rubin: 22 TB/s over 8 stacks), capacity in GiB
    assert cols["memory_bandwidth_bytes_per_s"][0] == pytest.approx(
        6 * m.interface_width_bits * m.accelerator_pin_rate_gbps * 1e9 / 8)
    assert cols["memory_bandwidth_bytes_per_s"][0] == pytest.approx(6 / 8 * 22e12, rel=0.01)
    assert cols["memory_capacity_bytes"][0] == 6 * m.capacity_per_stack_gib * 2**30


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


# ---------------------------------------------------------------- the stages of accelerator_columns
A = tables.assumptions()


def test_defaults_come_from_the_catalog_and_resolve():
    D = tables.defaults()
    for field in ("package", "memory", "scaleup", "scaleout", "d2d_module"):
        assert tables.resolve("d2d" if field == "d2d_module" else field, D[field]) == D[field]
    out = accelerator_columns({"node": np.array(["n3"]), "die_area_mm2": np.array([800.0])})
    t = accelerator.technology_rows({"node": np.array(["n3"])})
    assert t["memory"]["name"][0] == D["memory"] and t["package"]["name"][0] == D["package"]
    assert out["scaleup_domain"][0] == A["scaleup_domain"]
    assert out["memory_stacks"][0] == A["memory_stacks_per_compute_die"]


def test_wrong_link_kind_names_the_field_for_each_link():
    with pytest.raises(ConfigError, match="^scaleup: 'ib-ndr' is a scale-out link"):
        accelerator.technology_rows({"scaleup": np.array(["ib-ndr"])})


def test_die_to_die_costs_logic_area_only_with_several_dies():
    area = np.full(4, 600.0)
    dies = np.array([1.0, 2.0, 4.0, 2.0])
    t = accelerator.technology_rows({"package": np.array(["cowos-l"] * 3 + ["hybrid-bond"], dtype=object)})
    d = accelerator.die_to_die(area, dies, t["package"], t["d2d"], A)
    assert d["d2d_area_mm2"][0] == 0 and d["logic_area_mm2"][0] == 600.0
    assert d["d2d_bandwidth_bytes_per_s"][0] == 0
    # a chain of n dies: n-1 links, so more dies -> more package bandwidth and more PHY area per die
    assert d["d2d_bandwidth_bytes_per_s"][2] == pytest.approx(3 * d["d2d_bandwidth_bytes_per_s"][1])
    assert d["d2d_area_mm2"][2] > d["d2d_area_mm2"][1] > 0
    # hybrid bonding shrinks the PHY (packaging.csv d2d_area_scale)
    assert d["d2d_area_mm2"][3] == pytest.approx(0.1 * d["d2d_area_mm2"][1])
    np.testing.assert_array_equal(d["logic_area_mm2"], area - d["d2d_area_mm2"])


def test_memory_system_default_stacks_capped_by_shoreline_and_bandwidth_per_stack():
    cols = {"memory": np.array(["hbm3e"] * 3, dtype=object)}
    t = accelerator.technology_rows(cols)
    m = accelerator.memory_system(cols, np.array([100.0, 800.0, 800.0]), np.array([1.0, 1.0, 2.0]), t["memory"], A)
    assert m["memory_stacks"][0] == m["max_memory_stacks"][0] < A["memory_stacks_per_compute_die"]
    assert list(m["memory_stacks"][1:]) == [4, 8]
    per_stack = m["memory_bandwidth_bytes_per_s"] / m["memory_stacks"]
    assert np.all(per_stack == per_stack[0])
    # B200: 7.7 TB/s over 8 HBM3e stacks (the catalog's shipping pin rate)
    assert m["memory_bandwidth_bytes_per_s"][2] == pytest.approx(7.7e12, rel=0.01)
    assert np.all(m["memory_power_w"] > 0)


def test_links_ucie_scaleup_grows_with_die_edge_and_io_power_counts_both_directions():
    t = accelerator.technology_rows({"scaleup": np.array(["ucie", "ucie", "nvlink4"], dtype=object)})
    area = np.array([200.0, 800.0, 800.0])
    io = accelerator.links(area, t, np.zeros(3), A)
    assert 0 < io["scaleup_bandwidth_bytes_per_s"][0] < io["scaleup_bandwidth_bytes_per_s"][1]
    assert io["scaleup_bandwidth_bytes_per_s"][2] == 450e9  # NVLink 4: 900 GB/s both ways
    assert io["io_power_w"][2] == pytest.approx(450e9 * 2 * 8 * 1.24e-12)
    assert io["scaleout_latency_s"][0] > io["scaleup_latency_s"][2]


def test_compute_power_budget_sets_clock_and_tdp():
    node = {k: np.full(3, v) for k, v in tech.node_table().loc["n3"].items()}
    cols = {"power_w": np.array([np.nan, 600.0, 50.0])}
    c = accelerator.compute(cols, node, np.full(3, 800.0), np.ones(3), np.full(3, 60.0), np.full(3, 10.0))
    assert c["frequency_hz"][0] == node["tensor_clock_hz"][0] and np.isnan(c["power_limited_clock_hz"][0])
    assert c["tdp_w"][1] == pytest.approx(600.0) and c["frequency_hz"][1] < c["frequency_hz"][0]
    assert c["power_limited_clock_hz"][2] <= 0 and c["frequency_hz"][2] == 0
    np.testing.assert_allclose(c["peak_bf16_flops_per_s"], 2 * c["tensor_macs"] * c["frequency_hz"])


def test_feasibility_flags_only_rows_with_a_node_and_joins_reasons():
    out = accelerator_columns({"node": np.array(["n3", None, "n3"], dtype=object),
                               "die_area_mm2": np.array([900.0, 900.0, 900.0]),
                               "package": np.array(["organic"] * 3, dtype=object),
                               "memory_stacks": np.array([6, 6, 0])})
    assert list(out["hw_fits"]) == [False, True, False]
    assert out["hw_infeasible_reason"][0].count("; ") == 1  # reticle; HBM on an organic substrate
    assert "reticle" in out["hw_infeasible_reason"][2] and "HBM" not in out["hw_infeasible_reason"][2]
    assert accelerator.hbm_packages() == "rdl, si-interposer, cowos-l, hybrid-bond"


def test_hardware_imports_no_later_stage():
    import ast
    import pathlib
    later = ("dse.perf", "dse.economics", "dse.evaluate", "dse.study", "dse.sweep", "dse.reports", "dse.validat")
    for path in pathlib.Path(dse.hardware.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not any(n.startswith(later) for n in names), (path.name, names)


def test_hardware_catalog_rows_have_a_basis():
    for file in ("assumptions.csv", "hardware_defaults.csv", "organic_substrate.csv", "calibration.csv"):
        t = tables._read(file)
        basis = t["basis"] if "basis" in t else t["source"]
        assert basis.fillna("").str.len().gt(15).all(), file


def test_grace_hopper_is_the_h100_gpu_with_more_hbm_bandwidth():
    # GH200 carries the H100 GPU (same tensor peaks) with 96 GB HBM3 at 4 TB/s or 144 GB HBM3e at
    # 4.9 TB/s: the same compute-bound prefill, a memory-bound decode faster in proportion to the
    # bandwidth, and a 70B FP8 model with 24 sequences' cache that fits one superchip (not one 80 GB H100)
    row = dict(model="llama3.1-70b", gpus=1, batch=24, isl=2048, osl=256, precision="fp8", framework="tensorrt-llm")
    out = dse.evaluate_inference(pd.DataFrame([dict(row, system=s) for s in ("h100-sxm", "gh200", "gh200-144gb")]))
    assert not out["fits"].iloc[0] and out["fits"].iloc[1:].all()
    gh, gh144 = out.iloc[1], out.iloc[2]
    assert gh144["tpot_s"] < gh["tpot_s"]
    assert gh["tpot_s"] / gh144["tpot_s"] == pytest.approx(4.9 / 4.0, rel=0.15)
    assert gh["ttft_s"] == pytest.approx(gh144["ttft_s"], rel=0.05)
    systems = catalog.systems()
    assert systems.loc["gh200", "peak_bf16_flops_per_s"] == systems.loc["h100-sxm", "peak_bf16_flops_per_s"]
    # NVLink-C2C to Grace: 450 GB/s per direction, seven times a PCIe Gen5 x16 host link
    assert systems.loc["gh200", "host_link_bandwidth_bytes_per_s"] > 7 * systems.loc["h100-sxm", "host_link_bandwidth_bytes_per_s"]


def test_mi325x_is_the_mi300x_with_hbm3e():
    # same CDNA 3 compute; 256 GB at 6 TB/s against 192 GB at 5.3: decode faster by about the
    # bandwidth ratio, the compute-bound prefill unchanged
    systems = catalog.systems()
    assert systems.loc["mi325x", "peak_fp8_flops_per_s"] == systems.loc["mi300x", "peak_fp8_flops_per_s"]
    row = dict(model="llama3.1-70b", gpus=1, batch=64, isl=2048, osl=256, precision="fp8", framework="vllm")
    out = dse.evaluate_inference(pd.DataFrame([dict(row, system=s) for s in ("mi300x", "mi325x")]))
    old, new = out.iloc[0], out.iloc[1]
    assert 1.0 < old["tpot_s"] / new["tpot_s"] <= 6.0 / 5.3 + 1e-9
    assert new["ttft_s"] == pytest.approx(old["ttft_s"], rel=0.03)


def test_mi355x_doubles_cdna3_matrix_throughput_and_trains_in_mx_formats():
    # CDNA 4: 256 CUs x 8,192 dense FP8 FLOP per clock at 2.4 GHz (AMD, ISSCC 2026) against
    # MI300X's 304 x 4,096 at 2.1 GHz: about 1.9x per format, and the MX formats CDNA 3 lacks
    systems = catalog.systems()
    ratio = systems.loc["mi355x", "peak_fp8_flops_per_s"] / systems.loc["mi300x", "peak_fp8_flops_per_s"]
    assert ratio == pytest.approx(256 * 8192 * 2.4 / (304 * 4096 * 2.1), rel=0.02)
    assert systems.loc["mi355x", "peak_fp4_flops_per_s"] == pytest.approx(2 * systems.loc["mi355x", "peak_fp8_flops_per_s"])
    job = dict(model="llama3.1-70b", gpus=8, tp=8, global_batch=64, micro_batch=1, seq_len=8192, zero=1)
    out = dse.evaluate_training(pd.DataFrame([dict(job, system=s, precision=p)
                                              for s in ("mi300x", "mi355x") for p in ("fp8", "mxfp8", "nvfp4")]))
    assert out["fits"].tolist() == [True, False, False, True, True, False]   # MXFP4's scales, not NVFP4's
    # prefill-heavy training gains less than the peak ratio: memory-bound kernels gain 8/5.3
    assert 1.3 < out["tokens_per_s"].iloc[3] / out["tokens_per_s"].iloc[0] < ratio
