"""Accelerator columns derived from technology: compute, memory, links, power and cost.

Inputs (one row per design point; only `node` and `die_area_mm2` are required):
    node            logic node (nodes.csv: n12, n7, n5, n4, n4p, n3, n2, a16, a14, a10, a7)
    die_area_mm2    area of each compute die, mm2 (> 0; above the reticle limit the row is infeasible)
    compute_dies    compute dies per package
    package         organic, rdl, si-interposer, cowos-l, hybrid-bond
    memory          hbm2 ... hbm4e, gddr6, gddr7, lpddr5x, ddr5
    memory_stacks   stacks (HBM) or devices (default: a few per compute die, capped by the shoreline)
    scaleup         nvlink3 ... nvlink6, ucie; scaleup_domain
    scaleout        ib-hdr, ib-ndr, ib-xdr, eth-400g, eth-800g, eth-1.6t
    power_w         optional power budget: the tensor clock drops until the part fits it
    frequency_hz    optional tensor clock (default: the node's clock, tech.py)
    wafer_cost_usd, defect_density_per_cm2, yield_clustering, volume, gross_margin: cost overrides
Defaults: technology names in dse/catalog/hardware_defaults.csv, numbers in assumptions.csv.

Model (all SI units):
    logic area    = die area - die-to-die PHY area
    MACs          = MACs per mm2(node) x logic area x compute dies
    clock         = min(frequency_hz or node clock, (power_w - memory - I/O power) / (MACs x energy per MAC))
    peak BF16     = 2 x MACs x clock; FP8 and FP4 as multiples of BF16 (assumptions.csv)
    TDP           = MACs x clock x energy per MAC + memory bandwidth x DRAM pJ/bit
                    + scale-up bandwidth both ways x link pJ/bit + D2D bandwidth both ways x pJ/bit
    memory        = stacks x per-stack bandwidth / capacity (memory.py)
    cost          = compute dies x known-good-die cost + package (interposer, substrate, bumps,
                    bonding losses) + memory + NRE / volume  (chiplet.py, Chiplet Actuary)
    price         = cost / (1 - gross_margin)  ->  accelerator_cost_usd

`accelerator_columns` is the driver; each stage below is a pure function over arrays.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from dse import catalog
from dse.columns import as_float
from dse.schema import HARDWARE_COLUMNS
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

GBYTE = 1e9                # network.csv bandwidths are GB/s
SECONDS_PER_US = 1e-6
FLOPS_PER_MAC = 2.0
BITS_PER_BYTE = 8
LINK_KINDS = {"scaleup": ("scale-up", "die-to-die"), "scaleout": ("scale-out",)}
# Numeric inputs checked for sign and integrality: (name, zero allowed, whole number).
def accelerator_columns(cols: dict) -> dict:
    """Technology columns -> accelerator columns (HARDWARE_COLUMNS), SRAM, cost and feasibility.

    Vectorized over rows; rows whose `node` is missing get NaN (so catalog systems can fill
    them). Bad names or numbers raise ConfigError naming the field; physically impossible
    designs give hw_fits=False with the reason in hw_infeasible_reason.
    """
    cols = dict(cols)
    A = tables.assumptions()
    node, area, valid = node_rows(cols)
    cols, out_of_domain, domain_reason = domain_rows(cols, valid)
    area = np.where(out_of_domain & ~(area > 0), 1.0, area)  # a blanked die area: any finite size
    dies = as_float(cols, "compute_dies", A["compute_dies"])
    t = technology_rows(cols)
    d2d = die_to_die(area, dies, t["package"], t["d2d"], A)
    mem = memory_system(cols, area, dies, t["memory"], A)
    io = links(area, t, d2d["d2d_bandwidth_bytes_per_s"], A)
    comp = compute(cols, node, d2d["logic_area_mm2"], dies, mem["memory_power_w"], io["io_power_w"])
    cost = costs(cols, node, area, d2d["logic_area_mm2"], dies, t["package"], t["memory"],
                 mem["memory_stacks"], A)
    fits, reason = feasibility(area, d2d["logic_area_mm2"], t["package"], t["memory"], mem, comp, cost,
                               valid, A)
    fits, reason = fits & ~out_of_domain, np.where(out_of_domain, domain_reason, reason)

    out = {
        "peak_bf16_flops_per_s": comp["peak_bf16_flops_per_s"],
        "peak_fp8_flops_per_s": comp["peak_bf16_flops_per_s"] * A["fp8_per_bf16"],
        "peak_fp4_flops_per_s": comp["peak_bf16_flops_per_s"] * A["fp4_per_bf16"],
        "fp8_tensor_cores": np.ones(len(valid)),            # a derived part has FP8 and FP4 peaks
        "block_scaled_tensor_cores": np.ones(len(valid)),
        "nvfp4_tensor_cores": np.ones(len(valid)),
        "memory_capacity_bytes": mem["memory_capacity_bytes"],
        "memory_bandwidth_bytes_per_s": mem["memory_bandwidth_bytes_per_s"],
        "scaleup_bandwidth_bytes_per_s": io["scaleup_bandwidth_bytes_per_s"],
        "scaleup_domain": as_float(cols, "scaleup_domain", A["scaleup_domain"]),
        "scaleup_latency_s": io["scaleup_latency_s"],
        "scaleout_bandwidth_bytes_per_s": io["scaleout_bandwidth_bytes_per_s"],
        "scaleout_latency_s": io["scaleout_latency_s"],
        "host_link_bandwidth_bytes_per_s": np.full(len(valid), A["host_link_gbps_per_dir"] * GBYTE),
        "tdp_w": comp["tdp_w"],
        "sram_bytes": comp["sram_bytes"],
        "tensor_macs": comp["tensor_macs"],
        "frequency_hz": comp["frequency_hz"],
        "compute_power_w": comp["compute_power_w"],
        "memory_power_w": mem["memory_power_w"],
        "io_power_w": io["io_power_w"],
        "max_memory_stacks": mem["max_memory_stacks"],
        "d2d_area_mm2": d2d["d2d_area_mm2"],
        "d2d_bandwidth_bytes_per_s": d2d["d2d_bandwidth_bytes_per_s"],
        **{k: cost[k] for k in ("interposer_area_mm2", "package_yield") + COST_COLUMNS},
    }
    # Achievable fractions of peak: the catalog's "derived" generation (efficiency.csv).
    n = len(valid)
    for k, v in catalog.efficiency_si().loc["derived"].items():
        out[k] = np.full(n, v)
    out = {k: np.where(valid, np.asarray(v, dtype=float), np.nan) for k, v in out.items()}
    if "memory_stacks" not in cols:
        out["memory_stacks"] = np.where(valid, mem["memory_stacks"], np.nan)
    out["hw_fits"] = fits
    out["hw_infeasible_reason"] = reason
    assert set(HARDWARE_COLUMNS) <= set(out)
    return out


# ---------------------------------------------------------------- validated inputs
def node_rows(cols: dict) -> tuple[dict, np.ndarray, np.ndarray]:
    """(node technology per row, die area mm2, valid mask): a row is evaluated iff it names a node.

    Rows without a node are left for catalog systems to fill; a row with a node must give its
    die area, since nothing else sets the size of the part."""
    if "node" not in cols:
        raise ConfigError("node: missing; give a logic node such as n5 or n3 (dse/catalog/nodes.csv)")
    node, _, valid = tables.gather(cols, "node", tech.NODE_COLUMNS, frame=tech.node_table())
    if "die_area_mm2" not in cols:
        raise ConfigError("die_area_mm2: missing; give the area of each compute die in mm2")
    area = as_float(cols, "die_area_mm2", np.nan)  # a row with a node but no area: unbuildable (domain_rows)
    return node, area, valid


def domain_rows(cols: dict, valid: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray]:
    """(columns with out-of-domain numbers blanked to their defaults, mask of such rows, their reason).

    A number no design can have (a negative stack count, an infinite defect density, a fractional
    die count) makes its row unbuildable, named by the column (dse.schema domains); the batch goes
    on, and the blanked value keeps the arithmetic of that row finite."""
    from dse import schema
    cols = dict(cols)
    bad_any = np.zeros(len(valid), dtype=bool)
    reason = np.full(len(valid), "", dtype=object)
    area = np.asarray(cols.get("die_area_mm2", np.full(len(valid), np.nan)), dtype=float)
    missing = valid & np.isnan(area)
    if missing.any():  # nothing else sets the size of the part
        reason = np.where(missing, "die_area_mm2: missing for a row with a node; give the area of each "
                                   "compute die", reason)
        bad_any |= missing
    for name, bad in schema.domain_violations(cols, "hardware"):
        bad = bad & valid
        if not bad.any():
            continue
        cols[name] = np.where(bad, np.nan, np.asarray(cols[name], dtype=float))
        reason = np.where(bad & (reason == ""), schema.domain_text(name), reason)
        bad_any |= bad
    return cols, bad_any, reason


def technology_rows(cols: dict) -> dict[str, dict]:
    """Per-row catalog values of package, memory, links and the package's die-to-die module.

    Each entry is the gathered columns plus "name" (catalog name per row). Missing columns take
    hardware_defaults.csv; a link of the wrong kind (an Ethernet as scale-up) is a ConfigError."""
    D = tables.defaults()
    t = {}
    for field, columns in (("package", PACKAGE_COLUMNS), ("memory", memory.MEMORY_COLUMNS),
                           ("scaleup", LINK_COLUMNS), ("scaleout", LINK_COLUMNS)):
        values, names, _ = tables.gather(cols, field, columns, default=D[field])
        t[field] = {**values, "name": names}
    for field, allowed in LINK_KINDS.items():
        _check_kind(field, t[field]["name"], allowed)
    # A package that names no D2D module (rows without a package) uses the default module.
    d2d_names = np.where(t["package"]["d2d"] == None, D["d2d_module"], t["package"]["d2d"])  # noqa: E711
    values, names, _ = tables.gather({"d2d": d2d_names}, "d2d", LINK_COLUMNS)
    t["d2d"] = {**values, "name": names}
    return t


def _check_kind(field, names, allowed):
    """ConfigError if a link named in `field` is of the wrong kind (checked per distinct name)."""
    t = tables.table("network.csv")
    for name in pd.unique(names[names != None]):  # noqa: E711 (object array)
        kind = t.at[name, "kind"]
        if kind not in allowed:
            raise ConfigError(f"{field}: '{name}' is a {kind} link; give a "
                              f"{' or '.join(allowed)} network from dse/catalog/network.csv")


# ---------------------------------------------------------------- die-to-die, memory, links
def die_to_die(area, dies, pkg: dict, d2d: dict, A: dict) -> dict:
    """D2D PHY area per die, package D2D bandwidth, and the logic area left for compute.

    Chiplets pay for their interconnect with compute area: that is the chiplet trade-off the
    cost model weighs against yield (network.d2d)."""
    d2d_area, d2d_bw, _ = network.d2d(
        area, dies, d2d["bandwidth_per_dir_gbytes_s"] * GBYTE, d2d["module_area_mm2"],
        d2d["module_shoreline_mm"], np.nan_to_num(pkg["d2d_area_scale"], nan=1.0),
        A["d2d_edge_fraction"], A["die_aspect_ratio"])
    return {"d2d_area_mm2": d2d_area, "d2d_bandwidth_bytes_per_s": d2d_bw, "logic_area_mm2": area - d2d_area}


def memory_system(cols: dict, area, dies, mem: dict, A: dict) -> dict:
    """Stacks (given, else a default per die capped by the shoreline), bandwidth, capacity, power.

    The shoreline cap is kept separately so that too many stacks is a flagged row, not an error."""
    max_stacks = memory.max_stacks(area, dies, mem["stack_edge_mm"], A["die_aspect_ratio"],
                                   A["stack_row_overhang"], A["memory_edges_per_die"])
    stacks = as_float(cols, "memory_stacks", np.nan)
    stacks = np.where(np.isnan(stacks), np.minimum(max_stacks, A["memory_stacks_per_compute_die"] * dies), stacks)
    bandwidth = stacks * memory.bandwidth_per_stack(mem)
    return {
        "max_memory_stacks": max_stacks,
        "memory_stacks": stacks,
        "memory_bandwidth_bytes_per_s": bandwidth,
        "memory_capacity_bytes": stacks * memory.capacity_per_stack(mem),
        "memory_power_w": memory.power_w(bandwidth, mem["energy_pj_per_bit"]),
    }


def links(area, t: dict, d2d_bandwidth, A: dict) -> dict:
    """Scale-up and scale-out bandwidth and latency per GPU, and the I/O power of all links.

    A scale-up port named as the D2D module (`ucie`) is built from those modules along one
    long die edge (ucie_scaleup_bandwidth); catalog links give their bandwidth per GPU."""
    su, so, d2d = t["scaleup"], t["scaleout"], t["d2d"]
    port = su["name"] == tables.defaults()["d2d_module"]
    su_bw = np.where(port, ucie_scaleup_bandwidth(area, A), su["bandwidth_per_dir_gbytes_s"] * GBYTE)
    io_power = network.link_power_w((su_bw, np.nan_to_num(su["energy_pj_per_bit"])),
                                    (d2d_bandwidth, d2d["energy_pj_per_bit"]))
    return {
        "scaleup_bandwidth_bytes_per_s": su_bw,
        "scaleup_latency_s": su["latency_us"] * SECONDS_PER_US,
        "scaleout_bandwidth_bytes_per_s": so["bandwidth_per_dir_gbytes_s"] * GBYTE,
        "scaleout_latency_s": so["latency_us"] * SECONDS_PER_US,
        "io_power_w": io_power,
    }


def ucie_scaleup_bandwidth(area, A: dict):
    """UCIe as the GPU's scale-up port: one long die edge of D2D modules at the D2D edge fraction."""
    module = tables.table("network.csv").loc[tables.defaults()["d2d_module"]]
    modules = np.floor(A["d2d_edge_fraction"] * memory.long_side_mm(area, A["die_aspect_ratio"])
                       / module["module_shoreline_mm"])
    return modules * module["bandwidth_per_dir_gbytes_s"] * GBYTE


