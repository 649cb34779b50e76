"""`dse study run|worker|show`: Optuna multi-objective studies (see dse.study).

    dse study run STUDY [--budget N] [--storage URL] [--out DIR] [--seed S] [--exhaustive-check]
    dse study worker STUDY --storage postgresql+psycopg://user@host:port/db [--budget N] [--seed S]
    dse study show STUDY [--out DIR] [--rows N] [--json]

What each action does is STUDY_ACTIONS (its --help). `show --json` prints {study, out, objectives,
senses, designs, feasible, front_designs, front: [row, ...]}.
"""
from __future__ import annotations

from pathlib import Path

from dse.cli.output import JSON_HELP, emit_json, lead, records
from dse.cli.sweep import positive_int
from dse.errors import ConfigError


# Each action's --help description (the module docstring lists their options).
STUDY_ACTIONS = {
    "run": "Run or resume a study in this process (default storage: the journal file results/<study>/journal.log), "
           "then print the Pareto front and write trials.parquet, pareto.parquet, pareto.png and manifest.json.",
    "worker": "Join a study shared through a database (--storage postgresql+psycopg://...): any number of "
              "workers on any machines, together evaluating the study's budget of designs.",
    "show": "Print the Pareto front from the Parquet rows of every worker (a finished or a running study).",
}


def register(sub) -> None:
    p = sub.add_parser("study", help="Optuna multi-objective studies: hardware x mapping Pareto fronts",
                       description=lead(__doc__))
    ss = p.add_subparsers(dest="study_command", required=True, metavar="ACTION",
                          help="run, worker or show (`dse study ACTION --help` for its options)")
    for name, hlp in (("run", "run or resume a study here (embedded journal storage by default)"),
                      ("worker", "join a shared study (PostgreSQL storage)")):
        q = ss.add_parser(name, help=hlp, description=STUDY_ACTIONS[name])
        q.add_argument("study", help="study file (studies/*.yaml) or its name")
        q.add_argument("--budget", type=positive_int, default=None,
                       help="distinct designs (outer points) to evaluate, all workers together "
                            "(default: the study file's budget)")
        q.add_argument("--storage", default=None, required=(name == "worker"),
                       help="Optuna storage URL, e.g. postgresql+psycopg://user@host:5432/db or journal:FILE "
                            + ("(required)" if name == "worker" else "(default: journal:<out>/journal.log)"))
        q.add_argument("--out", default=None, help="results directory (default: results/<study name>)")
        q.add_argument("--seed", type=int, default=None,
                       help="sampler seed (default: the study file's; workers: a unique one each)")
        q.add_argument("--quiet", action="store_true", help="print only the summary line (default: the front too)")
        if name == "run":
            q.add_argument("--exhaustive-check", action="store_true",
                           help="also sweep the (enumerable) outer space and report the hypervolume ratio "
                                "(default: off)")
        q.set_defaults(func=_run, worker=(name == "worker"))
    q = ss.add_parser("show", help="print the Pareto front of a study's results", description=STUDY_ACTIONS["show"])
    q.add_argument("study", help="study file (studies/*.yaml) or its name")
    q.add_argument("--out", default=None, help="results directory (default: results/<study name>)")
    q.add_argument("--rows", type=positive_int, default=40, help="front rows to print as text (default: 40)")
    q.add_argument("--json", action="store_true", help=JSON_HELP + " (the whole front, every column)")
    q.set_defaults(func=_show)


def _run(args) -> int:
    from dse import study as S
    if args.budget is not None and args.budget < 1:
        raise ConfigError(f"--budget {args.budget}: give a positive number of designs")
    res = S.run_study(args.study, budget=args.budget, storage=args.storage, out=args.out,
                      worker=args.worker, seed=args.seed,
                      exhaustive_check=getattr(args, "exhaustive_check", False),
                      progress=None if not args.quiet else False)
    st = res.study
    feas = int(res.trials["feasible"].astype(bool).sum()) if len(res.trials) else 0
    if not args.quiet:
        print(f"Pareto front of {st.name} ({', '.join(f'{c}:{s}' for c, s in zip(st.objectives, st.senses))}):")
        print(S.front_table(st, res.front))
    repeats = res.n_trials - res.n_designs
    print(f"{st.name}: {res.n_designs} designs in results ({res.evaluated_here} evaluated now, {feas} feasible; "
          f"{res.n_trials} Optuna trials, {repeats} of them repeats told stored values), "
          f"{len(res.front)} designs on the front, {res.wall_s:.1f} s -> {res.out}/")
    if res.check:
        c = res.check
        print(f"exhaustive check: hypervolume ratio {c['hypervolume_ratio']:.4f} (study / true front, common "
              f"reference point), {c['unique_outer_points_evaluated']:,} of {c['outer_points']:,} outer points "
              f"evaluated ({100 * c['evaluated_fraction']:.2f}%), true front {c['true_front_points']} points, "
              f"study front {c['study_front_points']}")
    return 0


def _show(args) -> int:
    from dse import study as S
    st = S.load_study(args.study)
    out = Path(args.out) if args.out else st.default_out
    if not (out / "trials").is_dir():
        raise ConfigError(f"{out}: no study results here; run `dse study run {args.study}` first")
    frame = S.read_trials(out)
    front = S.pareto_rows(st, frame)
    if args.json:
        emit_json({"study": st.name, "out": str(out), "objectives": list(st.objectives), "senses": list(st.senses),
                   "designs": len(frame), "feasible": int(frame["feasible"].astype(bool).sum()) if len(frame) else 0,
                   "front_designs": len(front), "front": records(front)})
        return 0
    print(f"Pareto front of {st.name}: {len(front)} of {len(frame)} designs "
          f"({int(frame['feasible'].astype(bool).sum()) if len(frame) else 0} feasible; a design is a distinct outer point)")
    print(S.front_table(st, front, max_rows=args.rows))
    return 0
