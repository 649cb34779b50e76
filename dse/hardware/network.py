"""Scale-up, scale-out and die-to-die links.

Scale-up and scale-out bandwidths are per GPU and per direction (network.csv). Die-to-die:
compute dies of one package are joined along their short sides by UCIe-class modules that
take `d2d_edge_fraction` of each joined edge (calibrated on B200's 10 TB/s NV-HBI); a chain of
n dies has n-1 links and 2(n-1)/n joined edges per die on average. A hybrid-bonded package
scales the PHY area down (packaging.csv `d2d_area_scale`).
"""
from __future__ import annotations

import numpy as np

BITS_PER_BYTE = 8
DIRECTIONS = 2        # catalog link bandwidths are per direction; both directions draw power
JOULES_PER_PJ = 1e-12


def short_side_mm(die_area_mm2, aspect_ratio):
    """Short side of a die of the given area and aspect ratio (long / short)."""
    return np.sqrt(die_area_mm2 / aspect_ratio)


def link_power_w(*links):
    """I/O power of links given as (bandwidth per direction bytes/s, energy pJ/bit) pairs, both
    directions at full bandwidth. One formula for derived parts and calibration anchors."""
    return sum(bw * DIRECTIONS * BITS_PER_BYTE * pj for bw, pj in links) * JOULES_PER_PJ


def d2d(die_area_mm2, compute_dies, module_bw, module_area, module_shoreline, area_scale,
        edge_fraction, aspect_ratio):
    """Die-to-die links: (PHY area per die mm2, total package D2D bandwidth bytes/s per direction)."""
    modules_per_edge = np.floor(edge_fraction * short_side_mm(die_area_mm2, aspect_ratio) / module_shoreline)
    modules_per_edge = np.maximum(modules_per_edge, 1.0)
    links = np.maximum(compute_dies - 1, 0)
    edges_per_die = np.where(compute_dies > 1, 2 * links / np.maximum(compute_dies, 1), 0.0)
    area = edges_per_die * modules_per_edge * module_area * area_scale
    bandwidth = links * modules_per_edge * module_bw
    return area, bandwidth, modules_per_edge