# ---------------------------------------------------------------- compute, clock and power
def compute(cols: dict, node: dict, logic_area, dies, memory_power, io_power) -> dict:
    """Tensor MACs, clock, power and peak FLOP/s; a power budget lowers the clock.

    Memory and I/O power come first (they do not scale with the clock); what is left of
    `power_w` sets the highest clock the MACs can run at. `power_limited_clock_hz` <= 0 means
    the budget cannot even feed memory and links (a flagged row)."""
    macs = node["macs_per_mm2"] * logic_area * dies
    nominal = _override(cols, "frequency_hz", node["tensor_clock_hz"])
    budget = as_float(cols, "power_w", np.nan)
    watts_per_hz = macs * node["energy_per_mac_j"]
    power_limited = (budget - memory_power - io_power) / watts_per_hz
    freq = np.where(np.isnan(budget), nominal, np.minimum(nominal, np.maximum(power_limited, 0.0)))
    compute_power = watts_per_hz * freq
    return {
        "tensor_macs": macs,
        "frequency_hz": freq,
        "power_limited_clock_hz": np.where(np.isnan(budget), np.nan, power_limited),
        "compute_power_w": compute_power,
        "tdp_w": compute_power + memory_power + io_power,
        "peak_bf16_flops_per_s": FLOPS_PER_MAC * macs * freq,
        "sram_bytes": tech.sram_area_fraction() * logic_area * dies * node["sram_bits_per_mm2"] / BITS_PER_BYTE,
    }


