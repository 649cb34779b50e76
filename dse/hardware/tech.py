"""Logic-node scaling: tensor MACs per mm2, tensor clock and energy per MAC for every node.

Calibrated once, from two real parts (dse/catalog/calibration.csv), never per row:

    MACs per mm2   = anchor MACs / anchor die area  x  logic density(node) / logic density(anchor node)
    tensor clock   = anchor clock                   x  relative speed(node) / relative speed(anchor node)
    energy per MAC = anchor core power / (anchor MACs x anchor clock)
                                                    x  relative power(node) / relative power(anchor node)

where the anchor core power is its TDP less its memory power (bandwidth x DRAM energy per bit)
and scale-up I/O power (both directions x link energy per bit). Nodes up to N7 use the A100 (N7)
anchor and N5-class and finer the H100 (4N) anchor (the `anchor` column of nodes.csv): the MAC
density jump between them is the Ampere -> Hopper tensor-core redesign, carried by every later node.
Relative speed is at iso-power and relative power at iso-speed (foundry claims, chained; nodes.csv).
The SRAM area fraction (L2 + L1/shared over die area at the node's SRAM macro density) comes
from one anchor, the A100 (`sram_anchor` in hardware_defaults.csv).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from dse.hardware import memory, network, tables

MIB_BITS = 2**20
GBYTE = 1e9           # network.csv bandwidths are GB/s


@lru_cache(maxsize=None)
def anchors() -> pd.DataFrame:
    """Calibration anchors with their derived core power and energy per MAC."""
    cal = tables.calibration().copy()
    mem = tables.table("memory.csv")
    net = tables.table("network.csv")
    core_w = []
    for _, a in cal.iterrows():
        m = mem.loc[tables.resolve("memory", a["memory"])]
        p_mem = memory.power_w(a["memory_stacks"] * float(memory.bandwidth_per_stack(m)), m["energy_pj_per_bit"])
        s = net.loc[tables.resolve("scaleup", a["scaleup"])]
        p_io = network.link_power_w((s["bandwidth_per_dir_gbytes_s"] * GBYTE, np.nan_to_num(s["energy_pj_per_bit"])))
        core_w.append(a["tdp_w"] - p_mem - p_io)
    cal["core_power_w"] = core_w
    cal["energy_per_mac_j"] = cal["core_power_w"] / (cal["tensor_macs_bf16_per_clock"] * cal["tensor_clock_hz"])
    cal["macs_per_mm2"] = cal["tensor_macs_bf16_per_clock"] / cal["die_area_mm2"]
    return cal


@lru_cache(maxsize=None)
def node_table() -> pd.DataFrame:
    """Per node: macs_per_mm2, tensor_clock_hz, energy_per_mac_j, sram_bits_per_mm2, wafer/yield/NRE."""
    nodes = tables.table("nodes.csv").copy()
    cal = anchors()
    out = pd.DataFrame(index=nodes.index)
    ref = {}
    for col in ("logic_density_mtr_mm2", "relative_speed", "relative_power"):
        ref[col] = nodes["anchor"].map(lambda a, c=col: nodes.at[tables.resolve("node", cal.at[a, "node"]), c])
    a = nodes["anchor"]
    out["macs_per_mm2"] = a.map(cal["macs_per_mm2"]) * nodes["logic_density_mtr_mm2"] / ref["logic_density_mtr_mm2"]
    out["tensor_clock_hz"] = a.map(cal["tensor_clock_hz"]) * nodes["relative_speed"] / ref["relative_speed"]
    out["energy_per_mac_j"] = a.map(cal["energy_per_mac_j"]) * nodes["relative_power"] / ref["relative_power"]
    out["sram_bits_per_mm2"] = nodes["sram_density_mib_mm2"] * MIB_BITS
    for col in ("wafer_cost_usd", "defect_density_per_cm2", "nre_usd", "logic_density_mtr_mm2"):
        out[col] = nodes[col].astype(float)
    return out


@lru_cache(maxsize=None)
def sram_area_fraction() -> float:
    """Fraction of die area that is L2 + L1/shared SRAM macros, from the `sram_anchor` part."""
    a = tables.calibration().loc[tables.defaults()["sram_anchor"]]
    node = node_table().loc[tables.resolve("node", a["node"])]
    return float(a["sram_mib"] * MIB_BITS * 8 / (a["die_area_mm2"] * node["sram_bits_per_mm2"]))


NODE_COLUMNS = ("macs_per_mm2", "tensor_clock_hz", "energy_per_mac_j", "sram_bits_per_mm2",
                "wafer_cost_usd", "defect_density_per_cm2", "nre_usd", "logic_density_mtr_mm2")
