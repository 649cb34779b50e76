"""Time of quantizing an (m x k) bf16 tensor, as fitted by `dse calibrate` (family "quantize").

Quantization is memory-bound: it reads the bf16 tensor and writes the narrow format and its scales.

    t = floor_s + (read_bytes * miss + write_bytes) / (bandwidth * memory_efficiency)
    miss = read_bytes^4 / (read_bytes^4 + cache_bytes^4)

Two kernels are measured (TensorRT-LLM per-tensor FP8, `<gpu>/quantize/trtllm/*`):
  compute_scale  the amax reduction of dynamic (current) scaling: reads the tensor (2 B/element),
                 writes nothing of size; its floor holds the reduction's extra kernel and sync.
  scale_matrix   the cast with a known scale: reads 2 B/element, writes 1 B/element.
`miss` is the share of the read that comes from HBM: the benchmark re-reads one tensor, which an L2
of about `cache_bytes` holds (fitted; 0 = no cache effect). A training-size activation is far larger
than L2, so the performance model passes `cache_bytes=0` and gets floor + bytes / (bw * efficiency).

Parameters and how they carry over to an accelerator derived from technology (no kernel data):
  floor_s            seconds per kernel (launch, the reduction's sync); carries over unchanged.
  memory_efficiency  fraction of catalog HBM bandwidth; carries over unchanged.
  cache_bytes        on-chip cache that serves a re-read tensor; scales with the part's L2 capacity
                     (irrelevant for training-size tensors).

Passes in training (NVIDIA Transformer Engine documentation, docs/features/low_precision_training/
in github.com/NVIDIA/TransformerEngine): each Linear layer's input, weight and output gradient is
needed in a rowwise usage (forward, dgrad) and a columnwise usage (wgrad, dgrad), Table 2 of
performance_considerations.rst. `TRAINING_QUANTIZATION` lists per format how many times the bf16
tensor is read and how many quantized copies are written:
  fp8 (per-tensor, current scaling): two reads, amax then cast ("Quantization is a memory-bound
      operation that requires reading the tensor twice", fp8_current_scaling.rst; delayed scaling
      reads once, fp8_delayed_scaling.rst). One copy serves both usages on Blackwell; Hopper needs a
      second, transposed copy (a fused cast-transpose writes both).
  fp8-block (1x128 activations and gradients): rowwise and columnwise blocks differ, "Both versions
      must be quantized separately from the high-precision source" (fp8_blockwise_scaling.rst):
      two quantized copies (one read when fused).
  mxfp8 (1x32): "rowwise and columnwise MXFP8 tensors are numerically different ... Both must be
      quantized independently" (mxfp8.rst): two copies.
  nvfp4 (1x16): "NVFP4 requires both rowwise and columnwise quantized tensors" (nvfp4.rst), the
      columnwise one after a random Hadamard transform for the wgrad GEMM: two copies.
  mxfp4: taken as nvfp4 (same rowwise/columnwise structure, 1x32 blocks).
"""
from __future__ import annotations

import numpy as np

from dse.perf.forms.gemm import FORMATS
from dse.catalog.precision import (CODE, ELEMENT_BYTES, TRAINING_QUANTIZE_BYTES, TRAINING_QUANTIZE_COPIES,
                                   TRAINING_QUANTIZE_READS)

CACHE_SHARPNESS = 4.0   # how abruptly a re-read tensor stops fitting in L2

# table -> (bytes read per element, bytes written per element) of the measured FP8 kernels
KERNELS = {"compute_scale": (2.0, 0.0), "scale_matrix": (2.0, 1.0)}

PARAMS = ("floor_s", "memory_efficiency", "cache_bytes")

# precision -> (reads of the bf16 tensor, quantized copies written) per tensor per training step
# (dse/catalog/precisions.csv, with sources); per-tensor fp8 counts the transposed copy Hopper needs.
TRAINING_QUANTIZATION = {name: (int(TRAINING_QUANTIZE_READS[c]), int(TRAINING_QUANTIZE_COPIES[c]))
                         for name, c in CODE.items()}


def quantize_time_s(m, k, bandwidth_bytes_per_s, floor_s, memory_efficiency, read_bytes_per_element,
                    write_bytes_per_element, cache_bytes=0.0):
    """Seconds of one memory-bound quantization kernel over an (m x k) tensor; empty tensors are free."""
    elements = np.asarray(m, float) * np.asarray(k, float)
    read = elements * read_bytes_per_element
    with np.errstate(divide="ignore", invalid="ignore"):
        miss = np.where(cache_bytes > 0, 1.0 / (1.0 + (cache_bytes / read) ** CACHE_SHARPNESS), 1.0)
    seconds = floor_s + (read * miss + elements * write_bytes_per_element) / (bandwidth_bytes_per_s * memory_efficiency)
    return np.where(elements > 0, seconds, 0.0)


def kernel_time_s(kernel: str, m, k, bandwidth_bytes_per_s, params: dict):
    """`quantize_time_s` for a measured kernel ("compute_scale" or "scale_matrix") with its fitted
    parameters (`Fit.params`, names prefixed by the kernel, e.g. `scale_matrix_floor_s`)."""
    read, write = KERNELS[kernel]
    return quantize_time_s(m, k, bandwidth_bytes_per_s, params[f"{kernel}_floor_s"],
                           params[f"{kernel}_memory_efficiency"], read, write, params[f"{kernel}_cache_bytes"])


def training_quantize_bytes_per_element(precision: str, transposed_copy: bool = False) -> float:
    """HBM bytes per element to quantize one bf16 tensor for training in `precision` (reads of the
    bf16 source plus every quantized copy with its scales); `transposed_copy` for per-tensor fp8 on
    parts whose GEMMs need a physically transposed FP8 operand (Hopper, Ada)."""
    code = CODE[precision]
    untransposed = precision == "fp8" and not transposed_copy  # the table counts Hopper's transposed copy
    return float(TRAINING_QUANTIZE_BYTES[code] - (ELEMENT_BYTES[code] if untransposed else 0.0))


def training_quantize_time_s(precision: str, elements, bandwidth_bytes_per_s, params: dict,
                             transposed_copy: bool = False):
    """Seconds to quantize a training-size tensor of `elements` for `precision`: one cast pass
    (read bf16, write every copy) priced as the scale_matrix kernel, plus for per-tensor fp8 the
    amax pass priced as the compute_scale kernel; no cache (training tensors exceed L2)."""
    elements = np.asarray(elements, float)
    reads, copies = TRAINING_QUANTIZATION[precision]
    if reads == 0:
        return 0.0 * elements
    if precision == "fp8" and not transposed_copy:
        copies -= 1
    seconds = quantize_time_s(elements, 1.0, bandwidth_bytes_per_s, params["scale_matrix_floor_s"],
                              params["scale_matrix_memory_efficiency"], 2.0, copies * FORMATS[precision][0])
    if reads == 2:  # current scaling: the amax reduction reads the tensor once more
        seconds = seconds + quantize_time_s(elements, 1.0, bandwidth_bytes_per_s, params["compute_scale_floor_s"],
                                            params["compute_scale_memory_efficiency"], 2.0, 0.0)
    return seconds
