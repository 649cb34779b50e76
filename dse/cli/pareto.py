"""`dse pareto RESULTS --objective COL:min|max ... [--all] [--out FILE] [--limit N] [--json]`: the
Pareto front of a results dataset (sweep or study), streamed (dse.query.pareto_rows).

Writes RESULTS.dse/pareto.parquet by default (the sidecar beside the dataset, see dse.store), so
no dataset glob reads it. By default only feasible rows (`fits`) count; `--all` keeps every row.
`--json` prints {results, objectives, senses, feasible_only, out, rows, front: [row, ...]} with
every column of every front row.
"""
from __future__ import annotations

from dse.cli.output import JSON_HELP, emit_json, lead, print_table, records
from dse.cli.sweep import positive_int
from dse.errors import ConfigError


def cmd_pareto(args) -> int:
    from dse import store
    from dse.pareto import parse_objectives
    from dse.query import display_columns, pareto_rows
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
    if args.json:
        emit_json({"results": str(args.results), "objectives": objectives, "senses": senses,
                   "feasible_only": not args.all, "out": str(out), "rows": len(df), "front": records(df)})
        return 0
    print(f"Pareto front of {args.results}: {len(df)} rows "
          f"({', '.join(f'{o} {s}' for o, s in zip(objectives, senses))}) -> {out}")
    print_table(df[[c for c in display_columns(args.results, objectives) if c in df.columns]], args.limit)
    return 0


def register(sub) -> None:
    p = sub.add_parser("pareto", help="Pareto front of a results dataset; writes RESULTS.dse/pareto.parquet",
                       description=lead(__doc__))
    p.add_argument("results", help="results directory of a sweep or study (or a Parquet file)")
    p.add_argument("--objective", action="append", required=True, metavar="COL:min|max",
                   help="objective column and sense (min or max); repeat for each objective (required)")
    p.add_argument("--all", action="store_true", help="include rows that do not fit (default: fitting rows only)")
    p.add_argument("--out", help="output Parquet file, outside the dataset (default: RESULTS.dse/pareto.parquet, "
                                 "beside the dataset directory so that no dataset glob reads it)")
    p.add_argument("--limit", type=positive_int, default=50, help="front rows to print as text (default: 50)")
    p.add_argument("--json", action="store_true", help=JSON_HELP + " (the whole front, every column)")
    p.set_defaults(func=cmd_pareto)
