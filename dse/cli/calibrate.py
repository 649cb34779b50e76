"""`dse calibrate`: fit the op families' time models to measured kernel latencies (dse.calibrate)."""
from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

from dse.calibrate import FAMILIES
from dse.cli.output import plain, print_table


def default_catalog_path() -> Path:
    return Path(str(resources.files("dse.catalog").joinpath("efficiency.csv")))


def run(args) -> int:
    import pandas as pd

    from dse.calibrate.run import calibrate, catalog_csv, catalog_table, report
    fits = calibrate(args.kernels, args.family, args.gpu)
    rows = report(fits)
    if args.json:
        json.dump(plain(rows), sys.stdout, indent=1)
        print()
    else:
        table = pd.DataFrame(rows)
        for col in ("median_abs_error_pct", "p90_abs_error_pct"):
            table[col] = table[col].round(1)
        print_table(table, limit=1000)
    if args.write is not None:
        path = Path(args.write) if args.write else default_catalog_path()
        path.write_text(catalog_csv(catalog_table(fits, args.kernels)))
        print(f"wrote {path}", file=sys.stderr)
    return 0


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="fit kernel time models to measured kernel latencies",
                       description=__doc__.splitlines()[0])
    p.add_argument("kernels", help="directory of kernel tables laid out <gpu>/<family>/<framework>/<version>/"
                                   "<table>.parquet (e.g. ../shared/data/kernels)")
    p.add_argument("--family", action="append", choices=list(FAMILIES),
                   help=f"only this op family; repeat for several; one of {', '.join(FAMILIES)} (default: all)")
    p.add_argument("--gpu", action="append",
                   help="only this GPU folder of the kernel directory; repeat for several (default: all)")
    p.add_argument("--json", action="store_true",
                   help="print a list of {family, gpu, points, median_abs_error_pct, p90_abs_error_pct}")
    p.add_argument("--write", nargs="?", const="", default=None, metavar="PATH",
                   help="write the fitted parameters as the efficiency catalog (default path: the "
                        "installed dse/catalog/efficiency.csv); without it nothing is written")
    p.set_defaults(func=run)