def _override(cols, name, default):
    """Per-row input `name` where given, else `default` (a catalog value per row)."""
    v = as_float(cols, name, np.nan)
    return np.where(np.isnan(v), default, v)


# ---------------------------------------------------------------- cost (Chiplet Actuary)
def costs(cols: dict, node: dict, area, logic_area, dies, pkg: dict, mem: dict, stacks, A: dict) -> dict:
    """Known-good dies, package, memory and amortised NRE per accelerator, and its price.

    Yield falls with die area, so the cost of silicon grows faster than its area; the package
    pays for bonding losses of every chip on it (chiplet.py). price = cost / (1 - margin)."""
    wafer_d, scribe, edge = A["wafer_diameter_mm"], A["scribe_lane_mm"], A["edge_loss_mm"]
    wafer_cost = _override(cols, "wafer_cost_usd", node["wafer_cost_usd"])
    d0 = _override(cols, "defect_density_per_cm2", node["defect_density_per_cm2"])
    alpha = as_float(cols, "yield_clustering", A["yield_clustering"])
    dpw = chiplet.dies_per_wafer(area, wafer_diameter_mm=wafer_d, scribe_mm=scribe, edge_mm=edge)
    y = chiplet.die_yield(area, d0, alpha)
    kgd = chiplet.known_good_die_cost(wafer_cost, dpw, y)
    mem_unit = mem["capacity_per_stack_gib"] * mem["price_usd_per_gb"]
    pc = chiplet.package_costs(
        organic=pkg["kind"] == "organic", n_dies=dies, die_area_mm2=area, die_raw_usd=wafer_cost / dpw,
        die_kgd_usd=kgd, mem_on_package=np.where(_on_interposer(mem), stacks, 0.0),
        mem_footprint_mm2=mem["stack_footprint_mm2"], mem_unit_usd=mem_unit, p=pkg, wafer_diameter_mm=wafer_d,
        scribe_mm=scribe, edge_mm=edge, si_cost_per_mm2=bridge_silicon_usd_per_mm2(A))
    hbm_cost = stacks * mem_unit
    nre = chiplet.chip_nre(node["nre_usd"], area, logic_area, dies > 1,
                           module_fraction=A["nre_module_fraction"], chip_fraction=A["nre_chip_fraction"],
                           reference_area_mm2=A["nre_reference_area_mm2"], d2d_area_mm2=A["d2d_nre_area_mm2"])
    nre_per_unit = (nre + pc["package_nre_usd"]) / as_float(cols, "volume", A["volume"])
    manufacturing = dies * kgd + pc["package_cost_usd"] + hbm_cost + nre_per_unit
    margin = as_float(cols, "gross_margin", A["gross_margin"])
    return {
        "interposer_area_mm2": pc["interposer_area_mm2"],
        "package_yield": pc["package_yield"],
        "dies_per_wafer": dpw,
        "die_yield": y,
        "die_cost_usd": kgd,
        "package_cost_usd": pc["package_cost_usd"],
        "hbm_cost_usd": hbm_cost,
        "nre_per_unit_usd": nre_per_unit,
        "manufacturing_cost_usd": manufacturing,
        "accelerator_cost_usd": manufacturing / (1.0 - margin),
    }


