"""Writing Parquet: encodings (dictionary strings, integers at least int32), atomic parts and single
files, where derived outputs may go (dse.store)."""
from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dse.errors import ConfigError
from dse.store.verify import write_receipt
from dse.store.manifest import (
    COMPRESSION,
    MANIFEST,
    META_KEY,
    PART_RE,
    SIDECAR_SUFFIX,
    STUDY_DATASET,
    _has_parts,
    _is_study_run,
    dataset_dir,
    read_manifest,
    sidecar,
)

# ----------------------------------------------------------------------------- writing

def _catalog_columns() -> set:
    from dse.space import catalog_names
    return catalog_names() | {"generation"}


def _small_int(lo: int, hi: int) -> pa.DataType:
    """int32 where the range fits, else int64: never narrower than int32 in files (int8/int16
    columns make `df.gpus * df.tp` wrap in pandas and polars)."""
    for t, dt in ((pa.int32(), np.int32),):
        info = np.iinfo(dt)
        if info.min <= lo and hi <= info.max:
            return t
    return pa.int64()


def _to_arrow_array(name: str, v, int_bounds: dict) -> pa.Array:
    if isinstance(v, pd.Categorical) or isinstance(getattr(v, "dtype", None), pd.CategoricalDtype):
        cat = pd.Categorical(v)
        codes = np.asarray(cat.codes, dtype=np.int32)
        cats = pa.array([str(c) for c in cat.categories], type=pa.string())
        mask = codes < 0
        return pa.DictionaryArray.from_arrays(pa.array(codes, mask=mask if mask.any() else None), cats)
    a = np.asarray(v)
    if a.dtype.kind in "OUS":
        return pa.array(a.astype(object), type=pa.string(), from_pandas=True).dictionary_encode()
    if a.dtype.kind in "iu" and name in int_bounds:
        lo, hi = int_bounds[name]
        return pa.array(a.astype(_small_int(lo, hi).to_pandas_dtype()))
    if a.dtype.kind in "iu" and a.dtype.itemsize < 4:
        return pa.array(a.astype(np.int32))
    if a.dtype.kind == "u":
        return pa.array(a.astype(np.int64))
    return pa.array(a)


def to_arrow(cols: dict, space=None, keep_catalog: bool = False, metadata: dict | None = None) -> pa.Table:
    """Columns (dict of arrays or Categoricals) -> Arrow table with the dataset's encodings."""
    bounds = space.int_bounds if space is not None else {}
    drop = set() if keep_catalog else _catalog_columns() - set(space.columns if space is not None else ())
    names, arrays = [], []
    for k, v in cols.items():
        if k in drop:
            continue
        if np.ndim(v) == 0:
            continue
        names.append(k)
        arrays.append(_to_arrow_array(k, v, bounds))
    t = pa.Table.from_arrays(arrays, names=names)
    if metadata:
        t = t.replace_schema_metadata({k.encode() if isinstance(k, str) else k:
                                       v if isinstance(v, bytes) else str(v).encode() for k, v in metadata.items()})
    return t


def _temp_path(final: Path) -> Path:
    """A temp name beside the dataset directory (same filesystem, outside the dataset)."""
    d = final.parent
    return d.parent / f".{d.name}.{final.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"


def write_part(path, chunk_id: int, table: pa.Table | None) -> int:
    """Write one chunk atomically (temp file beside the dataset, then rename into it); a chunk
    without rows is a marker in the sidecar. Returns its row count."""
    p = Path(path)
    if table is None or not table.num_rows:
        side = sidecar(p)
        side.mkdir(parents=True, exist_ok=True)
        (side / f"part-{chunk_id:06d}.empty").write_bytes(b"")
        return 0
    final = p / f"part-{chunk_id:06d}.parquet"
    tmp = _temp_path(final)
    try:
        # dictionary pages only where they pay: categoricals, integers, flags (not floats)
        dict_cols = [f.name for f in table.schema
                     if pa.types.is_dictionary(f.type) or pa.types.is_integer(f.type) or pa.types.is_boolean(f.type)]
        pq.write_table(table, tmp, compression=COMPRESSION, row_group_size=1 << 20,
                       use_dictionary=dict_cols or False)
        write_receipt(p, chunk_id, tmp, table.num_rows)  # before the rename: no part without its receipt
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return table.num_rows


def widen_ints(table: pa.Table) -> pa.Table:
    """Integer columns narrower than 32 bits (and unsigned ones) as int32/int64."""
    for i, f in enumerate(table.schema):
        t = f.type
        if pa.types.is_integer(t) and (t.bit_width < 32 or pa.types.is_unsigned_integer(t)):
            to = pa.int32() if t.bit_width < 32 else pa.int64()
            table = table.set_column(i, pa.field(f.name, to, f.nullable, f.metadata), table.column(i).cast(to))
    return table


def write_table_atomic(path, table, manifest: dict | None = None, metadata: dict | None = None) -> Path:
    """One Parquet file (a pyarrow Table or a pandas DataFrame) written atomically (temp file in
    the same directory, then rename); `manifest` goes into the key-value metadata under META_KEY,
    `metadata` (str or bytes keys and values) beside it."""
    p = Path(path)
    if isinstance(table, pd.DataFrame):
        table = pa.Table.from_pandas(table.reset_index(drop=True), preserve_index=False)
    table = widen_ints(table)
    extra = {}
    if manifest is not None:
        extra[META_KEY] = json.dumps(manifest, default=str).encode()
    for k, v in (metadata or {}).items():
        extra[k.encode() if isinstance(k, str) else k] = v if isinstance(v, bytes) else str(v).encode()
    if extra:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **extra})
    tmp = p.with_name(f".{p.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        pq.write_table(table, tmp, compression=COMPRESSION)
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    return p


# ----------------------------------------------------------------------------- derived outputs

PARETO_KEY = "pareto"   # manifest key that marks a file written by `dse pareto`


def is_dataset_dir(d) -> bool:
    d = Path(d)
    if not d.is_dir() or d.name.endswith(SIDECAR_SUFFIX):
        return False
    if _has_parts(d) or (sidecar(d) / MANIFEST).is_file() or (d.name == STUDY_DATASET and _is_study_run(d.parent)):
        return True
    return (d / MANIFEST).is_file() and not _is_study_run(d)   # an earlier version's sweep directory


def default_derived_out(results, name: str = "pareto.parquet") -> Path:
    """Where a derived output of `results` goes by default: the dataset's sidecar."""
    p = Path(results)
    d = dataset_dir(p) if p.is_dir() else p.parent
    if p.is_file() and not is_dataset_dir(d):
        return p.with_name(f"{p.stem}-{name}")
    return sidecar(d) / name


def check_derived_out(out, owner_key: str = PARETO_KEY) -> Path:
    """Refuse (ConfigError, one line; nothing touched) an output path for a derived table that is
    a directory, lies inside a dataset directory (a dataset glob would pick it up), or is an
    existing file not written by the same command (its manifest lacks `owner_key`)."""
    o = Path(out)
    if o.is_dir():
        raise ConfigError(f"{o}: is a directory; give --out a file path such as {sidecar(o) / 'pareto.parquet'}")
    if is_dataset_dir(o.parent) or PART_RE.match(o.name):
        raise ConfigError(f"{o}: inside the dataset {o.parent}, where readers would take it for rows; "
                          f"write it elsewhere (default {sidecar(o.parent) / o.name})")
    if o.exists():
        try:
            own = owner_key in read_manifest(o)
        except (ConfigError, ValueError):
            own = False
        if not own:
            raise ConfigError(f"{o}: exists and was not written by this command; choose another --out")
    return o
