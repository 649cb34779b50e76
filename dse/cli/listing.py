"""`dse list WHAT`: the catalogs, the column schema and the infeasibility reasons (dse.listing)."""
from __future__ import annotations

from dse.listing import WHAT, table


def run(args) -> int:
    import pandas as pd
    t = table(args.what)
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_rows", 300,
                           "display.max_colwidth", 90):
        print(t.to_string(index=args.what == "systems"))
    return 0


def register(sub) -> None:
    p = sub.add_parser("list", help="list a catalog (systems, models, frameworks, ...), the columns or the reasons")
    p.add_argument("what", choices=WHAT, help="what to list")
    p.set_defaults(func=run)