def bridge_silicon_usd_per_mm2(A: dict) -> float:
    """Silicon bridges (CoWoS-L) are priced per mm2 as an interposer wafer over its usable area."""
    si = tables.table("packaging.csv").loc[tables.defaults()["bridge_silicon_package"]]
    wafer_d, edge = A["wafer_diameter_mm"], A["edge_loss_mm"]
    return float(si["interposer_wafer_cost_usd"]) / (np.pi * (wafer_d / 2 - edge) ** 2)


def _on_interposer(mem: dict) -> np.ndarray:
    """Memory that sits on the package (HBM stacks) rather than on the board (GDDR, DDR)."""
    return mem["needs_interposer"].astype(float) > 0


# ---------------------------------------------------------------- feasibility
def feasibility(area, logic_area, pkg: dict, mem: dict, mem_cols: dict, comp: dict, cost: dict,
                valid, A: dict) -> tuple[np.ndarray, np.ndarray]:
    """(hw_fits, hw_infeasible_reason): physically impossible rows stay in the batch, flagged.

    Sweeps keep every row; a reason names every rule the row breaks, joined by "; "."""
    stacks = mem_cols["memory_stacks"]
    no_hbm = pkg["supports_hbm"] == 0
    max_interposer = np.nan_to_num(pkg["max_interposer_mm2"], nan=np.inf)
    checks = (
        (area > A["reticle_limit_mm2"], f"die above the {A['reticle_limit_mm2']:.0f} mm2 reticle limit"),
        (stacks > mem_cols["max_memory_stacks"], "more memory stacks than the die shoreline allows"),
        (~(stacks > 0), "no DRAM (memory_stacks 0): a part without memory cannot hold a model"),
        (_on_interposer(mem) & no_hbm & (stacks > 0), f"HBM needs a 2.5D package ({hbm_packages()})"),
        (~(pkg["kind"] == "organic") & (cost["interposer_area_mm2"] > max_interposer),
         "interposer above the package's size limit"),
        (logic_area <= 0, "die too small for its die-to-die interfaces"),
        (comp["power_limited_clock_hz"] <= 0, "power budget below memory and I/O power"),
    )
    fits = np.ones(len(valid), dtype=bool)
    reason = np.full(len(valid), "", dtype=object)
    for mask, msg in checks:
        mask = np.asarray(mask, dtype=bool) & valid
        fits &= ~mask
        reason = np.where(mask, np.where(reason == "", msg, reason + "; " + msg), reason)
    return fits, reason


def hbm_packages() -> str:
    """Packages that carry HBM (packaging.csv supports_hbm), for the infeasibility message."""
    t = tables.table("packaging.csv")
    return ", ".join(t["name"][t["supports_hbm"].astype(bool)])
