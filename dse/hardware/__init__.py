"""dse.hardware: accelerators derived from technology, what they cost, and what a workload costs.

Public functions
----------------
evaluate_hardware(frame)      DataFrame or dict of arrays in, same kind out, with the columns
                              of accelerator_columns added. Vectorized: no loop over rows.
accelerator_columns(cols)     technology columns -> dict of arrays: every dse.schema.HARDWARE_COLUMNS
                              name, sram_bytes, cost columns (dies_per_wafer, die_yield, die_cost_usd,
                              package_cost_usd, hbm_cost_usd, nre_per_unit_usd, manufacturing_cost_usd,
                              accelerator_cost_usd), diagnostics (tensor_macs, frequency_hz,
                              compute_power_w, memory_power_w, io_power_w, max_memory_stacks,
                              d2d_area_mm2, d2d_bandwidth_bytes_per_s, interposer_area_mm2,
                              package_yield), hw_fits (bool) and hw_infeasible_reason (str).
memory_override(cols)         catalog `system` + `memory` (+ `memory_stacks`) -> new
                              memory_bandwidth_bytes_per_s, memory_capacity_bytes, memory_stacks.
nodes(), memories(), networks(), packages(), assumptions(), defaults()
                              the technology catalogs as DataFrames (sources beside numbers).

Inputs of accelerator_columns
-----------------------------
required  node (n12, n7, n5, n4, n4p, n3, n2, a16, a14, a10, a7; aliases such as "3nm", "4N"),
          die_area_mm2 (per compute die)
optional  compute_dies, package (organic, rdl, si-interposer, cowos-l, hybrid-bond),
          memory (hbm2, hbm2e, hbm3, hbm3e, hbm4, hbm4e, gddr6, gddr7, lpddr5x, ddr5),
          memory_stacks (a default per compute die, capped by the shoreline), scaleup (nvlink3..nvlink6, ucie),
          scaleup_domain, scaleout (ib-hdr, ib-ndr, ib-xdr, eth-400g, eth-800g, eth-1.6t),
          power_w (none: run at the node clock), frequency_hz (the node clock),
          wafer_cost_usd / defect_density_per_cm2 (node's), yield_clustering, volume, gross_margin
          Defaults: technology names in catalog/hardware_defaults.csv (si-interposer, hbm3e, nvlink4,
          ib-ndr), numbers in catalog/assumptions.csv (1 die, 4 stacks per die, domain of 8, ...).

How peak FLOP/s is derived (tech.py, calibrated once on A100/N7 and H100/4N, never per row):
MACs per mm2 scale with logic density from the anchor, the tensor clock with the foundry's
relative speed, the energy per MAC with its relative power; a power budget lowers the clock
until compute + memory + I/O power fits. Memory bandwidth = stacks x per-stack bandwidth as
shipped. Cost follows Chiplet Actuary (chiplet.py). Units are SI throughout; HBM capacity is GiB.

Catalogs: dse/catalog/nodes.csv, memory.csv, network.csv, packaging.csv (technology, each number
with its source; projections marked with their basis), calibration.csv (the anchor parts),
assumptions.csv (model constants and economic defaults), hardware_defaults.csv (default technology
names and named choices), organic_substrate.csv (Chiplet Actuary multi-chip substrate factors),
systems.csv (memory_stacks, price_usd). Names resolve through dse.catalog.resolve (one resolver).
"""
from __future__ import annotations

import pandas as pd

from dse.columns import pack, to_columns
from dse.hardware import tables
from dse.hardware.accelerator import COST_COLUMNS, accelerator_columns
from dse.hardware.memory import memory_override

__all__ = ["evaluate_hardware", "accelerator_columns", "memory_override",
           "nodes", "memories", "networks", "packages", "assumptions", "defaults", "COST_COLUMNS"]


def evaluate_hardware(frame):
    """Accelerator specs and cost per row from technology columns (see module docstring)."""
    cols, _ = to_columns(frame)
    return pack(frame, accelerator_columns(cols))


def nodes() -> pd.DataFrame:
    """Logic nodes (nodes.csv), sources beside numbers."""
    return tables.table("nodes.csv")


def memories() -> pd.DataFrame:
    """DRAM generations (memory.csv), sources beside numbers."""
    return tables.table("memory.csv")


def networks() -> pd.DataFrame:
    """Scale-up, scale-out and die-to-die links (network.csv), sources beside numbers."""
    return tables.table("network.csv")


def packages() -> pd.DataFrame:
    """Packages (packaging.csv), sources beside numbers."""
    return tables.table("packaging.csv")


def assumptions() -> dict[str, float]:
    """Model constants and numeric defaults (assumptions.csv)."""
    return dict(tables.assumptions())


def defaults() -> dict[str, str]:
    """Default technology names and named choices (hardware_defaults.csv)."""
    return dict(tables.defaults())
