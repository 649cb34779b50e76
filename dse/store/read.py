"""Reading a dataset (sweep or study) back: whole, streamed, or selected rows (dse.store)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dse.errors import ConfigError
from dse.store.layout import part_files
from dse.store.verify import check_parts
from dse.store.manifest import _manifest_file, dataset_dir

# ----------------------------------------------------------------------------- reading

def result_files(path) -> list[Path]:
    """The Parquet parts of a results directory (a study run directory: its trials/), or the one
    file given; ConfigError if it is no dse results directory."""
    p = Path(path)
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise ConfigError(f"{p}: no such results directory or file")
    d = dataset_dir(p)
    files = part_files(d)
    if not files and _manifest_file(d) is None:
        raise ConfigError(f"{p}: not a dse results directory (no manifest, no part files)")
    check_parts(files)
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
