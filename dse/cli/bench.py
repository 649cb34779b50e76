"""`dse bench [training|inference|sweep]`: rows per second on the user's path (dse.bench)."""
from __future__ import annotations

from dse.bench import BENCHES
from dse.cli.output import lead
from dse.cli.sweep import int_arg, positive_int


def run(args) -> int:
    if args.what == "sweep":  # the GPT-3 175B / 4,096-GPU space end to end (prints its own line)
        from dse.sweep import bench_sweep
        bench_sweep(jobs=args.jobs)
        return 0
    names = [args.what] if args.what != "all" else list(BENCHES)
    for name in names:
        r = BENCHES[name](rows=args.rows, repeat=args.repeat)
        print(f"{r['model']}: {r['rows']:,} rows (a DataFrame with string columns) in {r['seconds']:.3f} s = "
              f"{r['rows_per_s']:,.0f} rows/s in one process (one numpy pass over the same rows: {r['numpy_baseline_s'] * 1e3:.1f} ms; "
              f"the model costs {r['cost_vs_one_numpy_pass']:.0f} such passes)")
    return 0


def register(sub) -> None:
    p = sub.add_parser("bench", help="measure evaluation speed (rows/s)", description=lead(__doc__))
    what = ["all", *BENCHES, "sweep"]
    p.add_argument("what", nargs="?", default="all", choices=what,
                   help=f"what to measure; one of {', '.join(what)} (default: all, which excludes sweep)")
    p.add_argument("--rows", type=positive_int, default=1_000_000,
                   help="rows per evaluation benchmark (default: 1000000)")
    p.add_argument("--repeat", type=positive_int, default=5,
                   help="timed repetitions; the median is reported (default: 5)")
    p.add_argument("--jobs", type=int_arg, default=-1,
                   help="worker processes for `bench sweep`: a positive number, or -1 for all cores (default: -1)")
    p.set_defaults(func=run)
