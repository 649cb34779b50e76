"""The batch of design points and the column schema, in one place.

A batch is a dict of equal-length 1-D numpy arrays, one row per design point.
`dse.evaluate_*` accept a pandas DataFrame or a mapping of arrays (scalars broadcast)
and give back the same kind, same rows, same order, with result columns added.

Categorical inputs (model, system, precision, recompute, ...) may be strings, pandas
Categoricals (fast: only the categories are looked at) or, for enums, integer codes.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from dse import catalog
from dse.errors import ConfigError

# The block-wise model arithmetic runs in float32: twice the numbers per SIMD instruction and
# half the cache traffic of float64, while its 7 significant digits are far finer than the
# model's own accuracy (and exact for the integer degrees and sizes it divides). Results are
# handed back as float64.
MODEL_FLOAT = np.float32


def real(x) -> np.ndarray:
    """A floating-point array: float32 or float64 as given, anything else as float64."""
    x = np.asarray(x)
    return x if x.dtype.kind == "f" else x.astype(np.float64)


# Enumerations: value spellings (lower case) -> integer code used inside the models.
PRECISIONS = ("bf16", "fp8", "fp4")
RECOMPUTE = ("none", "selective", "full")
ENUM_ALIASES = {
    "topology": {"fat-tree": 0, "fattree": 0, "switched": 0, "torus2d": 1, "2d-torus": 1, "torus3d": 2, "3d-torus": 2},
    "precision": {"bf16": 0, "fp16": 0, "mixed": 0, "fp16 mixed": 0, "bfloat16": 0,
                  "fp8": 1, "fp8-e4m3": 1, "fp4": 2, "nvfp4": 2, "mxfp4": 2},
    "recompute": {"none": 0, "no": 0, "off": 0, "selective": 1, "full": 2},
}
# Bytes per element of weights/activations for each precision code. FP8/FP4 training keeps
# BF16 activations between GEMMs (Transformer Engine), so only GEMM operands shrink.
GEMM_OPERAND_BYTES = np.array([2.0, 1.0, 0.5], dtype=MODEL_FLOAT)

# Model columns and the catalog column each comes from.
MODEL_COLUMNS = (
    "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab", "seq_len",
    "gated_mlp", "dropout", "tied_embeddings", "learned_pos_emb", "experts", "top_k",
    "shared_experts", "moe_ffn_hidden", "moe_layer_interval", "dense_layers", "kv_cache_dim",
)
# Per-GPU hardware columns a system name resolves to (SI units, per direction for links).
HARDWARE_COLUMNS = (
    "peak_bf16_flops_per_s", "peak_fp8_flops_per_s", "peak_fp4_flops_per_s",
    "memory_capacity_bytes", "memory_bandwidth_bytes_per_s",
    "scaleup_bandwidth_bytes_per_s", "scaleup_domain", "scaleup_latency_s",
    "scaleout_bandwidth_bytes_per_s", "scaleout_latency_s", "tdp_w",
    "gemm_efficiency_max", "gemm_half_dim", "memory_efficiency",
    "scaleup_efficiency", "scaleout_efficiency", "attention_efficiency", "low_precision_efficiency", "fp4_efficiency",
    "launch_overhead_s",
    # inference: streaming efficiency of decode kernels, fixed time per layer pass and per collective
    "decode_memory_efficiency", "layer_overhead_s", "collective_overhead_s",
)


def to_columns(frame) -> tuple[dict[str, np.ndarray], int]:
    """Mapping or DataFrame -> (dict of 1-D arrays, row count). Scalars broadcast."""
    if isinstance(frame, pd.DataFrame):
        cols = {}
        for k in frame.columns:
            s = frame[k]
            cols[str(k)] = s.array if isinstance(s.dtype, pd.CategoricalDtype) else s.to_numpy()
        return cols, len(frame)
    if not isinstance(frame, Mapping):
        raise ConfigError("input: expected a pandas DataFrame or a mapping of column arrays")
    lengths = {len(v) for v in frame.values() if np.ndim(v) > 0 and not isinstance(v, str)}
    if len(lengths) > 1:
        raise ConfigError(f"input: columns have different lengths {sorted(lengths)}; give equal-length arrays")
    n = lengths.pop() if lengths else 1
    cols = {}
    for k, v in frame.items():
        if isinstance(v, pd.Categorical):
            cols[k] = v
        elif np.ndim(v) == 0 or isinstance(v, str):
            cols[k] = np.full(n, v, dtype=object if isinstance(v, str) else None)
        else:
            cols[k] = np.asarray(v)
    return cols, n


# Rows evaluated per block: the temporaries of one block stay in the CPU cache, which makes a
# long batch several times faster than one pass over whole-length arrays.
BLOCK_ROWS = 1 << 14


def blockwise(fn, work: dict, n: int, block: int = BLOCK_ROWS) -> dict:
    """Apply a columns -> columns function to consecutive row blocks and join the results."""
    def result_dtype(v):  # floating results are handed back as float64
        return np.float64 if v.dtype.kind == "f" else v.dtype

    if n <= block:
        part = fn({k: v[:] if isinstance(v, CatalogColumn) else v for k, v in work.items()})
        return {k: np.asarray(v).astype(result_dtype(np.asarray(v)), copy=False) for k, v in part.items()}
    out = None
    for i in range(0, n, block):
        part = fn({k: v[i:i + block] for k, v in work.items()})
        if out is None:
            out = {k: np.empty(n, dtype=result_dtype(np.asarray(v))) for k, v in part.items()}
        for k, v in part.items():
            out[k][i:i + block] = v
    return out


def divides(a, b) -> np.ndarray:
    """a divides b, for integer-valued float arrays (fmod is exact, and fast); a < 1 counts as 1."""
    return np.fmod(b, np.maximum(a, 1)) == 0


def not_positive_integers(*arrays) -> np.ndarray:
    """Rows where any of the arrays is not a positive integer (NaN included)."""
    bad = np.zeros(np.broadcast(*arrays).shape, dtype=bool)
    for x in arrays:
        bad |= ~(x >= 1) | (np.floor(x) != x)
    return bad


def first_failure(checks: list, invalid: np.ndarray, invalid_code: int) -> np.ndarray:
    """Infeasibility code per row: 0 if no check fails, else the 1-based index of the first
    failing check; `invalid_code` where the inputs themselves are invalid."""
    code = np.zeros(invalid.shape, dtype=np.int8)
    for i, failed in reversed(list(enumerate(checks, start=1))):  # the first failure is written last
        np.putmask(code, failed, i)
    np.putmask(code, invalid, invalid_code)
    return code


def hardware_reasons(work: dict, feasible: np.ndarray, reason_text: np.ndarray):
    """Rows feasible so far whose technology-derived accelerator cannot be built: (mask, reason
    text with the hardware's own reason in those rows). Catalog-only batches pass through."""
    if "hw_fits" not in work:
        return np.zeros(feasible.shape, dtype=bool), reason_text
    bad = feasible & ~np.asarray(work["hw_fits"], dtype=bool)
    return bad, np.where(bad, np.asarray(work["hw_infeasible_reason"], dtype=object), reason_text)


def pack(frame, outputs: dict[str, np.ndarray]):
    """Give back the caller's kind: a DataFrame with the outputs added, or a dict."""
    if isinstance(frame, pd.DataFrame):
        out = frame.copy()
        for k, v in outputs.items():
            out[k] = v
        return out
    result = dict(frame)
    result.update(outputs)
    return result


def categories(values) -> tuple[np.ndarray, list]:
    """(integer codes, list of distinct values) for a string-like column."""
    if isinstance(values, pd.Categorical) or isinstance(getattr(values, "dtype", None), pd.CategoricalDtype):
        cat = pd.Categorical(values)
        return np.asarray(cat.codes), list(cat.categories)
    uniques, codes = np.unique(np.asarray(values).astype(str), return_inverse=True)
    return codes.reshape(-1), list(uniques)


def enum_codes(cols: dict, name: str, default: str) -> np.ndarray:
    """Integer codes of an enum column (accepts spellings, aliases or codes)."""
    aliases = ENUM_ALIASES[name]
    n = _length(cols)
    if name not in cols:
        return np.full(n, aliases[default], dtype=np.int8)
    v = cols[name]
    if not isinstance(v, pd.Categorical) and np.issubdtype(np.asarray(v).dtype, np.integer):
        return np.asarray(v, dtype=np.int8)
    codes, uniques = categories(v)
    table = []
    for u in uniques:
        key = str(u).strip().lower()
        if key not in aliases:
            raise ConfigError(f"{name}: unknown value '{u}'; use one of {', '.join(_canonical(name))}")
        table.append(aliases[key])
    return np.asarray(table, dtype=np.int8)[codes]


def _canonical(name: str) -> tuple:
    return {"precision": PRECISIONS, "recompute": RECOMPUTE, "topology": ("fat-tree", "torus2d", "torus3d")}[name]


def _length(cols: dict) -> int:
    for v in cols.values():
        return len(v)
    return 0


def as_float(cols: dict, name: str, default: float) -> np.ndarray:
    n = _length(cols)
    if name not in cols:
        return np.full(n, float(default))
    out = real(cols[name])
    return np.where(np.isnan(out), float(default), out) if np.isnan(out).any() else out


def as_bool(cols: dict, name: str, default: bool) -> np.ndarray:
    n = _length(cols)
    if name not in cols:
        return np.full(n, bool(default))
    v = cols[name]
    arr = np.asarray(v)
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind in "iuf":
        return np.nan_to_num(arr.astype(float), nan=float(default)) != 0
    codes, uniques = categories(v)
    truth = {"true": True, "yes": True, "1": True, "on": True,
             "false": False, "no": False, "0": False, "off": False, "none": False, "nan": default, "": default}
    table = []
    for u in uniques:
        key = str(u).strip().lower()
        if key not in truth:
            raise ConfigError(f"{name}: '{u}' is not a boolean; use true or false")
        table.append(truth[key])
    return np.asarray(table, dtype=bool)[codes]


MISSING_NAMES = {"", "nan", "none", "null", "<na>"}


class CatalogColumn:
    """A catalog value per row kept as (row codes, one value per catalog entry): the full-length
    column is only expanded where it is read, so block-wise evaluation looks values up per block
    instead of writing and re-reading a million-row array per column. Behaves as a 1-D array
    for np.asarray, len() and slicing."""

    __slots__ = ("codes", "values", "has_gaps")
    ndim = 1

    def __init__(self, codes: np.ndarray, values: np.ndarray, used: np.ndarray):
        self.codes, self.values = codes, values
        self.has_gaps = bool(np.isnan(values[used]).any())  # a row whose value is missing

    def __len__(self) -> int:
        return len(self.codes)

    @property
    def shape(self):
        return (len(self.codes),)

    @property
    def dtype(self):
        return self.values.dtype

    def __getitem__(self, index):
        return self.values[self.codes[index]]

    def astype(self, dtype) -> "CatalogColumn":
        out = CatalogColumn.__new__(CatalogColumn)
        out.codes, out.values, out.has_gaps = self.codes, self.values.astype(dtype), self.has_gaps
        return out

    def __array__(self, dtype=None, copy=None):
        out = self.values[self.codes]
        return out if dtype is None else out.astype(dtype, copy=False)


def _fill_from_catalog(cols: dict, key: str, table: pd.DataFrame, resolve, names: tuple) -> None:
    """Add (or fill NaNs of) `names` columns from the catalog rows named in cols[key]."""
    codes, uniques = categories(cols[key])
    # Rows without a name (NaN, None, "") take NaN here, so derived or explicit values fill them:
    # one frame may mix catalog systems and technology-derived accelerators.
    named = [str(u).strip().lower() not in MISSING_NAMES for u in uniques]
    rows = table.loc[[resolve(u) for u, ok in zip(uniques, named) if ok]]
    position = np.cumsum(named) - 1
    codes = np.where(codes < 0, len(uniques), codes).astype(np.intp)
    lookup = np.append(np.where(named, position, len(rows)), len(rows)).astype(np.intp)[codes]
    used = np.zeros(len(rows) + 1, dtype=bool)
    used[lookup] = True
    for name in names:
        values = np.append(rows[name].to_numpy(dtype=float), np.nan)
        if name in cols:
            given = np.asarray(cols[name])
            if given.dtype.kind == "f" and np.isnan(given).any():
                cols[name] = np.where(np.isnan(given), values[lookup], given)
            continue  # explicit numbers win over the catalog
        cols[name] = CatalogColumn(lookup, values, used)


def resolve_model(cols: dict) -> None:
    """Fill model dimensions from `model` names; explicit columns win. Defaults for optional ones."""
    if "model" in cols:
        _fill_from_catalog(cols, "model", catalog.models(), catalog.resolve_model, MODEL_COLUMNS)
    for required in ("layers", "hidden", "heads", "vocab"):
        if required not in cols:
            raise ConfigError(f"{required}: missing; give a `model` name or the `{required}` column")
    n = _length(cols)
    hidden = lambda: np.asarray(cols["hidden"], dtype=float)  # noqa: E731
    heads = lambda: np.asarray(cols["heads"], dtype=float)  # noqa: E731
    defaults = {  # computed only where a column is missing or has gaps
        "kv_heads": heads, "head_dim": lambda: hidden() / heads(), "ffn_hidden": lambda: 4 * hidden(),
        "seq_len": lambda: 2048.0, "moe_layer_interval": lambda: 1.0,
    }
    for k in MODEL_COLUMNS:
        default = defaults.get(k, lambda: 0.0)
        if k not in cols:
            cols[k] = np.broadcast_to(np.asarray(default(), dtype=float), (n,)).copy()
            continue
        v = cols[k]
        if isinstance(v, CatalogColumn) and not v.has_gaps:
            continue  # every row has its catalog value: nothing to fill
        v = np.asarray(v, dtype=float)
        if np.isnan(v).any():
            with np.errstate(invalid="ignore", divide="ignore"):
                cols[k] = np.where(np.isnan(v), default(), v)
        else:
            cols[k] = v


def resolve_hardware(cols: dict) -> None:
    """Fill per-GPU hardware columns from `system` names or derive them from technology columns.

    Explicit hardware columns win over both. A `memory` generation (with `memory_stacks`)
    replaces a catalog system's memory.
    """
    if "node" in cols:
        from dse.hardware import accelerator_columns  # technology -> accelerator columns
        for k, v in accelerator_columns(cols).items():
            cols.setdefault(k, v)
    if "system" in cols:
        _fill_from_catalog(cols, "system", catalog.systems(), catalog.resolve_system, HARDWARE_COLUMNS)
    missing = [k for k in ("peak_bf16_flops_per_s", "memory_bandwidth_bytes_per_s") if k not in cols]
    if missing:
        raise ConfigError(f"{missing[0]}: missing; give a `system` name, technology columns "
                          "(`node`, `die_area_mm2`, ...) or the hardware columns")
    n = _length(cols)
    defaults = {
        "peak_fp8_flops_per_s": as_float(cols, "peak_bf16_flops_per_s", np.nan),
        "memory_capacity_bytes": np.full(n, np.inf),
        "scaleup_bandwidth_bytes_per_s": np.full(n, 450e9), "scaleup_domain": np.full(n, 8.0),
        "scaleup_latency_s": np.full(n, 2e-6), "scaleout_bandwidth_bytes_per_s": np.full(n, 50e9),
        "scaleout_latency_s": np.full(n, 4e-6), "tdp_w": np.full(n, 700.0),
    }
    # Hardware given as numbers takes the efficiencies of the "derived" generation.
    defaults.update({k: np.full(n, v) for k, v in catalog.efficiency_si().loc["derived"].items()})
    for k, d in defaults.items():
        if k not in cols:
            cols[k] = d
    if "peak_fp4_flops_per_s" not in cols:
        cols["peak_fp4_flops_per_s"] = cols["peak_fp8_flops_per_s"]
    if "memory" in cols and "system" in cols and "node" not in cols:
        from dse.hardware import memory_override  # a DRAM generation replaces the catalog memory
        cols.update(memory_override(cols))
