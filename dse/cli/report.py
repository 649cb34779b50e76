"""`dse report NAME|all`: run a seed study and write results/<name>/report.md with its tables and
figures (see dse.reports). `all` runs every study in order and prints the wall time of each."""
from __future__ import annotations

import time


def run(args) -> int:
    from dse.reports import REPORTS, module, run_report
    names = list(REPORTS) if args.name == "all" else [args.name]
    for name in names:
        module(name)  # unknown names: ConfigError before any work
    t_all = time.perf_counter()
    for name in names:
        out = None if args.out is None else (f"{args.out}/{name}" if len(names) > 1 else args.out)
        report = run_report(name, out=out, quick=args.quick, gallery=args.gallery and not args.quick)
        misses = [c for c in report.comparisons if c.within is False]
        errs = [abs(c.error_pct) for c in report.comparisons]
        summary = (f"{len(errs)} comparisons, max |error| {max(errs):.1f}%" if errs else "no comparisons")
        if misses:
            summary += f", {len(misses)} outside target"
        print(f"{name}: {report.out / 'report.md'} ({report.elapsed_s:.1f} s; {summary})", flush=True)
    if len(names) > 1:
        print(f"all: {time.perf_counter() - t_all:.1f} s")
    return 0


def register(sub) -> None:
    p = sub.add_parser("report", help="run a seed study and write results/<name>/report.md with figures",
                       description=__doc__)
    from dse.reports import REPORTS
    p.add_argument("name", help=f"study name ({', '.join(REPORTS)}) or all")
    p.add_argument("--out", default=None, help="output directory (default: results/<name>)")
    p.add_argument("--quick", action="store_true", help="reduced settings (smaller mapping spaces), for tests (default: full settings)")
    p.add_argument("--gallery", action="store_true",
                   help="also refresh the README's figure in docs/gallery/ (for maintainers, in a checkout; "
                        "default: off)")
    p.set_defaults(func=run)
