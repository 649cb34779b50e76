"""DRAM generations: bandwidth, capacity and power per stack, and how many stacks a die can carry.

Bandwidth per stack = interface width x pin rate as operated in shipping accelerators
(memory.csv `accelerator_pin_rate_gbps`, derived from vendor totals over active stacks,
which is how catalog bandwidths are quoted; the JEDEC/vendor maximum is kept beside it).
Capacities are GiB per stack (an "80GB" H100 has 5 x 16 GiB), price is per marketed GB
(= GiB for HBM).

Shoreline: a die of area A is taken as a rectangle of the reticle's aspect ratio r
(long side sqrt(A r)); memory sits along the long sides (`memory_edges_per_die`, both, in
assumptions.csv; dies of a multi-die package are joined along their short sides), and a row
of stacks may overhang the die corners slightly:
    max stacks = compute_dies x edges x floor(overhang x long side / stack edge)
"""
from __future__ import annotations

import numpy as np

from dse import catalog
from dse.columns import as_float, categories
from dse.errors import ConfigError
from dse.hardware import tables

GIB = 2**30
BITS_PER_BYTE = 8
GBIT = 1e9            # pin rates are Gb/s
JOULES_PER_PJ = 1e-12
MEMORY_COLUMNS = ("interface_width_bits", "accelerator_pin_rate_gbps", "capacity_per_stack_gib",
                  "energy_pj_per_bit", "price_usd_per_gb", "stack_edge_mm", "stack_footprint_mm2",
                  "needs_interposer")


def bandwidth_per_stack(m: dict) -> np.ndarray:
    """Bytes/s per stack (or device) for gathered memory.csv columns."""
    return m["interface_width_bits"] * m["accelerator_pin_rate_gbps"] * GBIT / BITS_PER_BYTE


def capacity_per_stack(m: dict) -> np.ndarray:
    """Bytes per stack (or device): catalog capacities are GiB."""
    return m["capacity_per_stack_gib"] * GIB


def power_w(bandwidth_bytes_per_s, energy_pj_per_bit):
    """DRAM interface power at full bandwidth: bits per second x energy per bit."""
    return bandwidth_bytes_per_s * BITS_PER_BYTE * energy_pj_per_bit * JOULES_PER_PJ


def long_side_mm(die_area_mm2, aspect_ratio):
    """Long side of a die of the given area and aspect ratio (long / short)."""
    return np.sqrt(die_area_mm2 * aspect_ratio)


def max_stacks(die_area_mm2, compute_dies, stack_edge_mm, aspect_ratio, overhang, edges_per_die):
    """Most stacks (or devices) the compute dies' memory shoreline can carry."""
    per_edge = np.floor(overhang * long_side_mm(die_area_mm2, aspect_ratio) / stack_edge_mm)
    return compute_dies * edges_per_die * per_edge


def memory_override(cols: dict) -> dict:
    """A catalog `system` with another `memory` generation (and optional `memory_stacks`).

    Returns new `memory_bandwidth_bytes_per_s` and `memory_capacity_bytes`. The catalog
    numbers are scaled by the technology ratio new/old (stacks x per-stack bandwidth and
    capacity), so a system keeps its quoted values (usable capacity, binned pin rate) when the
    memory named is its own, and `memory_stacks` defaults to the system's sourced stack count.
    Rows with no `memory` keep the catalog values.
    """
    if "system" not in cols or "memory" not in cols:
        raise ConfigError("memory: memory_override needs `system` and `memory` columns")
    systems = catalog.systems()
    raw = tables._read("systems.csv")
    raw["name"] = raw["name"].astype(str)
    stacks_by_system = dict(zip(raw["name"], raw["memory_stacks"].astype(float)))
    sys_vals, sys_names, _ = _system_gather(cols, systems, stacks_by_system)
    new, _, new_valid = tables.gather(cols, "memory", MEMORY_COLUMNS)
    stacks = as_float(cols, "memory_stacks", np.nan)
    stacks = np.where(np.isnan(stacks), sys_vals["memory_stacks"], stacks)
    if (stacks < 0).any():
        raise ConfigError("memory_stacks: negative stack count; give 0 or more stacks")
    old_bw = sys_vals["old_stacks"] * sys_vals["old_bw_per_stack"]
    old_cap = sys_vals["old_stacks"] * sys_vals["old_cap_per_stack"]
    bw = sys_vals["memory_bandwidth_bytes_per_s"] * (stacks * bandwidth_per_stack(new)) / old_bw
    cap = sys_vals["memory_capacity_bytes"] * (stacks * capacity_per_stack(new)) / old_cap
    ok = new_valid & np.isfinite(bw) & np.isfinite(cap)
    return {
        "memory_bandwidth_bytes_per_s": np.where(ok, bw, sys_vals["memory_bandwidth_bytes_per_s"]),
        "memory_capacity_bytes": np.where(ok, cap, sys_vals["memory_capacity_bytes"]),
        "memory_stacks": np.where(ok, stacks, sys_vals["memory_stacks"]),
    }


def _system_gather(cols, systems, stacks_by_system):
    codes, uniques = categories(cols["system"])
    names = [catalog.resolve_system(u) for u in uniques]
    mem = tables.table("memory.csv")
    rows = []
    for nm in names:
        s = systems.loc[nm]
        m = mem.loc[tables.resolve("memory", s["memory"])]
        stacks = stacks_by_system.get(nm, np.nan)
        rows.append({
            "memory_bandwidth_bytes_per_s": float(s["memory_bandwidth_bytes_per_s"]),
            "memory_capacity_bytes": float(s["memory_capacity_bytes"]),
            "memory_stacks": stacks, "old_stacks": stacks,
            "old_bw_per_stack": float(bandwidth_per_stack(m)),
            "old_cap_per_stack": float(capacity_per_stack(m)),
        })
    out = {k: np.asarray([r[k] for r in rows], dtype=float)[codes] for k in rows[0]}
    return out, np.asarray(names, dtype=object)[codes], np.ones(len(codes), dtype=bool)
