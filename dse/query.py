"""Queries over a results dataset, streamed (only the needed columns read): the Pareto front,
the k best rows, the columns worth showing. Used by `dse pareto`, `dse top` and the Python API."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dse.errors import ConfigError

# Output columns worth showing next to the mapping, when present.
KEY_OUTPUTS = ("step_time_s", "tokens_per_s", "mfu", "mem_per_gpu_bytes", "fits", "infeasible_reason",
               "ttft_s", "tpot_s", "output_tokens_per_s", "cost_per_run_usd", "cost_per_million_tokens_usd")


def display_columns(path, extra: list[str]) -> list[str]:
    """Axes of the space (the varying mapping), then `extra`, then key outputs present."""
    from dse import store
    files = store.result_files(path)
    if not files:
        return extra
    import pyarrow.parquet as pq
    have = pq.read_schema(files[0]).names
    try:
        m = store.read_manifest(path)
    except ConfigError:
        m = {}
    if store.run_kind(m) == "study":   # objectives, then the outer choices, then the mapping
        content = m["study"].get("content") or {}
        axes = [o.split(":")[0] for o in m.get("objectives") or []]
        for part in ("outer", "inner"):
            axes += list((content.get(part) or {}).get("axes") or {})
    else:
        axes = list((m.get("space", {}).get("content", {}).get("axes") or {}))
    cols = [c for c in axes if c in have]
    for c in list(extra) + list(KEY_OUTPUTS):
        if c in have and c not in cols:
            cols.append(c)
    return cols


def fits_mask(batch, use_fits: bool):
    if not use_fits or "fits" not in batch.schema.names:
        return None
    return np.asarray(batch.column("fits").to_numpy(zero_copy_only=False), dtype=bool)


def pareto_rows(path, objectives: list[str], senses: list[str], feasible_only: bool = True):
    """Streaming Pareto front of a results dataset -> DataFrame of the front rows (all columns)."""
    from dse import store
    from dse.pareto import ParetoFront
    schema_cols = objectives + ["fits"]
    files = store.result_files(path)
    have, numeric = set(), set()
    if files:
        import pyarrow as pa
        import pyarrow.parquet as pq
        schema = pq.read_schema(files[0])
        have = set(schema.names)
        numeric = {f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_floating(f.type)
                   or pa.types.is_boolean(f.type)}
    for c in objectives:
        if files and c not in have:
            raise ConfigError(f"--objective {c}: no such column in {path}; columns: {', '.join(sorted(have))}")
        if files and c not in numeric:
            raise ConfigError(f"--objective {c}: not a numeric column; give a number column such as step_time_s")
    read = [c for c in schema_cols if c in have] if files else objectives
    front = ParetoFront(senses)
    for fi, offset, batch in store.iter_batches(path, read):
        vals = np.column_stack([np.asarray(batch.column(c).to_numpy(zero_copy_only=False), dtype=float)
                                for c in objectives])
        ids = (np.int64(fi) << 32) + offset + np.arange(batch.num_rows, dtype=np.int64)
        m = fits_mask(batch, feasible_only)
        if m is not None:
            vals, ids = vals[m], ids[m]
        front.add(vals, ids)
    ids = np.sort(front.ids) if front.ids is not None else np.zeros(0, np.int64)
    df = store.take_rows(path, [(int(i >> 32), int(i & 0xFFFFFFFF)) for i in ids])
    if len(df):
        df = df.sort_values(objectives, ascending=[s == "min" for s in senses], kind="stable")
    return df.reset_index(drop=True)


def top_rows(path, by: str, k: int = 10, ascending: bool = False, feasible_only: bool = True):
    """The k best rows by one column, streaming -> DataFrame (all columns)."""
    from dse import store
    if k <= 0:
        raise ConfigError(f"-k {k}: give a positive number of rows")
    files = store.result_files(path)
    have = set()
    if files:
        import pyarrow.parquet as pq
        have = set(pq.read_schema(files[0]).names)
        if by not in have:
            raise ConfigError(f"--by {by}: no such column in {path}; columns: {', '.join(sorted(have))}")
        import pyarrow as pa
        kind = pq.read_schema(files[0]).field(by).type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
            raise ConfigError(f"--by {by}: not a numeric column; rank by a number column such as mfu")
    read = [by] + (["fits"] if "fits" in have and by != "fits" else [])
    best_v = np.zeros(0)
    best_i = np.zeros(0, dtype=np.int64)
    sign = 1.0 if ascending else -1.0
    for fi, offset, batch in store.iter_batches(path, read):
        v = np.asarray(batch.column(by).to_numpy(zero_copy_only=False), dtype=float) * sign
        ids = (np.int64(fi) << 32) + offset + np.arange(batch.num_rows, dtype=np.int64)
        keep = ~np.isnan(v)
        m = fits_mask(batch, feasible_only)
        if m is not None:
            keep &= m
        v, ids = np.concatenate([best_v, v[keep]]), np.concatenate([best_i, ids[keep]])
        if len(v) > k:
            order = np.lexsort((ids, v))[:k]
            v, ids = v[order], ids[order]
        best_v, best_i = v, ids
    order = np.lexsort((best_i, best_v))
    df = store.take_rows(path, [(int(i >> 32), int(i & 0xFFFFFFFF)) for i in best_i[order]])
    return df


def summarize(path: Path) -> dict:
    """Manifest facts, row counts and per-column ranges (streamed: only numeric columns are read)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from dse import store
    m = store.read_manifest(path)
    files = store.result_files(path)
    info = {"results": str(path), "kind": store.run_kind(m), "created": m.get("created"),
            "dse_version": m.get("dse_version"), "git_revision": m.get("git_revision"),
            "packages": m.get("packages", {}), "rows": 0, "part_files": len(files), "feasible": None,
            "columns": [], "summary": []}
    if info["kind"] == "study":
        st = m.get("study", {})
        info["study"] = {"name": st.get("name"), "file": st.get("file"), "hash": st.get("hash"),
                         "objectives": m.get("objectives") or [], "sampler": m.get("sampler"),
                         "budget": m.get("budget"), "seed": m.get("seed")}
        axes = set()
        for part in ("outer", "inner"):
            content = (st.get("content") or {}).get(part) or {}
            axes |= set(content.get("axes") or {}) | set(content.get("fixed") or {})
    else:
        sp = m.get("space", {})
        info["space"] = {"name": sp.get("name"), "file": sp.get("file"), "hash": sp.get("hash"),
                         "size": sp.get("size", 0), "evaluator": m.get("evaluator"), "seed": m.get("seed")}
        if path.is_dir():
            done = len(store.done_chunks(store.dataset_dir(path)))
            info["chunks"] = {"done": done, "total": m.get("n_chunks"), "chunk_size": m.get("chunk_size") or 0,
                              "complete": bool(m.get("complete") and done == m.get("n_chunks"))}
        content = sp.get("content") or {}
        axes = set(content.get("axes") or {}) | set(content.get("fixed") or {})
    if not files:
        return info
    schema = pq.read_schema(files[0])
    info["columns"] = [{"name": f.name, "type": "dict<string>" if pa.types.is_dictionary(f.type) else str(f.type)}
                       for f in schema]
    numeric = [f.name for f in schema if f.name not in axes
               and (pa.types.is_integer(f.type) or pa.types.is_floating(f.type))]
    lo = {c: np.inf for c in numeric}
    hi = {c: -np.inf for c in numeric}
    has_fits = "fits" in schema.names
    rows = feasible = 0
    for _, _, batch in store.iter_batches(path, numeric + (["fits"] if has_fits else [])):
        rows += batch.num_rows
        if has_fits:
            feasible += int(pc.sum(batch.column("fits")).as_py() or 0)
        for c in numeric:
            mm = pc.min_max(batch.column(c), skip_nulls=True)
            low, high = mm["min"].as_py(), mm["max"].as_py()
            if low is not None and not (isinstance(low, float) and np.isnan(low)):
                lo[c], hi[c] = min(lo[c], low), max(hi[c], high)
    info["rows"] = rows
    info["feasible"] = feasible if has_fits else None
    seen = {c: lo[c] <= hi[c] for c in numeric}  # False: no value at all (empty or all NaN)
    info["summary"] = [{"column": c, "min": lo[c] if seen[c] else None, "max": hi[c] if seen[c] else None}
                       for c in numeric]
    return info
