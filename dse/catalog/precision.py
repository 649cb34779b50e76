"""Number formats as the performance model sees them (dse/catalog/precisions.csv, indexed by the
`precision` / `kv_precision` code): which peak a GEMM in the format runs at, its bytes per element
including block scales, and the HBM bytes its quantization kernels move per element of a 16-bit
tensor (serving: one row-wise copy before each GEMM; training: every read of the source and every
copy a Linear layer needs, Transformer Engine). The only place these facts are read."""
from __future__ import annotations

from functools import reduce

import numpy as np

from dse.catalog import _read

_TABLE = _read("precisions.csv")
NAMES = tuple(str(n) for n in _TABLE["name"])
CODE = {name: code for code, name in enumerate(NAMES)}
# every spelling (name or vendor alias, lower case) -> code: the precision enumeration of dse.schema
SPELLINGS = {spelling.strip().lower(): code
             for code, (name, more) in enumerate(zip(NAMES, _TABLE["aliases"].fillna("")))
             for spelling in [name, *str(more).split(";")] if spelling.strip()}
# Peak column index per format: 0 BF16, 1 FP8, 2 FP4 (a part without FP4 units lists its FP8 peak).
PEAK_INDEX = np.array([{"bf16": 0, "fp8": 1, "fp4": 2}[p] for p in _TABLE["peak"]], dtype=np.int8)
PEAK_COLUMN = {n: ("peak_bf16_flops_per_s", "peak_fp8_flops_per_s", "peak_fp4_flops_per_s")[i]
               for n, i in zip(NAMES, PEAK_INDEX)}
# The tensor-core instructions a training GEMM in the format needs (Transformer Engine refuses the
# recipe otherwise: quantization.py check_fp8_support needs sm89+, check_fp8_block_scaling_support
# sm90+, check_mxfp8_support and check_nvfp4_support sm100+, TransformerEngine@d0067d0).
# Per hardware flag column, the formats that need it (a part with NVFP4 units has block-scaled ones).
NEEDS = {f"{units}_tensor_cores": (_TABLE["tensor_cores"] == units).to_numpy()
         for units in ("fp8", "block_scaled", "nvfp4")}
ELEMENT_BYTES = _TABLE["element_bytes"].to_numpy(np.float32)          # GEMM operand / KV element, scales included
WEIGHT_BYTES = _TABLE["weight_bytes"].to_numpy(np.float32)            # a stored weight, its block scales included
SERVING_QUANTIZE_BYTES = _TABLE["serving_quantize_bytes"].to_numpy(np.float32)
TRAINING_QUANTIZE_READS = _TABLE["training_quantize_reads"].to_numpy(np.float32)
TRAINING_QUANTIZE_COPIES = _TABLE["training_quantize_copies"].to_numpy(np.float32)
# HBM bytes per element of a 16-bit GEMM input quantized for training: its reads plus its copies.
TRAINING_QUANTIZE_BYTES = 2.0 * TRAINING_QUANTIZE_READS + TRAINING_QUANTIZE_COPIES * ELEMENT_BYTES


def peak_flops_per_s(precision, hw: dict):
    """The catalog peak a GEMM in `precision` runs against (BF16, FP8 or FP4 tensor cores)."""
    index = PEAK_INDEX[precision]
    peaks = [hw["peak_bf16_flops_per_s"], hw["peak_fp8_flops_per_s"], hw["peak_fp4_flops_per_s"]]
    if np.ndim(index) == 1 and all(np.shape(p) == (1,) for p in peaks):   # one GPU: a table lookup
        return np.concatenate(peaks)[index]
    return np.choose(index, peaks)


def unsupported(precision, hw: dict):
    """True where the part's tensor cores cannot multiply in `precision` (FP8 on Ampere, MXFP8 or
    NVFP4 on Hopper): a framework refuses such a training run rather than emulating it."""
    return reduce(np.logical_or, (needs[precision] & (np.asarray(hw[flag]) == 0) for flag, needs in NEEDS.items()))
