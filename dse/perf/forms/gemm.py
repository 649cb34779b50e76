"""Time of one GEMM (m x k) @ (k x n) = 2mnk FLOPs, as fitted by `dse calibrate` (family "gemm").

    t = floor_s + sqrt(compute_s^2 + memory_s^2) + quantize_s        (0 for an empty GEMM)

compute_s -- tensor-core time with tile and wave quantization. The output is cut into tiles of
    TILE_M x TILE_N elements (64 x 128, a Hopper/Blackwell warpgroup tile); the GPU runs
    `tiles_per_wave` of them at once, each at `efficiency_max` of its share of the format's peak.
    A GEMM with fewer tiles than that splits k across idle SMs (split-K), but no split is shorter
    than `split_k_min_depth`; every tile also pays a pipeline ramp of `k_ramp` k-elements
    (prologue fill, epilogue). So with splits = clip(k / split_k_min_depth, 1, tiles_per_wave / tiles)
    and waves = max(1, tiles * splits / tiles_per_wave):
        compute_s = waves * 2 TILE_M TILE_N (k / splits + k_ramp) * tiles_per_wave / (peak * efficiency_max)
    Large GEMMs tend to 2mnk (1 + k_ramp/k) / (peak * efficiency_max) (tile padding aside); a GEMM
    with few output tiles is bounded by the time of one tile's k-loop (idle SMs). The wave count is
    not rounded up: libraries pick tile shapes and stream-K to hide the last-wave tail, and the
    fitted `tiles_per_wave` absorbs the rest (it is an effective count, not the SM count).
memory_s -- operand and output traffic at `memory_efficiency` of the catalog HBM bandwidth:
    ((m k + k n) operand_bytes + m n output_bytes) / (bandwidth * memory_efficiency); operand
    bytes include block-scale bytes (FORMATS).
quantize_s -- a low-precision GEMM first quantizes its bf16 activation (m x k): read bf16, write
    the narrow format and its scales (per-tensor fp8 also reads once more for the amax), at
    `quantize_memory_efficiency` of HBM bandwidth. Zero for bf16. The measured kernels
    (TensorRT-LLM `Linear.forward`) include this pass; a caller that times quantization separately
    (`dse.perf.forms.quantize`) passes `quantize_bytes_per_element=0`.
The compute/memory corner is rounded (the quadrature sum): near the ridge neither side hides the
other completely.

Parameters (per GPU and precision) and how each carries over to an accelerator derived from
technology, with no kernel data:
  efficiency_max             fraction of the catalog peak; carries over unchanged (same kernels).
  tiles_per_wave             64x128 output tiles in flight; scales with the SM count (x SMs / SMs
                             of the reference part), i.e. with peak at equal per-SM throughput.
  k_ramp                     k-elements of pipeline ramp per tile; carries over unchanged (pipeline
                             depth and tile shape are the kernel's, not the process node's).
  split_k_min_depth          shortest k per split; carries over unchanged (large = no split-K).
  floor_s                    fixed seconds per GEMM (launch, sync); carries over unchanged.
  memory_efficiency          fraction of HBM bandwidth for operands; carries over unchanged.
  quantize_memory_efficiency fraction of HBM bandwidth for the quantization pass; unchanged.
"""
from __future__ import annotations

import numpy as np

from dse.catalog.precision import CODE, ELEMENT_BYTES, PEAK_COLUMN, SERVING_QUANTIZE_BYTES  # noqa: F401

TILE_M = 64.0      # output tile rows of one CTA (warpgroup MMA M)
TILE_N = 128.0     # output tile columns
OUTPUT_BYTES = 2.0  # GEMM output written in bf16

# dse precision -> (operand bytes per element incl. block scales, activation-quantization pass
# bytes per activation element before a serving GEMM): dse/catalog/precisions.csv, with sources.
FORMATS = {name: (float(ELEMENT_BYTES[code]), float(SERVING_QUANTIZE_BYTES[code])) for name, code in CODE.items()}

PARAMS = ("efficiency_max", "tiles_per_wave", "k_ramp", "split_k_min_depth", "floor_s",
          "memory_efficiency", "quantize_memory_efficiency")


