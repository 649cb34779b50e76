"""Accelerator columns derived from technology: compute, memory, links, power and cost.

Inputs (one row per design point; only `node` and `die_area_mm2` are required):
    node            logic node (nodes.csv: n12, n7, n5, n4, n4p, n3, n2, a16, a14, a10, a7)
    die_area_mm2    area of each compute die, mm2 (> 0; above 858 mm2 the row is infeasible)
    compute_dies    compute dies per package (default 1)
    package         organic, rdl, si-interposer, cowos-l, hybrid-bond (default si-interposer)
    memory          hbm2 ... hbm4e, gddr6, gddr7, lpddr5x, ddr5 (default hbm3e)
    memory_stacks   stacks (HBM) or devices (default: 4 per compute die, as B200, capped by the shoreline)
    scaleup         nvlink3 ... nvlink6, ucie (default nvlink4); scaleup_domain (default 8)
    scaleout        ib-hdr, ib-ndr, ib-xdr, eth-400g, eth-800g, eth-1.6t (default ib-ndr)
    power_w         optional power budget: the tensor clock drops until the part fits it
    frequency_hz    optional tensor clock (default: the node's clock, tech.py)
    wafer_cost_usd, defect_density_per_cm2, yield_clustering, volume, gross_margin: cost overrides

Model (all SI units):
    logic area    = die area - die-to-die PHY area
    MACs          = MACs per mm2(node) x logic area x compute dies
    clock         = min(frequency_hz or node clock, (power_w - memory - I/O power) / (MACs x energy per MAC))
    peak BF16     = 2 x MACs x clock; FP8 = 2x, FP4 = 4x BF16 (assumptions.csv)
    TDP           = MACs x clock x energy per MAC + memory bandwidth x DRAM pJ/bit
                    + scale-up bandwidth both ways x link pJ/bit + D2D bandwidth both ways x pJ/bit
    memory        = stacks x per-stack bandwidth / capacity (memory.py)
    cost          = compute dies x known-good-die cost + package (interposer, substrate, bumps,
                    bonding losses) + memory + NRE / volume  (chiplet.py, Chiplet Actuary)
    price         = cost / (1 - gross_margin)  ->  accelerator_cost_usd
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from dse import catalog
from dse.columns import HARDWARE_COLUMNS, as_float
from dse.errors import ConfigError
from dse.hardware import chiplet, memory, network, tables, tech

PACKAGE_COLUMNS = ("kind", "interposer_wafer_cost_usd", "interposer_defect_density_per_cm2",
                   "interposer_clustering", "interposer_area_scale", "substrate_area_scale",
                   "substrate_cost_usd_per_mm2", "chip_bump_cost_usd_per_mm2",
                   "interposer_bump_cost_usd_per_mm2", "bonding_yield", "substrate_bonding_yield",
                   "bridge_area_fraction", "nre_usd_per_mm2", "nre_fixed_usd", "max_interposer_mm2",
                   "supports_hbm", "d2d", "d2d_area_scale")
LINK_COLUMNS = ("bandwidth_per_dir_gbytes_s", "latency_us", "energy_pj_per_bit", "kind",
                "module_area_mm2", "module_shoreline_mm")

COST_COLUMNS = ("dies_per_wafer", "die_yield", "die_cost_usd", "package_cost_usd", "hbm_cost_usd",
                "nre_per_unit_usd", "manufacturing_cost_usd", "accelerator_cost_usd")
EXTRA_COLUMNS = ("sram_bytes", "tensor_macs", "frequency_hz", "compute_power_w", "memory_power_w",
                 "io_power_w", "max_memory_stacks", "d2d_area_mm2", "d2d_bandwidth_bytes_per_s",
                 "interposer_area_mm2", "package_yield", "hw_fits", "hw_infeasible_reason")


def _require_positive(cols, name, valid, allow_zero=False, integer=False):
    """ConfigError naming `name` if a row with a node has a negative (or zero) or fractional value."""
    if name not in cols:
        return
    v = np.asarray(cols[name], dtype=float)
    checked = valid & np.isfinite(v)
    low = checked & ((v < 0) if allow_zero else (v <= 0))
    frac = checked & (v != np.round(v)) if integer else np.zeros_like(checked)
    if low.any():
        raise ConfigError(f"{name}: got {v[low][0]:g}; give {'0 or more' if allow_zero else 'a positive number'}")
    if frac.any():
        raise ConfigError(f"{name}: got {v[frac][0]:g}; give a whole number")


def accelerator_columns(cols: dict) -> dict:
    """Technology columns -> accelerator columns (HARDWARE_COLUMNS), SRAM, cost and feasibility.

    Vectorized over rows; rows whose `node` is missing get NaN (so catalog systems can fill
    them). Bad names or numbers raise ConfigError naming the field; physically impossible
    designs give hw_fits=False with the reason in hw_infeasible_reason.
    """
    cols = dict(cols)
    if "node" not in cols:
        raise ConfigError("node: missing; give a logic node such as n5 or n3 (dse/catalog/nodes.csv)")
    A = tables.assumptions()
    n = tables._length(cols)

    node, _, valid = tables.gather(cols, "node", tech.NODE_COLUMNS, frame=tech.node_table())
    if "die_area_mm2" not in cols:
        raise ConfigError("die_area_mm2: missing; give the area of each compute die in mm2")
    area = as_float(cols, "die_area_mm2", np.nan)
    if (valid & ~np.isfinite(area)).any():
        raise ConfigError("die_area_mm2: missing for a row with a node; give the area of each compute die in mm2")
    for name, zero, integer in (("die_area_mm2", False, False), ("compute_dies", False, True),
                                ("memory_stacks", True, True), ("scaleup_domain", False, True),
                                ("power_w", False, False), ("frequency_hz", False, False),
                                ("wafer_cost_usd", True, False), ("defect_density_per_cm2", True, False),
                                ("yield_clustering", False, False), ("volume", False, False)):
        _require_positive(cols, name, valid, allow_zero=zero, integer=integer)
    if "gross_margin" in cols:
        gm = np.asarray(cols["gross_margin"], dtype=float)
        if (valid & np.isfinite(gm) & ((gm < 0) | (gm >= 1))).any():
            raise ConfigError("gross_margin: give a fraction in [0, 1)")

    dies = as_float(cols, "compute_dies", 1.0)
    pkg, pkg_name, _ = tables.gather(cols, "package", PACKAGE_COLUMNS, default="si-interposer")
    mem, mem_name, _ = tables.gather(cols, "memory", memory.MEMORY_COLUMNS, default="hbm3e")
    su, su_name, _ = tables.gather(cols, "scaleup", LINK_COLUMNS, default="nvlink4")
    so, so_name, _ = tables.gather(cols, "scaleout", LINK_COLUMNS, default="ib-ndr")
    _check_kind("scaleup", su["kind"], su_name, ("scale-up", "die-to-die"))
    _check_kind("scaleout", so["kind"], so_name, ("scale-out",))

    aspect, overhang = A["die_aspect_ratio"], A["stack_row_overhang"]
    organic = pkg["kind"] == "organic"
    hbm = mem["needs_interposer"].astype(float) > 0

    # Die-to-die PHYs (the package's D2D module) on joined edges.
    d2d_tab = tables.table("network.csv")
    d2d_name = np.where(pkg["d2d"] == None, "ucie", pkg["d2d"])  # noqa: E711 (object array)
    d2d_row = {c: np.asarray([d2d_tab.at[str(x), c] for x in ("ucie", "ucie-s")], dtype=float)
               for c in ("bandwidth_per_dir_gbytes_s", "module_area_mm2", "module_shoreline_mm", "energy_pj_per_bit")}
    pick = (d2d_name == "ucie-s").astype(int)
    d2d_area, d2d_bw, _ = network.d2d(
        area, dies, d2d_row["bandwidth_per_dir_gbytes_s"][pick] * 1e9, d2d_row["module_area_mm2"][pick],
        d2d_row["module_shoreline_mm"][pick], np.nan_to_num(pkg["d2d_area_scale"], nan=1.0),
        A["d2d_edge_fraction"], aspect)
    logic_area = area - d2d_area

    # Memory.
    max_stacks = memory.max_stacks(area, dies, mem["stack_edge_mm"], aspect, overhang)
    stacks = as_float(cols, "memory_stacks", np.nan)
    stacks = np.where(np.isnan(stacks), np.minimum(max_stacks, 4 * dies), stacks)
    mem_bw = stacks * memory.bandwidth_per_stack(mem)
    mem_cap = stacks * memory.capacity_per_stack(mem)
    p_mem = mem_bw * 8 * mem["energy_pj_per_bit"] * 1e-12

    # Links.
    is_ucie = su_name == "ucie"
    su_bw = np.where(is_ucie, _ucie_scaleup(area, aspect, A, d2d_row), su["bandwidth_per_dir_gbytes_s"] * 1e9)
    so_bw = so["bandwidth_per_dir_gbytes_s"] * 1e9
    p_io = (su_bw * 2 * 8 * np.nan_to_num(su["energy_pj_per_bit"])
            + d2d_bw * 2 * 8 * d2d_row["energy_pj_per_bit"][pick]) * 1e-12

    # Compute, clock and power.
    macs = node["macs_per_mm2"] * logic_area * dies
    f_nom = as_float(cols, "frequency_hz", np.nan)
    f_nom = np.where(np.isnan(f_nom), node["tensor_clock_hz"], f_nom)
    power_budget = as_float(cols, "power_w", np.nan)
    watts_per_hz = macs * node["energy_per_mac_j"]
    f_power = (power_budget - p_mem - p_io) / watts_per_hz
    freq = np.where(np.isnan(power_budget), f_nom, np.minimum(f_nom, np.maximum(f_power, 0.0)))
    p_compute = watts_per_hz * freq
    tdp = p_compute + p_mem + p_io
    peak_bf16 = 2.0 * macs * freq
    sram = tech.sram_area_fraction() * logic_area * dies * node["sram_bits_per_mm2"] / 8

    # Cost (Chiplet Actuary).
    wafer_d, scribe, edge = A["wafer_diameter_mm"], A["scribe_lane_mm"], A["edge_loss_mm"]
    wafer_cost = _override(cols, "wafer_cost_usd", node["wafer_cost_usd"])
    d0 = _override(cols, "defect_density_per_cm2", node["defect_density_per_cm2"])
    alpha = as_float(cols, "yield_clustering", A["yield_clustering"])
    dpw = chiplet.dies_per_wafer(area, wafer_d, scribe, edge)
    y = chiplet.die_yield(area, d0, alpha)
    raw_die = wafer_cost / dpw
    kgd = chiplet.known_good_die_cost(wafer_cost, dpw, y)
    mem_unit = mem["capacity_per_stack_gib"] * mem["price_usd_per_gb"]
    mem_on_pkg = np.where(hbm, stacks, 0.0)
    si = tables.table("packaging.csv").loc["si-interposer"]
    si_cost_per_mm2 = float(si["interposer_wafer_cost_usd"]) / (np.pi * (wafer_d / 2 - edge) ** 2)
    pc = chiplet.package_costs(
        organic=organic, n_dies=dies, die_area_mm2=area, die_raw_usd=raw_die, die_kgd_usd=kgd,
        mem_on_package=mem_on_pkg, mem_footprint_mm2=mem["stack_footprint_mm2"], mem_unit_usd=mem_unit,
        p=pkg, wafer_diameter_mm=wafer_d, scribe_mm=scribe, edge_mm=edge, si_cost_per_mm2=si_cost_per_mm2)
    hbm_cost = stacks * mem_unit
    volume = as_float(cols, "volume", A["volume"])
    nre = chiplet.chip_nre(node["nre_usd"], area, logic_area, dies > 1,
                           module_fraction=A["nre_module_fraction"], chip_fraction=A["nre_chip_fraction"],
                           reference_area_mm2=A["nre_reference_area_mm2"], d2d_area_mm2=A["d2d_nre_area_mm2"])
    nre_per_unit = (nre + pc["package_nre_usd"]) / volume
    manufacturing = dies * kgd + pc["package_cost_usd"] + hbm_cost + nre_per_unit
    margin = as_float(cols, "gross_margin", A["gross_margin"])
    price = manufacturing / (1.0 - margin)

    # Feasibility: physically impossible rows stay, flagged.
    checks = (
        (area > A["reticle_limit_mm2"], f"die above the {A['reticle_limit_mm2']:.0f} mm2 reticle limit"),
        (stacks > max_stacks, "more memory stacks than the die shoreline allows"),
        (hbm & organic & (stacks > 0), "HBM needs a 2.5D package (rdl, si-interposer, cowos-l, hybrid-bond)"),
        (~organic & (pc["interposer_area_mm2"] > np.nan_to_num(pkg["max_interposer_mm2"], nan=np.inf)),
         "interposer above the package's size limit"),
        (logic_area <= 0, "die too small for its die-to-die interfaces"),
        (~np.isnan(power_budget) & (f_power <= 0), "power budget below memory and I/O power"),
    )
    fits = np.ones(n, dtype=bool)
    reason = np.full(n, "", dtype=object)
    for mask, msg in checks:
        mask = np.asarray(mask, dtype=bool) & valid
        fits &= ~mask
        reason = np.where(mask, np.where(reason == "", msg, reason + "; " + msg), reason)

    out = {
        "peak_bf16_flops_per_s": peak_bf16,
        "peak_fp8_flops_per_s": peak_bf16 * A["fp8_per_bf16"],
        "peak_fp4_flops_per_s": peak_bf16 * A["fp4_per_bf16"],
        "memory_capacity_bytes": mem_cap,
        "memory_bandwidth_bytes_per_s": mem_bw,
        "scaleup_bandwidth_bytes_per_s": su_bw,
        "scaleup_domain": as_float(cols, "scaleup_domain", 8.0),
        "scaleup_latency_s": su["latency_us"] * 1e-6,
        "scaleout_bandwidth_bytes_per_s": so_bw,
        "scaleout_latency_s": so["latency_us"] * 1e-6,
        "tdp_w": tdp,
        "sram_bytes": sram,
        "tensor_macs": macs,
        "frequency_hz": freq,
        "compute_power_w": p_compute,
        "memory_power_w": p_mem,
        "io_power_w": p_io,
        "max_memory_stacks": max_stacks,
        "d2d_area_mm2": d2d_area,
        "d2d_bandwidth_bytes_per_s": d2d_bw,
        "interposer_area_mm2": pc["interposer_area_mm2"],
        "package_yield": pc["package_yield"],
        "dies_per_wafer": dpw,
        "die_yield": y,
        "die_cost_usd": kgd,
        "package_cost_usd": pc["package_cost_usd"],
        "hbm_cost_usd": hbm_cost,
        "nre_per_unit_usd": nre_per_unit,
        "manufacturing_cost_usd": manufacturing,
        "accelerator_cost_usd": price,
    }
    # Achievable fractions of peak: the catalog's "derived" generation (efficiency.csv).
    for k, v in catalog.efficiency_si().loc["derived"].items():
        out[k] = np.full(n, v)
    for k, v in out.items():
        v = np.asarray(v, dtype=float)
        out[k] = np.where(valid, v, np.nan)
    if "memory_stacks" not in cols:
        out["memory_stacks"] = np.where(valid, stacks, np.nan)
    out["hw_fits"] = fits
    out["hw_infeasible_reason"] = reason
    assert set(HARDWARE_COLUMNS) <= set(out)
    return out


def _override(cols, name, default):
    v = as_float(cols, name, np.nan)
    return np.where(np.isnan(v), default, v)


def _ucie_scaleup(area, aspect, A, d2d_row):
    """UCIe as the GPU's scale-up port: one long die edge of UCIe-A modules at the D2D edge fraction."""
    modules = np.floor(A["d2d_edge_fraction"] * memory.long_side_mm(area, aspect) / d2d_row["module_shoreline_mm"][0])
    return modules * d2d_row["bandwidth_per_dir_gbytes_s"][0] * 1e9


def _check_kind(field, kinds, names, allowed):
    """ConfigError if a link named in `field` is of the wrong kind (checked per distinct name)."""
    t = tables.table("network.csv")
    for name in pd.unique(names[names != None]):  # noqa: E711 (object array)
        kind = t.at[name, "kind"]
        if kind not in allowed:
            raise ConfigError(f"{field}: '{name}' is a {kind} link; give a "
                              f"{' or '.join(allowed)} network from dse/catalog/network.csv")
