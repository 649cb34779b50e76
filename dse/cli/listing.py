"""`dse list WHAT [--json]`: the catalogs, the column schema, the infeasibility reasons and the
economic assumptions (dse.listing). `--json` prints {what, rows: [{column: value}, ...]}."""
from __future__ import annotations

from dse.cli.output import JSON_HELP, emit_json, lead, records
from dse.listing import TEXT_COLUMNS, WHAT, table


def run(args) -> int:
    import pandas as pd
    t = table(args.what)
    if args.json:
        emit_json({"what": args.what, "rows": records(t.reset_index() if args.what == "systems" else t)})
        return 0
    if args.what == "assumptions":  # long bases: one entry per line, grouped by what they feed
        for use, rows in t.groupby("used_for", sort=False):
            print(f"# {use}")
            for r in rows.itertuples(index=False):
                print(f"{r.name:30s} {r.value:>12g} {r.unit:11s} {r.basis}")
        return 0
    shown = list(TEXT_COLUMNS.get(args.what, t.columns))
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_rows", 300,
                           "display.max_colwidth", 90):
        print(t[shown].to_string(index=args.what == "systems", na_rep="-", max_colwidth=90))   # "-": does not apply
    if any(t[c].astype(str).str.len().max() > 90 for c in shown if not pd.api.types.is_numeric_dtype(t[c])):
        print("(long texts cut at 90 characters; --json has them whole)")
    if len(shown) < len(t.columns):
        print(f"({len(shown)} of {len(t.columns)} columns; every one with --json, each explained by `dse list columns`)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("list", help="list a catalog (systems, models, ...), the columns, the reasons or the "
                                    "economic assumptions", description=lead(__doc__))
    p.add_argument("what", choices=WHAT, help=f"what to list; one of {', '.join(WHAT)}")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=run)
