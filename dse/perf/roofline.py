"""Time of one GEMM or one memory-bound kernel: the only place these formulas live.

A GEMM of shape (m x k) @ (k x n), repeated `count` times, takes the longer of its compute
time at an achievable fraction of peak and its operand traffic at an achievable fraction of
memory bandwidth (the roofline). The achievable compute fraction falls for small GEMMs:
tiles are under-filled and waves quantised when the smallest dimension is comparable to the
tile size. We model it with one saturating curve per GPU generation,

    efficiency = gemm_efficiency_max * d / (d + gemm_half_dim),   d = min(m, n, k),

so a GEMM whose smallest side equals `gemm_half_dim` runs at half the large-GEMM efficiency.
Both parameters are per generation (catalog/efficiency.csv), never per row.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse import catalog
from dse.columns import real

OUTPUT_BYTES = catalog.constant("gemm_output_bytes")


def gemm_peak_flops_per_s(precision, hw: dict):
    """Peak FLOP/s a GEMM at `precision` (code 0 bf16, 1 fp8, 2 fp4) can use. FP8/FP4 GEMMs reach
    a smaller fraction of their peak than BF16 ones (scaling epilogues, power limits): the
    per-generation `low_precision_efficiency` folds that in, and `fp4_efficiency` the further loss of
    block-scaled FP4 (NVFP4 scale handling, the layers and passes a recipe keeps in higher precision)."""
    low = real(hw["low_precision_efficiency"])
    return np.choose(precision, [real(hw["peak_bf16_flops_per_s"]), hw["peak_fp8_flops_per_s"] * low,
                                 hw["peak_fp4_flops_per_s"] * low * real(hw["fp4_efficiency"])])


def gemm_flops(m, n, k, count=1.0):
    return 2.0 * m * n * k * count


def gemm_bytes(m, n, k, operand_bytes, count=1.0):
    return ((m * k + k * n) * operand_bytes + m * n * OUTPUT_BYTES) * count


def gemm_efficiency(m, n, k, eff_max, half_dim):
    d = np.minimum(np.minimum(m, n), k)
    return eff_max * d / (d + half_dim)


def gemm_time_s(m, n, k, count, operand_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s,
                eff_max, half_dim, memory_efficiency):
    """Roofline time of `count` GEMMs (m x k) @ (k x n). Zero-sized GEMMs take zero time."""
    compute, memory = gemm_compute_memory_s(m, n, k, count, operand_bytes, peak_flops_per_s,
                                            memory_bandwidth_bytes_per_s, eff_max, half_dim, memory_efficiency)
    return np.maximum(compute, memory)


def gemm_is_compute_bound(m, n, k, operand_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s,
                          eff_max, half_dim, memory_efficiency):
    compute, memory = gemm_compute_memory_s(m, n, k, 1.0, operand_bytes, peak_flops_per_s,
                                            memory_bandwidth_bytes_per_s, eff_max, half_dim, memory_efficiency)
    return compute >= memory


def stream_time_s(bytes_moved, memory_bandwidth_bytes_per_s, memory_efficiency):
    """A memory-bound kernel (norm, softmax, activation, dropout, residual, optimizer)."""
    return bytes_moved / (memory_bandwidth_bytes_per_s * memory_efficiency)


def gemm_compute_memory_s(m, n, k, count, operand_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s,
                          eff_max, half_dim, memory_efficiency):
    """(compute time, memory time) of `count` GEMMs, the two sides of `gemm_time_s`'s roofline:
    for callers that report which side bounds each GEMM (inference breakdowns, roofline tables)."""
    with np.errstate(divide="ignore", invalid="ignore"):  # zero-sized GEMMs: 0/0, masked below
        compute = gemm_flops(m, n, k, count) / (peak_flops_per_s * gemm_efficiency(m, n, k, eff_max, half_dim))
    memory = gemm_bytes(m, n, k, operand_bytes, count) / (memory_bandwidth_bytes_per_s * memory_efficiency)
    live = m * n * k * count > 0
    return np.where(live, compute, 0.0), np.where(live, memory, 0.0)


@dataclass
class Rates:
    """Achievable rates of one GPU for one pass: peaks, bandwidth and efficiencies per row."""
    peak_gemm: object        # FLOP/s at the GEMM precision (gemm_peak_flops_per_s)
    peak_bf16: object
    bandwidth: object        # memory bandwidth, bytes/s
    memory_efficiency: object
    gemm_efficiency_max: object
    gemm_half_dim: object
    attention_efficiency: object

    @classmethod
    def of(cls, hw: dict, precision, memory_efficiency=None, peak_gemm=None) -> "Rates":
        peak_gemm = gemm_peak_flops_per_s(precision, hw) if peak_gemm is None else peak_gemm
        return cls(peak_gemm, hw["peak_bf16_flops_per_s"],
                   hw["memory_bandwidth_bytes_per_s"],
                   hw["memory_efficiency"] if memory_efficiency is None else memory_efficiency,
                   hw["gemm_efficiency_max"], hw["gemm_half_dim"], hw["attention_efficiency"])


def op_compute_memory_s(op, r: Rates):
    """(compute seconds, memory seconds) of one op of the inventory (dse.perf.layer), unweighted."""
    if op.timing == "gemm":
        peak = r.peak_gemm if op.low_precision else r.peak_bf16
        return gemm_compute_memory_s(op.m, op.n, op.k, op.count, op.operand_bytes, peak, r.bandwidth,
                                     r.gemm_efficiency_max, r.gemm_half_dim, r.memory_efficiency)
    memory = stream_time_s(op.bytes, r.bandwidth, r.memory_efficiency)
    if op.timing == "stream":
        return 0.0, memory
    return op.flops / (r.peak_bf16 * r.attention_efficiency), memory


def op_time_s(op, r: Rates):
    """Roofline time of one op: the longer of its compute and memory sides."""
    compute, memory = op_compute_memory_s(op, r)
    return np.maximum(compute, memory)


def op_flops_bytes(op):
    """(FLOPs, bytes) of one op (for roofline tables)."""
    if op.timing == "gemm":
        live = op.m * op.n * op.k * op.count > 0
        return (np.where(live, gemm_flops(op.m, op.n, op.k, op.count), 0.0),
                np.where(live, gemm_bytes(op.m, op.n, op.k, op.operand_bytes, op.count), 0.0))
    return op.flops, op.bytes
