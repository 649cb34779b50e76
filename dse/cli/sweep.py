"""`dse sweep SPACE [--out DIR] [--jobs N] [--backend loky|dask] [--scheduler ADDR] [--overwrite]
[--allow-code-evaluator]`: evaluate every point of a space file into a Parquet dataset (dse.sweep).

A space file names a registered evaluator (training, inference); one that names Python code
(`evaluator: package.module:function`) is refused unless `--allow-code-evaluator` says the file
may run code. Look at the results with `dse show`, `dse top` and `dse pareto`.
"""
from __future__ import annotations

import argparse

from dse.cli.output import lead


def cmd_sweep(args) -> int:
    from dse.sweep import sweep
    res = sweep(args.space, out=args.out, jobs=args.jobs, backend=args.backend, scheduler=args.scheduler,
                overwrite=args.overwrite, allow_code_evaluator=args.allow_code_evaluator,
                max_points=args.max_points)
    skipped = res.chunks - res.chunks_run
    resumed = f", {skipped} of {res.chunks} chunks already done" if skipped else ""
    print(f"dse sweep: {res.rows:,} rows ({res.rows_written:,} new{resumed}) in {res.wall_s:.2f} s "
          f"({res.rows_per_s:,.0f} rows/s) -> {res.path}/")
    return 0


def int_arg(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None


def positive_int(text: str) -> int:
    v = int_arg(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v}: give a positive integer")
    return v


def register(sub) -> None:
    from dse.sweep import BACKENDS, MAX_POINTS
    p = sub.add_parser("sweep", help="evaluate every point of a space file into a Parquet dataset",
                       description=lead(__doc__))
    p.add_argument("space", help="space file (YAML), e.g. spaces/example.yaml")
    p.add_argument("--out", help="results directory (default: results/<space name>/)")
    p.add_argument("--jobs", type=int_arg, default=-1,
                   help="worker processes: a positive number, or -1 for all cores (default: -1)")
    p.add_argument("--backend", choices=BACKENDS, default="loky",
                   help=f"where chunks run; one of {', '.join(BACKENDS)} (default: loky)")
    p.add_argument("--scheduler", help="Dask scheduler address, e.g. tcp://host:8786, with --backend dask "
                                       "(default: a local cluster of --jobs workers)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the dse results --out holds (default: a run of the same space resumes, "
                        "another space is refused)")
    p.add_argument("--max-points", type=int_arg, default=MAX_POINTS,
                   help=f"refuse a space with more points than this (default {MAX_POINTS:,})")
    p.add_argument("--allow-code-evaluator", action="store_true",
                   help="let the space file's `evaluator: package.module:function` import and run that Python "
                        "code (default: refused; only training and inference are allowed)")
    p.set_defaults(func=cmd_sweep)
