"""`dse calibrate`: fit the op families' time models to measured kernel latencies (dse.calibrate)."""
from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path

from dse.calibrate import FAMILIES
from dse.cli.output import lead, plain, print_table


def default_catalog_path() -> Path:
    return Path(str(resources.files("dse.catalog").joinpath("efficiency.csv")))


# The fits that land on flat optima move with the last bits of a sum, and least squares with
# finite-difference Jacobians amplifies those: numpy's AVX-512 loops and OpenBLAS's per-CPU kernels
# sum in other orders than their AVX2 ones, so an AVX-512 machine fitted 117 of the catalog's 1,328
# parameters differently in the third digit (a few far more: flat directions). Fitting with numpy's
# dispatch held to AVX2 (x86-64-v3) and OpenBLAS's Haswell kernels gives the committed catalog on
# AVX2 and AVX-512 machines alike. Both are read when numpy loads, so the command reruns itself.
PINNED_NUMERICS = {
    "NPY_DISABLE_CPU_FEATURES": "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL "
                                "AVX512_ICL AVX512_SPR X86_V4",
    "OPENBLAS_CORETYPE": "Haswell",
}


def pinned_rerun(argv) -> int | None:
    """The exit code of this command rerun with PINNED_NUMERICS, or None where they already hold
    (or off x86-64, where there is nothing to pin)."""
    import os
    import platform
    import subprocess
    if platform.machine().lower() not in ("x86_64", "amd64") or \
            all(os.environ.get(k) == v for k, v in PINNED_NUMERICS.items()):
        return None
    env = dict(os.environ, **PINNED_NUMERICS)
    return subprocess.run([sys.executable, "-m", "dse.cli", *argv], env=env).returncode


def run(args) -> int:
    import pandas as pd

    rerun = pinned_rerun(args.argv) if getattr(args, "argv", None) is not None else None
    if rerun is not None:
        return rerun

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
                       description=lead(__doc__))
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
