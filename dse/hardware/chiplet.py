"""Chiplet cost model after Chiplet Actuary (Feng and Ma, DAC 2022), vectorized.

All functions take numpy arrays (or scalars) and broadcast. Areas in mm2, defect
densities per cm2, money in USD.

    dies per wafer  N = pi (d/2 - e)^2 / A' - pi (d - 2e) / sqrt(2 A'),  A' = (sqrt(A) + s)^2
    die yield       Y = (1 + D0 A / alpha)^-alpha                (A in cm2, negative binomial)
    known-good die  C_KGD = wafer cost / (N Y)
    2.5D package    interposer (its own wafer, yield y1), chips bonded with yield y2 = b^n,
                    package on substrate with yield y3; chip-last: failed bonds scrap the
                    interposer and the known-good chips on it (package.py, class Advanced)
    NRE             node NRE for a reference-size chip split into a per-mm2 module part,
                    a per-mm2 chip part and a fixed part; package NRE per mm2 + fixed

Every constant (wafer geometry, clustering, NRE split, organic-substrate factors) is an
argument or a catalog row (dse/catalog/assumptions.csv, organic_substrate.csv), never a
number in here.
"""
from __future__ import annotations

import numpy as np

from dse.hardware import tables

MM2_PER_CM2 = 100.0


def dies_per_wafer(area_mm2, *, wafer_diameter_mm, scribe_mm, edge_mm):
    """Gross dies per wafer (Chiplet Actuary chip.py N_die_total; fractional, as published)."""
    a = (np.sqrt(np.asarray(area_mm2, dtype=float)) + scribe_mm) ** 2
    return (np.pi * (wafer_diameter_mm / 2 - edge_mm) ** 2 / a
            - np.pi * (wafer_diameter_mm - 2 * edge_mm) / np.sqrt(2 * a))


def die_yield(area_mm2, defect_density_per_cm2, clustering):
    """Negative-binomial yield (1 + D0 A / alpha)^-alpha with A converted to cm2."""
    area_cm2 = np.asarray(area_mm2, dtype=float) / MM2_PER_CM2
    return (1.0 + np.asarray(defect_density_per_cm2) * area_cm2 / clustering) ** (-np.asarray(clustering, dtype=float))


def known_good_die_cost(wafer_cost_usd, dies, yield_):
    """Cost of one known-good die: wafer cost over good dies per wafer."""
    return np.asarray(wafer_cost_usd, dtype=float) / (dies * yield_)


def organic_substrate_factor(package_area_mm2, chips):
    """Chiplet Actuary OS cost/NRE multiplier: none (x 1) for one chip, else a step in package size.

    Multi-chip organic packages need more substrate layers for the chip-to-chip wiring; the
    steps (thresholds exclusive) are dse/catalog/organic_substrate.csv. A NaN area takes the
    first step, as the published `if/elif` chain does.
    """
    thresholds, factors = tables.organic_substrate_factors()
    multi_chip = np.full(np.shape(package_area_mm2), factors[0])
    for above_mm2, factor in zip(thresholds[1:], factors[1:]):
        multi_chip = np.where(package_area_mm2 > above_mm2, factor, multi_chip)
    return np.where(chips <= 1, 1.0, multi_chip)


