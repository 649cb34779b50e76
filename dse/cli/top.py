"""`dse top RESULTS --by COL [-k K] [--asc] [--all] [--json]`: the k best rows of a results dataset
by one column, streamed (dse.query.top_rows); by default only feasible rows (`fits`).

`--json` prints {results, by, ascending, feasible_only, k, rows: [row, ...]} with every column.
"""
from __future__ import annotations

from dse.cli.output import JSON_HELP, emit_json, lead, print_table, records
from dse.cli.sweep import positive_int


def cmd_top(args) -> int:
    from dse.query import display_columns, top_rows
    df = top_rows(args.results, args.by, args.k, args.asc, feasible_only=not args.all)
    if args.json:
        emit_json({"results": str(args.results), "by": args.by, "ascending": args.asc,
                   "feasible_only": not args.all, "k": args.k, "rows": records(df)})
        return 0
    print(f"top {len(df)} of {args.results} by {args.by} ({'ascending' if args.asc else 'descending'})")
    print_table(df[[c for c in display_columns(args.results, [args.by]) if c in df.columns]])
    return 0


def register(sub) -> None:
    p = sub.add_parser("top", help="the k best rows of a results dataset by one column",
                       description=lead(__doc__))
    p.add_argument("results", help="results directory of a sweep or study (or a Parquet file)")
    p.add_argument("--by", required=True, help="numeric column to rank by (required), e.g. tokens_per_s")
    p.add_argument("-k", type=positive_int, default=10, help="rows to keep, a positive integer (default: 10)")
    p.add_argument("--asc", action="store_true", help="smallest first (default: largest first)")
    p.add_argument("--all", action="store_true", help="include rows that do not fit (default: fitting rows only)")
    p.add_argument("--json", action="store_true", help=JSON_HELP + " (every column of each row)")
    p.set_defaults(func=cmd_top)