def gemm_compute_s(m, n, k, peak_flops_per_s, efficiency_max, tiles_per_wave, k_ramp, split_k_min_depth, batch=1.0):
    """Tensor-core seconds of one GEMM, or of a batched GEMM of `batch` independent (m x k) @ (k x n)
    products in one kernel (attention heads, grouped experts): their tiles share the waves. Tiles in
    waves, split-K when tiles are few, a k ramp:
        waves x tile time = max(tiles x splits, tiles_per_wave) x 2 TILE_M TILE_N (k / splits + k_ramp)
                            / (peak x efficiency_max)
    (one wave at least; a full wave of tile_per_wave tiles runs at efficiency_max of the peak)."""
    tiles = np.ceil(m / TILE_M) * np.ceil(n / TILE_N) * batch
    with np.errstate(divide="ignore", invalid="ignore"):
        splits = np.clip(k / split_k_min_depth, 1.0, np.maximum(tiles_per_wave / tiles, 1.0))
        seconds = (np.maximum(tiles * splits, tiles_per_wave) * (k / splits + k_ramp)
                   * (2.0 * TILE_M * TILE_N / (peak_flops_per_s * efficiency_max)))
    live = np.asarray(tiles * k > 0)
    return seconds if live.all() else np.where(live, seconds, 0.0)


def gemm_memory_s(m, n, k, bandwidth_bytes_per_s, memory_efficiency, operand_bytes, output_bytes=OUTPUT_BYTES):
    """HBM seconds of one GEMM's operands and output."""
    m, n, k = (np.asarray(x) for x in (m, n, k))
    return ((m * k + k * n) * operand_bytes + m * n * output_bytes) / (bandwidth_bytes_per_s * memory_efficiency)


def quantize_pass_s(m, k, bandwidth_bytes_per_s, quantize_memory_efficiency, quantize_bytes_per_element):
    """HBM seconds of quantizing the (m x k) bf16 activation before a low-precision GEMM."""
    if not np.any(quantize_bytes_per_element):
        return 0.0 * np.asarray(m, float)
    m, k = np.asarray(m, float), np.asarray(k, float)
    return m * k * quantize_bytes_per_element / (bandwidth_bytes_per_s * quantize_memory_efficiency)


def combined_s(floor_s, compute_s, memory_s):
    """A GEMM's time from its two sides: a fixed floor plus their quadrature sum (near the ridge
    neither hides the other completely)."""
    return floor_s + np.hypot(compute_s, memory_s)


def gemm_time_s(m, n, k, peak_flops_per_s, bandwidth_bytes_per_s, *, efficiency_max, tiles_per_wave,
                k_ramp, split_k_min_depth, floor_s, memory_efficiency, operand_bytes,
                quantize_bytes_per_element=0.0, quantize_memory_efficiency=1.0,
                output_bytes=OUTPUT_BYTES):
    """Seconds of one GEMM (m x k) @ (k x n); arrays broadcast. An empty GEMM takes zero time."""
    compute = gemm_compute_s(m, n, k, peak_flops_per_s, efficiency_max, tiles_per_wave, k_ramp, split_k_min_depth)
    memory = gemm_memory_s(m, n, k, bandwidth_bytes_per_s, memory_efficiency, operand_bytes, output_bytes)
    quant = quantize_pass_s(m, k, bandwidth_bytes_per_s, quantize_memory_efficiency, quantize_bytes_per_element)
    live = np.asarray(m, float) * np.asarray(n, float) * np.asarray(k, float) > 0
    return np.where(live, combined_s(floor_s, compute, memory) + quant, 0.0)


def gemm_time_for(precision: str, m, n, k, peak_flops_per_s, bandwidth_bytes_per_s, params: dict,
                  include_quantize=True):
    """`gemm_time_s` with a precision's bytes (FORMATS) and a fitted parameter dict (`Fit.params`)."""
    operand_bytes, quantize_bytes = FORMATS[precision]
    return gemm_time_s(m, n, k, peak_flops_per_s, bandwidth_bytes_per_s,
                       efficiency_max=params["efficiency_max"], tiles_per_wave=params["tiles_per_wave"],
                       k_ramp=params["k_ramp"], split_k_min_depth=params["split_k_min_depth"],
                       floor_s=params["floor_s"], memory_efficiency=params["memory_efficiency"],
                       operand_bytes=operand_bytes,
                       quantize_bytes_per_element=quantize_bytes if include_quantize else 0.0,
                       quantize_memory_efficiency=params.get("quantize_memory_efficiency", 1.0))


def achieved_fraction_of_peak(precision: str, m, n, k, peak_flops_per_s, bandwidth_bytes_per_s, params: dict,
                              include_quantize=True):
    """2mnk / (time x peak): the fraction of the format's peak the form predicts for a shape."""
    t = gemm_time_for(precision, m, n, k, peak_flops_per_s, bandwidth_bytes_per_s, params, include_quantize)
    return 2.0 * np.asarray(m, float) * n * k / (t * peak_flops_per_s)
