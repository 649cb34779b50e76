"""Parquet result datasets: `results/<name>/part-NNNNNN.parquet` + `manifest.json`.

Layout of a results directory::

    manifest.json              run manifest (dse version, space file + hash + canonical content,
                               seed, evaluator, chunking, package versions, creation time, git revision)
    part-000000.parquet        one file per finished chunk of the space index (chunk id in the name);
    part-000001.parquet        written to a temporary name and renamed, so a file either is complete
    part-000007.empty          or does not exist; `.empty` marks a chunk with no rows
    pareto.parquet             written by `dse pareto` (not part of the dataset)

Every part file carries the manifest in its Parquet key-value metadata (key `dse.manifest`).
Columns: the space's columns, then the evaluator's outputs; string columns dictionary-encoded,
integer space columns in the smallest integer type their range needs (degrees: int8/int16),
floats as float64 with units in their names. Catalog columns the evaluator resolves from a
`model`/`system` name (layers, hidden, peak_bf16_flops_per_s, ...) are not stored unless the
space gives them: they are one lookup away.

Resume: a directory whose manifest has the same space hash resumes (finished chunks are skipped);
another space's directory is refused (ConfigError) unless `overwrite=True`, which deletes only
dse's own files there.

API: read_results(path, columns=None) -> pandas.DataFrame, read_manifest(path), part_files(path),
iter_batches(path, columns) (streaming), prepare_output(...), write_part(...), to_arrow(...),
write_table_atomic(path, table_or_frame, manifest) (single files: trials.parquet, pareto.parquet, ...),
write_manifest(path, dict), git_revision(), package_versions().
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dse.errors import ConfigError

MANIFEST = "manifest.json"
META_KEY = b"dse.manifest"
PART_RE = re.compile(r"^part-(\d{6,})\.(parquet|empty)$")
COMPRESSION = "zstd"
_OWN = re.compile(r"^(part-\d{6,}\.(parquet|empty)|\.part-.*\.tmp|manifest\.json|\.manifest\.json\..*\.tmp|pareto\.parquet)$")


# ----------------------------------------------------------------------------- manifest

def git_revision() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        r = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                           text=True, timeout=5)
        if r.returncode == 0:
            rev = r.stdout.strip()
            dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=5)
            return rev + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def package_versions() -> dict:
    from importlib import metadata
    out = {"python": sys.version.split()[0]}
    for name in ("numpy", "pandas", "pyarrow", "joblib", "dask", "distributed", "optuna", "PyYAML"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def make_manifest(space, chunk_size: int, evaluator: str) -> dict:
    from dse import __version__
    return {
        "dse_version": __version__,
        "space": {"name": space.name, "file": space.source, "hash": space.hash,
                  "content": space.canonical, "size": space.size, "exact": space.exact},
        "seed": space.seed,
        "evaluator": evaluator,
        "chunk_size": int(chunk_size),
        "n_chunks": space.n_chunks(chunk_size),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_revision": git_revision(),
        "packages": package_versions(),
    }


def write_manifest(path, data: dict) -> None:
    """Write a JSON manifest atomically (temp file, then rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def read_manifest(path) -> dict:
    """The run manifest of a results directory (or of a part file, from its metadata)."""
    p = Path(path)
    if p.is_dir():
        m = p / MANIFEST
        if not m.is_file():
            raise ConfigError(f"{p}: no {MANIFEST}; not a dse results directory (run `dse sweep` first)")
        try:
            return json.loads(m.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{m}: unreadable manifest ({exc.msg}); rerun the sweep with --overwrite") from None
    if p.is_file():
        meta = pq.read_schema(p).metadata or {}
        if META_KEY in meta:
            return json.loads(meta[META_KEY])
        raise ConfigError(f"{p}: no dse manifest in the Parquet metadata")
    raise ConfigError(f"{p}: no such results directory or file")


# ----------------------------------------------------------------------------- directory lifecycle

def part_files(path, include_empty: bool = False) -> list[Path]:
    """Finished part files of a results directory, in chunk order."""
    p = Path(path)
    parts = []
    for f in p.iterdir():
        m = PART_RE.match(f.name)
        if m and (include_empty or m.group(2) == "parquet"):
            parts.append((int(m.group(1)), f))
    return [f for _, f in sorted(parts)]


def done_chunks(path) -> set[int]:
    return {int(PART_RE.match(f.name).group(1)) for f in part_files(path, include_empty=True)}


def _remove_own_files(p: Path, keep_manifest: bool = False, only_temp: bool = False) -> None:
    for f in p.iterdir():
        if not f.is_file() or not _OWN.match(f.name):
            continue
        if only_temp and not f.name.endswith(".tmp"):
            continue
        if keep_manifest and f.name == MANIFEST:
            continue
        f.unlink(missing_ok=True)


def check_output(path, space, overwrite: bool = False) -> dict | None:
    """Raise ConfigError if `path` cannot receive `space`'s results; touches nothing.

    Returns the existing manifest when the directory holds a run of the same space (resume).
    """
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{p}: exists and is not a directory; give --out a directory path")
    if not (p.is_dir() and any(p.iterdir())):
        return None
    m = p / MANIFEST
    old = None
    if m.is_file():
        try:
            old = json.loads(m.read_text())
        except json.JSONDecodeError:
            old = None
    if old is not None and old.get("space", {}).get("hash") == space.hash and not overwrite:
        return old
    if overwrite:
        return None
    if old is None:
        raise ConfigError(f"{p}: not empty and holds no dse run (no readable {MANIFEST}); "
                          "choose another --out or pass --overwrite")
    other = old.get("space", {})
    raise ConfigError(f"{p}: holds results of another space ('{other.get('name')}', hash "
                      f"{str(other.get('hash'))[:12]}), not '{space.name}' ({space.hash[:12]}); "
                      "choose another --out or pass --overwrite to replace them")


def prepare_output(path, space, overwrite: bool = False, chunk_size: int | None = None,
                   evaluator: str = "training") -> tuple[dict, set[int]]:
    """Validate or create a results directory for `space`. Returns (manifest, finished chunk ids).

    Raises ConfigError (before touching anything) if the directory holds another space's run
    or foreign files, unless overwrite; a run of the same space resumes.
    """
    p = Path(path)
    old = check_output(p, space, overwrite)
    if old is not None:
        _remove_own_files(p, only_temp=True)  # a killed run's half-written temp files
        return old, done_chunks(p)
    if p.is_dir() and overwrite:
        _remove_own_files(p)
    p.mkdir(parents=True, exist_ok=True)
    manifest = make_manifest(space, chunk_size or space.chunk_size, evaluator)
    write_manifest(p / MANIFEST, manifest)
    return manifest, set()


def finish(path, rows: int, wall_s: float) -> dict:
    """Mark a run complete in its manifest (rows, wall time of the last session)."""
    p = Path(path)
    m = read_manifest(p)
    m["complete"] = True
    m["rows"] = int(rows)
    m["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    m["last_session_wall_s"] = round(float(wall_s), 3)
    write_manifest(p / MANIFEST, m)
    return m


# ----------------------------------------------------------------------------- writing

def _catalog_columns() -> set:
    from dse.space import catalog_names
    return catalog_names() | {"generation"}


def _small_int(lo: int, hi: int) -> pa.DataType:
    for t, dt in ((pa.int8(), np.int8), (pa.int16(), np.int16), (pa.int32(), np.int32)):
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


def write_part(path, chunk_id: int, table: pa.Table | None) -> int:
    """Write one chunk atomically (temp file, then rename). Returns its row count."""
    p = Path(path)
    final = p / (f"part-{chunk_id:06d}.parquet" if table is not None and table.num_rows
                 else f"part-{chunk_id:06d}.empty")
    tmp = p / f".{final.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    try:
        if table is not None and table.num_rows:
            # dictionary pages only where they pay: categoricals, small integers, flags (not floats)
            dict_cols = [f.name for f in table.schema
                         if pa.types.is_dictionary(f.type) or pa.types.is_integer(f.type) or pa.types.is_boolean(f.type)]
            pq.write_table(table, tmp, compression=COMPRESSION, row_group_size=1 << 20,
                           use_dictionary=dict_cols or False)
        else:
            tmp.write_bytes(b"")
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink(missing_ok=True)
    return 0 if table is None else table.num_rows


def write_table_atomic(path, table, manifest: dict | None = None, metadata: dict | None = None) -> Path:
    """One Parquet file (a pyarrow Table or a pandas DataFrame) written atomically (temp file in
    the same directory, then rename); `manifest` goes into the key-value metadata under META_KEY,
    `metadata` (str or bytes keys and values) beside it."""
    p = Path(path)
    if isinstance(table, pd.DataFrame):
        table = pa.Table.from_pandas(table.reset_index(drop=True), preserve_index=False)
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


# ----------------------------------------------------------------------------- reading

def result_files(path) -> list[Path]:
    """The Parquet files of a results directory (or the one file given); ConfigError if none."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise ConfigError(f"{p}: no such results directory or file")
    files = part_files(p)
    if not files and not (p / MANIFEST).is_file():
        raise ConfigError(f"{p}: not a dse results directory (no {MANIFEST}, no part files)")
    return files


def _schema(files: list[Path]) -> pa.Schema | None:
    return pq.read_schema(files[0]) if files else None


def _check_columns(path, schema: pa.Schema | None, columns) -> None:
    if columns is None or schema is None:
        return
    for c in columns:
        if c not in schema.names:
            raise ConfigError(f"{path}: no column '{c}'; columns: {', '.join(schema.names)}")


def read_results(path, columns: list[str] | None = None) -> pd.DataFrame:
    """A results directory (or one Parquet file) as a pandas DataFrame, rows in space order.

    String columns come back as pandas Categoricals.
    """
    files = result_files(path)
    schema = _schema(files)
    _check_columns(path, schema, columns)
    if not files:
        return pd.DataFrame(columns=columns or [])
    tables = [pq.read_table(f, columns=columns) for f in files]
    table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    return table.to_pandas()


def iter_batches(path, columns: list[str] | None = None, batch_size: int = 1 << 18):
    """Stream (file index, row offset in file, RecordBatch) over the dataset reading only `columns`."""
    files = result_files(path)
    _check_columns(path, _schema(files), columns)
    for fi, f in enumerate(files):
        pf = pq.ParquetFile(f)
        offset = 0
        for batch in pf.iter_batches(batch_size=batch_size, columns=columns):
            yield fi, offset, batch
            offset += batch.num_rows


def take_rows(path, picks: list[tuple[int, int]], columns: list[str] | None = None) -> pd.DataFrame:
    """Rows by (file index, row in file), in the given order: a small selection of a large dataset."""
    files = result_files(path)
    if not picks:
        t = pq.read_schema(files[0]).empty_table() if files else pa.table({})
        return t.to_pandas()
    picks_arr = np.asarray(picks, dtype=np.int64).reshape(-1, 2)
    parts, order = [], []
    for fi in np.unique(picks_arr[:, 0]):
        sel = np.nonzero(picks_arr[:, 0] == fi)[0]
        t = pq.read_table(files[int(fi)], columns=columns)
        parts.append(t.take(pa.array(picks_arr[sel, 1])))
        order.append(sel)
    table = pa.concat_tables(parts, promote_options="permissive")
    pos = np.empty(len(picks_arr), dtype=np.int64)
    pos[np.concatenate(order)] = np.arange(len(picks_arr))
    return table.take(pa.array(pos)).to_pandas()


def count_rows(path) -> int:
    return sum(pq.read_metadata(f).num_rows for f in result_files(path))
