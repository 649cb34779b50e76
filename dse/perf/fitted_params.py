"""Fitted parameters per row, read from the hardware columns when first used.

A block of rows carries one value per row for each fitted column (`gemm_<parameter>_<format>`,
`moe_<parameter>_<format>`, ...). The op times (dse.perf.roofline) read only the parameters and
formats a block uses; `rows_of` restricts them to a sub-block (dse.perf.layer.rows_of) without
reading columns nobody asked for. `_ServingParams` is the one place where a serving engine's GEMMs
differ from what the kernel tables timed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dse.catalog.fitted import GEMM_PARAMS, gemm_column
from dse.catalog.precision import CODE, NAMES


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
    def of(cls, hw: dict, precision, serving=False) -> "_FormatGemmParams":
        """The parameters of each row's format (codes of dse.catalog.precision), as attributes like
        a GemmParams' but each read from the hardware columns when first used; `serving`: as a
        serving engine runs the GEMMs (_ServingParams: static FP8 scales, autotuned NVFP4 tactics)."""
        return _FormatGemmParams((_ServingParams if serving else _LazyParams)(hw, precision, "gemm"))


class _FormatGemmParams:
    """GemmParams of each row's format: a per_format family's parameters as attributes."""

    def __init__(self, params: dict):
        self._params = params

    def __getattr__(self, name):
        if name not in GEMM_PARAMS:
            raise AttributeError(name)
        return self._params[name]

    def rows_of(self, idx, n) -> "_FormatGemmParams":
        """The same parameters restricted to rows `idx` (dse.perf.layer.rows_of)."""
        return _FormatGemmParams(self._params.rows_of(idx, n))


class _LazyParams(dict):
    """A fitted family's parameters for each row's format, read from the hardware columns on first use."""

    def __init__(self, hw, precision, family):
        super().__init__()
        self._args = (hw, precision, family)
        codes = np.asarray(precision)
        self._codes, self._rows_of_code = codes, {}
        if codes.ndim == 0:
            self._present = [int(codes)]
        elif codes.size and np.all(codes == codes.flat[0]):
            self._present = [int(codes.flat[0])]
        elif codes.dtype.kind in "iu" and codes.min() >= 0:   # the formats present, without a sort
            self._present = [int(c) for c in np.flatnonzero(np.bincount(codes.ravel()))]
        else:
            self._present = [int(c) for c in np.unique(codes)] or [0]

    def __missing__(self, key):
        hw, _, family = self._args
        value = hw[gemm_column(key, NAMES[self._present[0]], family)]
        for code in self._present[1:]:  # only the formats this block uses are read
            if code not in self._rows_of_code:
                self._rows_of_code[code] = self._codes == code
            value = np.where(self._rows_of_code[code], hw[gemm_column(key, NAMES[code], family)], value)
        self[key] = value
        return value

    def rows_of(self, idx, n) -> "_LazyParams":
        """The same parameters restricted to rows `idx` (dse.perf.layer.rows_of), of the same kind."""
        hw, precision, family = self._args
        codes = np.asarray(precision)
        return type(self)(_hw_rows(hw, idx, n), codes[idx] if codes.ndim == 1 and len(codes) == n else codes, family)


class _ServingParams(_LazyParams):
    """GEMM parameters as a serving engine runs them, where the kernel tables time something else.
    fp8: the tables time per-tensor FP8 Linear layers without an input scale, so each call first
    reduces its activation's amax to compute one (TensorRT-LLM's dynamic path; aiconfigurator
    collector/trtllm/collect_gemm.py says so and derives its fp8_static GEMM by subtracting that
    kernel). A serving checkpoint carries calibrated static activation scales (TensorRT Model
    Optimizer, llm-compressor), or quantizes per token in one fused kernel (vLLM, SGLang): the fp8
    fit's floor loses the amax kernel's fitted floor (fp8_scale_floor_s).
    nvfp4: `trtllm::nvfp4_gemm` picks its tactic through TensorRT-LLM's AutoTuner, which outside an
    `autotune()` pass falls back to a default tactic; the GEMM collector runs none (its MoE collector
    does), so the tables time one fixed tile schedule whose few output tiles each run the whole k
    loop (21 us for a 1024 x 8192 weight at any batch up to 256 on B200, against 9 us in BF16 for
    3.6x the bytes). Engines tune at start-up (TensorRT-LLM's autotuner, vLLM's and FlashInfer's
    per-shape kernel choice), so an NVFP4 GEMM takes the schedule the part's tuned BF16 kernels reach
    (SCHEDULE from the bf16 fit: tiles in flight and split-K depth), and its throughput per tile is
    at least cuBLASLt's (a backend the tuner chooses among): the NVFP4 fit's efficiency_max times
    nvfp4_tuned_gemm_speedup, Transformer Engine's cuBLASLt GEMMs against the tables' on B300 (the
    factor training's NVFP4 GEMMs take on their peak). Its ramp, floor and bandwidth stay the fit's."""

    SCHEDULE = ("tiles_per_wave", "split_k_min_depth")
    # parameter -> (format, its serving value from the part's columns and the tables' value)
    ADJUST = {
        "floor_s": ("fp8", lambda hw, key, table: np.maximum(table - np.asarray(hw["fp8_scale_floor_s"], float), 0.0)),
        "efficiency_max": ("nvfp4", lambda hw, key, table: table * np.asarray(hw["nvfp4_tuned_gemm_speedup"], float)),
        **{k: ("nvfp4", lambda hw, key, table: np.asarray(hw[gemm_column(key, "bf16", "gemm")], float)) for k in SCHEDULE},
    }

    def __missing__(self, key):
        value = super().__missing__(key)
        if key in self.ADJUST:
            fmt, serving = self.ADJUST[key]
            rows = self._codes == CODE[fmt]
            if np.any(rows):
                value = self[key] = np.where(rows, serving(self._args[0], key, value), value)
        return value


class Columns(dict):
    """Hardware columns `names`, each read from the row block when first used."""

    def __init__(self, hw, names):
        super().__init__()
        self._hw, self._names = hw, names

    def __missing__(self, key):
        if key not in self._names:
            raise KeyError(key)
        self[key] = value = self._hw[key]
        return value

    def rows_of(self, idx, n) -> "Columns":
        """The same columns restricted to rows `idx` (dse.perf.layer.rows_of)."""
        return Columns(_hw_rows(self._hw, idx, n), self._names)


def _hw_rows(hw, idx, n):
    """Hardware columns `hw` (a dict, or a row block read lazily) restricted to rows `idx` of n."""
    if isinstance(hw, dict):
        return {k: (v[idx] if np.ndim(v) == 1 and len(v) == n else v) for k, v in hw.items()}
    return _RowsOf(hw, idx, n)


class _RowsOf:
    """Hardware columns restricted to rows `idx`, each column read (and restricted) when first used."""

    def __init__(self, hw, idx, n):
        self._hw, self._idx, self._n = hw, idx, n

    def __getitem__(self, key):
        v = self._hw[key]
        return v[self._idx] if np.ndim(v) == 1 and len(v) == self._n else v


def per_format(hw: dict, precision, family: str) -> dict:
    """{parameter: per-row value} of a per-format fitted family (columns `<family>_<param>_<format>`),
    each looked up when first read."""
    return _LazyParams(hw, precision, family)
