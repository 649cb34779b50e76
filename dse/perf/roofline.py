"""Time of one op of the inventory: the only place GEMM and memory-bound kernel times are formed.

A GEMM (m x k) @ (k x n), repeated `count` times, takes the fitted GEMM form of the row's GPU and
number format (dse.perf.forms.gemm, fitted by `dse calibrate` from measured kernels): tensor-core
time with tile and wave quantization and a pipeline ramp, operand traffic at the fitted fraction of
HBM bandwidth, the two combined in quadrature (neither hides the other fully near the ridge), plus
a fixed floor per GEMM. The parameters are per GPU and format (`GemmParams`, model columns
`gemm_<parameter>_<format>`), never per row. Memory-bound kernels (norms, activations, optimizer)
stream their bytes at `memory_efficiency` of HBM bandwidth; fused attention is the roofline of its
FLOPs at `attention_efficiency` of the BF16 peak and its bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse import catalog
from dse.catalog.fitted import GEMM_PARAMS, gemm_column
from dse.perf.forms import gemm as G
from dse.perf.precision import CODE, NAMES, peak_flops_per_s

OUTPUT_BYTES = catalog.constant("gemm_output_bytes")


def gemm_peak_flops_per_s(precision, hw: dict):
    """Catalog peak FLOP/s a GEMM in number format `precision` (dse.perf.precision) runs against;
    the fraction of it a GEMM reaches is the fitted `gemm_efficiency_max_<format>` and the shape terms."""
    return peak_flops_per_s(precision, hw)


@dataclass
class GemmParams:
    """Fitted GEMM time-model parameters of one number format, per row (dse.perf.forms.gemm)."""
    efficiency_max: object
    tiles_per_wave: object
    k_ramp: object
    split_k_min_depth: object
    floor_s: object
    memory_efficiency: object

    @classmethod
    def of(cls, hw: dict, precision) -> "GemmParams":
        """The parameters of each row's format (codes of dse.perf.precision)."""
        codes = np.asarray(precision)
        if codes.ndim == 0 or (codes.size and np.all(codes == codes.flat[0])):
            name = NAMES[int(codes.flat[0]) if codes.size else 0]
            return cls(*(hw[gemm_column(p, name)] for p in GEMM_PARAMS))
        return cls(*(np.choose(codes, [hw[gemm_column(p, f)] for f in NAMES]) for p in GEMM_PARAMS))


def gemm_flops(m, n, k, count=1.0):
    return 2.0 * m * n * k * count


def gemm_bytes(m, n, k, operand_bytes, count=1.0):
    return ((m * k + k * n) * operand_bytes + m * n * OUTPUT_BYTES) * count


def stream_time_s(bytes_moved, memory_bandwidth_bytes_per_s, memory_efficiency):
    """A memory-bound kernel (norm, softmax, activation, dropout, residual, optimizer)."""
    return bytes_moved / (memory_bandwidth_bytes_per_s * memory_efficiency)


def gemm_compute_memory_s(m, n, k, count, operand_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s,
                          p: GemmParams):
    """(compute time, memory time) of a batched GEMM of `count` products (m x k) @ (k x n) in one
    kernel (attention heads, grouped experts share its waves): the two sides `op_time_s` combines,
    for callers that report which side bounds each GEMM (inference breakdowns, roofline tables)."""
    compute = G.gemm_compute_s(m, n, k, peak_flops_per_s, p.efficiency_max, p.tiles_per_wave, p.k_ramp,
                               p.split_k_min_depth, batch=count)
    memory = G.gemm_memory_s(m, n, k, memory_bandwidth_bytes_per_s, p.memory_efficiency, operand_bytes,
                             OUTPUT_BYTES) * count
    live = m * n * k * count > 0
    return np.where(live, compute, 0.0), np.where(live, memory, 0.0)


def gemm_time_s(m, n, k, count, operand_bytes, peak_flops_per_s, memory_bandwidth_bytes_per_s, p: GemmParams):
    """Seconds of a batched GEMM of `count` products: one floor + quadrature of the two sides."""
    compute, memory = gemm_compute_memory_s(m, n, k, count, operand_bytes, peak_flops_per_s,
                                            memory_bandwidth_bytes_per_s, p)
    live = m * n * k * count > 0
    return np.where(live, p.floor_s + np.hypot(compute, memory), 0.0)


@dataclass
class Rates:
    """Achievable rates of one GPU for one pass: peaks, bandwidth and fitted parameters per row."""
    peak_gemm: object        # FLOP/s peak of the GEMM format (gemm_peak_flops_per_s)
    peak_bf16: object
    bandwidth: object        # memory bandwidth, bytes/s
    memory_efficiency: object  # memory-bound kernels (streams)
    gemm: GemmParams         # GEMMs in the pass's format
    gemm_bf16: GemmParams    # GEMMs a recipe keeps in BF16
    attention_efficiency: object
    clock: object = 1.0      # sustained_clock_fraction: tensor work runs at this share of the fitted speed

    @classmethod
    def of(cls, hw: dict, precision, memory_efficiency=None, peak_gemm=None) -> "Rates":
        peak_gemm = gemm_peak_flops_per_s(precision, hw) if peak_gemm is None else peak_gemm
        return cls(peak_gemm, hw["peak_bf16_flops_per_s"], hw["memory_bandwidth_bytes_per_s"],
                   hw["memory_efficiency"] if memory_efficiency is None else memory_efficiency,
                   GemmParams.of(hw, precision), GemmParams.of(hw, CODE["bf16"]), hw["attention_efficiency"],
                   hw["sustained_clock_fraction"])


def op_compute_memory_s(op, r: Rates):
    """(compute seconds, memory seconds) of one op of the inventory (dse.perf.layer), unweighted.
    Tensor work runs at `r.clock` of the speed the kernel fits measured: a long training or serving
    run holds its power-limited clock, the short kernel benchmarks behind the fits a burst above it."""
    if op.timing == "gemm":
        peak, p = (r.peak_gemm, r.gemm) if op.low_precision else (r.peak_bf16, r.gemm_bf16)
        return gemm_compute_memory_s(op.m, op.n, op.k, op.count, op.operand_bytes, peak * r.clock, r.bandwidth, p)
    memory = stream_time_s(op.bytes, r.bandwidth, r.memory_efficiency)
    if op.timing == "stream":
        return 0.0, memory
    return op.flops / (r.peak_bf16 * r.clock * r.attention_efficiency), memory


def op_time_s(op, r: Rates):
    """Seconds of one op: a GEMM's fitted form (floor + quadrature), else the longer side."""
    compute, memory = op_compute_memory_s(op, r)
    if op.timing == "gemm":
        p = r.gemm if op.low_precision else r.gemm_bf16
        live = op.m * op.n * op.k * op.count > 0
        return np.where(live, p.floor_s + np.hypot(compute, memory), 0.0)
    return np.maximum(compute, memory)


def op_flops_bytes(op):
    """(FLOPs, bytes) of one op (for roofline tables)."""
    if op.timing == "gemm":
        live = op.m * op.n * op.k * op.count > 0
        return (np.where(live, gemm_flops(op.m, op.n, op.k, op.count), 0.0),
                np.where(live, gemm_bytes(op.m, op.n, op.k, op.operand_bytes, op.count), 0.0))
    return op.flops, op.bytes
