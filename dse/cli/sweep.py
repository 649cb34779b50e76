"""`dse sweep | pareto | top | show`: run exhaustive sweeps and look at their Parquet results.

    dse sweep SPACE [--out DIR] [--jobs N] [--backend loky|dask] [--scheduler ADDR] [--overwrite]
    dse pareto RESULTS --objective step_time_s:min --objective mem_per_gpu_bytes:min [--all] [--out FILE]
        (writes RESULTS.dse/pareto.parquet by default: the sidecar beside the dataset, see dse.store)
    dse top RESULTS --by tokens_per_s [-k 10] [--asc] [--all]
    dse show RESULTS

pareto and top stream the dataset reading only the objective (and `fits`) columns, then fetch the
few selected rows; by default they consider only feasible rows (`fits`), `--all` keeps every row.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dse.errors import ConfigError
from dse.query import display_columns, pareto_rows, top_rows

def _print_table(df, limit: int | None = None) -> None:
    import pandas as pd
    with pd.option_context("display.width", 250, "display.max_columns", 40, "display.max_rows", limit or 200,
                           "display.float_format", "{:.6g}".format):
        print(df.to_string(index=False) if len(df) else "(no rows)")


def cmd_sweep(args) -> int:
    from dse.sweep import sweep
    res = sweep(args.space, out=args.out, jobs=args.jobs, backend=args.backend, scheduler=args.scheduler,
                overwrite=args.overwrite)
    skipped = res.chunks - res.chunks_run
    resumed = f", {skipped} of {res.chunks} chunks already done" if skipped else ""
    print(f"dse sweep: {res.rows:,} rows ({res.rows_written:,} new{resumed}) in {res.wall_s:.2f} s "
          f"({res.rows_per_s:,.0f} rows/s) -> {res.path}/")
    return 0


def cmd_pareto(args) -> int:
    from dse import store
    from dse.pareto import parse_objectives
    objectives, senses = parse_objectives(args.objective)
    out = store.check_derived_out(args.out) if args.out else store.default_derived_out(args.results)
    if not args.out:
        store.check_derived_out(out)  # a file of the same name that is not ours is never replaced
    df = pareto_rows(args.results, objectives, senses, feasible_only=not args.all)
    try:
        meta = store.read_manifest(args.results)
    except ConfigError:
        meta = {}
    meta = dict(meta, **{store.PARETO_KEY: {"objectives": objectives, "senses": senses,
                                            "feasible_only": not args.all, "source": str(args.results)}})
    out.parent.mkdir(parents=True, exist_ok=True)
    store.write_table_atomic(out, df, meta)
    print(f"Pareto front of {args.results}: {len(df)} rows "
          f"({', '.join(f'{o} {s}' for o, s in zip(objectives, senses))}) -> {out}")
    _print_table(df[[c for c in display_columns(args.results, objectives) if c in df.columns]], args.limit)
    return 0


def cmd_top(args) -> int:
    df = top_rows(args.results, args.by, args.k, args.asc, feasible_only=not args.all)
    print(f"top {len(df)} of {args.results} by {args.by} ({'ascending' if args.asc else 'descending'})")
    _print_table(df[[c for c in display_columns(args.results, [args.by]) if c in df.columns]])
    return 0


def cmd_show(args) -> int:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from dse import store
    path = Path(args.results)
    m = store.read_manifest(path)
    files = store.result_files(path)
    print(f"results   {path}")
    if store.run_kind(m) == "study":
        st = m.get("study", {})
        print(f"study     {st.get('name')}  file={st.get('file')}  hash={st.get('hash')}")
        print(f"          objectives {', '.join(m.get('objectives') or [])}; sampler {m.get('sampler')}; "
              f"budget {m.get('budget')}; seed {m.get('seed')}")
        axes = set()
        for part in ("outer", "inner"):
            content = (st.get("content") or {}).get(part) or {}
            axes |= set(content.get("axes") or {}) | set(content.get("fixed") or {})
    else:
        sp = m.get("space", {})
        d = store.dataset_dir(path) if path.is_dir() else None
        print(f"space     {sp.get('name')}  file={sp.get('file')}  hash={sp.get('hash')}")
        print(f"          index size {sp.get('size', 0):,}; evaluator {m.get('evaluator')}; seed {m.get('seed')}")
        if d is not None:
            done = len(store.done_chunks(d))
            state = "complete" if m.get("complete") and done == m.get("n_chunks") else "incomplete (rerun `dse sweep` to resume)"
            print(f"chunks    {done} of {m.get('n_chunks')} done (chunk size {m.get('chunk_size') or 0:,}); {state}")
        axes = set((sp.get("content") or {}).get("axes") or {}) | set((sp.get("content") or {}).get("fixed") or {})
    print(f"created   {m.get('created')}  dse {m.get('dse_version')}  git {m.get('git_revision')}")
    pk = m.get("packages", {})
    print("packages  " + ", ".join(f"{k} {v}" for k, v in pk.items()))
    if not files:
        print("rows      0")
        return 0
    schema = pq.read_schema(files[0])
    outputs = [f.name for f in schema if f.name not in axes]
    numeric = [c for c in outputs if pa_is_numeric(schema.field(c).type)]
    rows = feasible = 0
    lo = {c: np.inf for c in numeric}
    hi = {c: -np.inf for c in numeric}
    read = numeric + (["fits"] if "fits" in schema.names and "fits" not in numeric else [])
    for _, _, batch in store.iter_batches(path, read):
        rows += batch.num_rows
        if "fits" in batch.schema.names:
            feasible += int(pc.sum(batch.column("fits")).as_py() or 0)
        for c in numeric:
            mm = pc.min_max(batch.column(c))
            if mm["min"].as_py() is not None and not (isinstance(mm["min"].as_py(), float) and np.isnan(mm["min"].as_py())):
                lo[c] = min(lo[c], mm["min"].as_py())
                hi[c] = max(hi[c], mm["max"].as_py())
    fits = f"; {feasible:,} fit ({feasible / rows:.1%})" if "fits" in schema.names and rows else ""
    print(f"rows      {rows:,} in {len(files)} part files{fits}")
    print(f"columns   {len(schema.names)}: " + ", ".join(f"{f.name}:{_short_type(f.type)}" for f in schema))
    if numeric:
        import pandas as pd
        summ = pd.DataFrame({"column": numeric, "min": [lo[c] for c in numeric], "max": [hi[c] for c in numeric]})
        _print_table(summ)
    return 0


def pa_is_numeric(t) -> bool:
    import pyarrow as pa
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _short_type(t) -> str:
    import pyarrow as pa
    return "dict<string>" if pa.types.is_dictionary(t) else str(t)


def _int(text: str) -> int:
    import argparse
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    return v


def register(sub) -> None:
    p = sub.add_parser("sweep", help="evaluate every point of a space file into a Parquet dataset")
    p.add_argument("space", help="space file (YAML), e.g. spaces/example.yaml")
    p.add_argument("--out", help="results directory (default results/<space name>/)")
    p.add_argument("--jobs", type=_int, default=-1, help="worker processes (-1: all cores)")
    p.add_argument("--backend", choices=["loky", "dask"], default="loky")
    p.add_argument("--scheduler", help="Dask scheduler address, e.g. tcp://host:8786 (with --backend dask)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the dse results --out holds (without it a run of the same space resumes, another space is refused)")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("pareto", help="Pareto front of a results dataset; writes RESULTS.dse/pareto.parquet")
    p.add_argument("results", help="results directory (or Parquet file)")
    p.add_argument("--objective", action="append", required=True, metavar="COL:min|max",
                   help="objective column and sense; repeat for each objective")
    p.add_argument("--all", action="store_true", help="include rows that do not fit (default: fits only)")
    p.add_argument("--out", help="output file, outside the dataset (default RESULTS.dse/pareto.parquet, beside the "
                                 "dataset directory so that no dataset glob reads it)")
    p.add_argument("--limit", type=int, default=50, help="rows to print (default 50)")
    p.set_defaults(func=cmd_pareto)

    p = sub.add_parser("top", help="the k best rows of a results dataset by one column")
    p.add_argument("results", help="results directory (or Parquet file)")
    p.add_argument("--by", required=True, help="column to rank by")
    p.add_argument("-k", type=_int, default=10, help="rows (default 10)")
    p.add_argument("--asc", action="store_true", help="smallest first (default: largest first)")
    p.add_argument("--all", action="store_true", help="include rows that do not fit (default: fits only)")
    p.set_defaults(func=cmd_top)

    p = sub.add_parser("show", help="manifest and summary of a results dataset")
    p.add_argument("results", help="results directory (or Parquet file)")
    p.set_defaults(func=cmd_show)