def package_costs(*, organic, n_dies, die_area_mm2, die_raw_usd, die_kgd_usd,
                  mem_on_package, mem_footprint_mm2, mem_unit_usd, p, wafer_diameter_mm,
                  scribe_mm, edge_mm, si_cost_per_mm2):
    """Package cost per accelerator, vectorized over rows.

    organic: bool array (organic substrate, Chiplet Actuary OS) else a 2.5D interposer
    (Chiplet Actuary Advanced, chip-last). `p` maps packaging.csv columns to per-row arrays.
    Memory stacks on the package are bonded like chips (their price is their known-good cost).

    Returns dict of arrays: interposer_area_mm2, package_area_mm2, package_raw_usd (interposer +
    substrate + bumps), package_defect_usd (scrapped interposers/substrates),
    wasted_chips_usd (known-good dies and stacks lost in failed bonds), package_cost_usd (sum),
    package_yield, package_nre_usd.
    """
    n_dies = np.asarray(n_dies, dtype=float)
    mem_n = np.asarray(mem_on_package, dtype=float)
    chips = n_dies + mem_n
    die_total_area = n_dies * die_area_mm2
    silicon_area = die_total_area + mem_n * mem_footprint_mm2

    # Chips (compute dies at their known-good cost, memory at its price) and their bumps.
    chips_kgd = n_dies * die_kgd_usd + mem_n * mem_unit_usd
    bumps = silicon_area * np.nan_to_num(p["chip_bump_cost_usd_per_mm2"])

    # Organic substrate (OS): substrate = 4 x die area, yield = bonding^chips.
    os_area = p["substrate_area_scale"] * silicon_area
    os_factor = organic_substrate_factor(os_area, chips)
    os_raw = os_area * p["substrate_cost_usd_per_mm2"] * os_factor
    y_os = p["bonding_yield"] ** chips
    os_defect = os_raw * (1 / y_os - 1)
    os_wasted = (chips_kgd + bumps) * (1 / y_os - 1)
    os_nre = os_area * p["nre_usd_per_mm2"] * os_factor + p["nre_fixed_usd"]

    # Interposer (SI / RDL / CoWoS-L / hybrid bond), chip-last.
    int_area = np.nan_to_num(p["interposer_area_scale"], nan=1.0) * silicon_area
    pkg_area = int_area * p["substrate_area_scale"]
    n_int = dies_per_wafer(int_area, wafer_diameter_mm=wafer_diameter_mm, scribe_mm=scribe_mm, edge_mm=edge_mm)
    int_cost = (np.nan_to_num(p["interposer_wafer_cost_usd"]) / n_int
                + int_area * np.nan_to_num(p["interposer_bump_cost_usd_per_mm2"])
                + np.nan_to_num(p["bridge_area_fraction"]) * int_area * si_cost_per_mm2)
    sub_cost = pkg_area * p["substrate_cost_usd_per_mm2"]
    y1 = die_yield(int_area, np.nan_to_num(p["interposer_defect_density_per_cm2"]),
                   np.nan_to_num(p["interposer_clustering"], nan=1.0))
    y2 = p["bonding_yield"] ** chips
    y3 = p["substrate_bonding_yield"]
    int_defect = int_cost * (1 / (y1 * y2 * y3) - 1) + sub_cost * (1 / y3 - 1)
    int_wasted = (chips_kgd + bumps) * (1 / (y2 * y3) - 1)
    int_nre = int_area * p["nre_usd_per_mm2"] + p["nre_fixed_usd"] + pkg_area * p["substrate_cost_usd_per_mm2"]

    raw = np.where(organic, os_raw, int_cost + sub_cost) + bumps
    defect = np.where(organic, os_defect, int_defect)
    wasted = np.where(organic, os_wasted, int_wasted)
    return {
        "interposer_area_mm2": np.where(organic, 0.0, int_area),
        "package_area_mm2": np.where(organic, os_area, pkg_area),
        "package_raw_usd": raw,
        "package_defect_usd": defect,
        "wasted_chips_usd": wasted,
        "package_cost_usd": raw + defect + wasted,
        "package_yield": np.where(organic, y_os, y1 * y2 * y3),
        "package_nre_usd": np.where(organic, os_nre, int_nre),
    }


def chip_nre(node_nre_usd, die_area_mm2, logic_area_mm2, chiplet, *, module_fraction,
             chip_fraction, reference_area_mm2, d2d_area_mm2):
    """NRE of one compute-die design (all compute dies identical): modules + chip + D2D module."""
    per_mm2 = np.asarray(node_nre_usd, dtype=float) / reference_area_mm2
    module = module_fraction * per_mm2 * logic_area_mm2
    chip = chip_fraction * per_mm2 * die_area_mm2 + (1 - module_fraction - chip_fraction) * node_nre_usd
    d2d = np.where(chiplet, module_fraction * per_mm2 * d2d_area_mm2, 0.0)
    return module + chip + d2d
