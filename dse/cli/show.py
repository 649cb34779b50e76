"""`dse show RESULTS [--json]`: the manifest and a summary of a results dataset (sweep or study):
what made it, how complete it is, its rows, columns and the range of every numeric output.

`--json` prints {results, kind, space | study, chunks, created, dse_version, git_revision, packages,
rows, part_files, feasible, columns: [{name, type}], summary: [{column, min, max}]}; a column with no
finite value has min and max null.
"""
from __future__ import annotations

from pathlib import Path

from dse.cli.output import JSON_HELP, emit_json, lead, print_table
from dse.query import summarize


def cmd_show(args) -> int:
    info = summarize(Path(args.results))
    if args.json:
        emit_json(info)
        return 0
    print(f"results   {info['results']}")
    if info["kind"] == "study":
        st = info["study"]
        print(f"study     {st['name']}  file={st['file']}  hash={st['hash']}")
        print(f"          objectives {', '.join(st['objectives'])}; sampler {st['sampler']}; "
              f"budget {st['budget']}; seed {st['seed']}")
    else:
        sp = info["space"]
        print(f"space     {sp['name']}  file={sp['file']}  hash={sp['hash']}")
        print(f"          index size {sp['size']:,}; evaluator {sp['evaluator']}; seed {sp['seed']}")
        if "chunks" in info:
            ch = info["chunks"]
            state = "complete" if ch["complete"] else "incomplete (rerun `dse sweep` to resume)"
            print(f"chunks    {ch['done']} of {ch['total']} done (chunk size {ch['chunk_size']:,}); {state}")
    print(f"created   {info['created']}  dse {info['dse_version']}  git {info['git_revision']}")
    print("packages  " + ", ".join(f"{k} {v}" for k, v in info["packages"].items()))
    if not info["part_files"]:
        print("rows      0")
        return 0
    rows, feasible = info["rows"], info["feasible"]
    fits = f"; {feasible:,} fit ({feasible / rows:.1%})" if feasible is not None and rows else ""
    print(f"rows      {rows:,} in {info['part_files']} part files{fits}")
    print(f"columns   {len(info['columns'])}: " + ", ".join(f"{c['name']}:{c['type']}" for c in info["columns"]))
    if info["summary"]:
        import pandas as pd
        summ = pd.DataFrame(info["summary"])
        for side in ("min", "max"):  # a column without any value: '-' (never inf / -inf)
            summ[side] = [("-" if v is None or v != v else f"{v:.6g}") for v in summ[side]]   # None or NaN
        print_table(summ)
    return 0


def register(sub) -> None:
    p = sub.add_parser("show", help="manifest and summary of a results dataset (sweep or study)",
                       description=lead(__doc__))
    p.add_argument("results", help="results directory of a sweep or study (or a Parquet file)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    p.set_defaults(func=cmd_show)
