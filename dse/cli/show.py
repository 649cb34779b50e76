"""`dse show RESULTS [--json]`: the manifest and a summary of a results dataset (sweep or study):
what made it, how complete it is, its rows, columns and the range of every numeric output.

`--json` prints {results, kind, space | study, chunks, created, dse_version, git_revision, packages,
rows, part_files, feasible, columns: [{name, type}], summary: [{column, min, max}]}; a column with no
finite value has min and max null.
"""
from __future__ import annotations

from pathlib import Path

from dse.cli.output import JSON_HELP, emit_json, print_table


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


def cmd_show(args) -> int:
    info = summarize(Path(args.results))
    if args.json:
        emit_json(info)
        return 0
    print(f"results   {info['results']}")
    if info["kind"] == "study":
        st = info["study"]
        print(f"study     {st['name']}  file={st['file']}  hash={st['hash']}")
        print(f"          objectives {', '.join(st['objectives'])}; sampler {st['sampler']}; "
              f"budget {st['budget']}; seed {st['seed']}")
    else:
        sp = info["space"]
        print(f"space     {sp['name']}  file={sp['file']}  hash={sp['hash']}")
        print(f"          index size {sp['size']:,}; evaluator {sp['evaluator']}; seed {sp['seed']}")
        if "chunks" in info:
            ch = info["chunks"]
            state = "complete" if ch["complete"] else "incomplete (rerun `dse sweep` to resume)"
            print(f"chunks    {ch['done']} of {ch['total']} done (chunk size {ch['chunk_size']:,}); {state}")
    print(f"created   {info['created']}  dse {info['dse_version']}  git {info['git_revision']}")
    print("packages  " + ", ".join(f"{k} {v}" for k, v in info["packages"].items()))
    if not info["part_files"]:
        print("rows      0")
        return 0
    rows, feasible = info["rows"], info["feasible"]
    fits = f"; {feasible:,} fit ({feasible / rows:.1%})" if feasible is not None and rows else ""
    print(f"rows      {rows:,} in {info['part_files']} part files{fits}")
    print(f"columns   {len(info['columns'])}: " + ", ".join(f"{c['name']}:{c['type']}" for c in info["columns"]))
    if info["summary"]:
        import pandas as pd
        summ = pd.DataFrame(info["summary"])
        for side in ("min", "max"):  # a column without any value: '-' (never inf / -inf)
            summ[side] = [("-" if v is None else f"{v:.6g}") for v in summ[side]]
        print_table(summ)
    return 0


def register(sub) -> None:
    p = sub.add_parser("show", help="manifest and summary of a results dataset (sweep or study)",
                       description=__doc__.splitlines()[0])
    p.add_argument("results", help="results directory of a sweep or study (or a Parquet file)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=cmd_show)
