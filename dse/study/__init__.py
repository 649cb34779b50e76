"""Optuna multi-objective studies: outer hardware search x inner exhaustive, vectorized mapping search.

Study file schema (YAML, `studies/*.yaml`; unknown keys anywhere are a ConfigError naming the file,
the key path and the allowed keys)::

    name: quickstart                 # results go to results/<name>/
    description: free text
    workload:                        # what is run on every design point
      kind: training                 # training (default) | inference
      model: llama3.1-8b             # a catalog model (or model columns under fixed)
      train_tokens: 1.0e12           # training: tokens of the whole run (-> time_to_train_*, cost_per_run_usd)
      serve_tokens: 1.0e9            # inference: tokens served (-> cost_per_run_usd)
      fixed: {global_batch: 512, precision: bf16}   # any other fixed input columns
    outer:                           # hardware and cluster: searched by the Optuna sampler
      fixed: {package: cowos-l}      # same syntax as a space file's fixed / axes / constraints
      axes:
        node: [n5, n3, n2]
        compute_dies: {pow2: [1, 8]}
        gpus: {pow2: [1024, 32768]}
      constraints: ["compute_dies * die_area_mm2 <= 4000"]
    inner:                           # mapping: enumerated exhaustively for every outer point
      axes:                          # may refer to workload and outer columns (gpus, scaleup_domain, ...)
        tp: {pow2: [1, 8]}
        dp: {derive: "gpus / (tp * pp)"}
      constraints: ["tp <= scaleup_domain"]
    objectives:                      # columns of the evaluated rows, each min or max
      - time_to_train_days: min
      - cost_per_run_usd: min
    constraints: ["tdp_w <= 1500"]   # over output (and hardware) columns; `fits` is always implied
    sampler: nsga2                   # nsga2 (default) | tpe | gp | random
    sampler_options: {}              # keyword arguments of the Optuna sampler (e.g. n_startup_trials)
    budget: 256                      # designs (distinct outer points) in total, all workers together
    batch_size: 32                   # new designs per batch (= NSGA-II population size)
    seed: 0
    storage: null                    # default: Optuna journal file results/<name>/journal.log;
                                     # or postgresql+psycopg://user@host:port/db (shared by workers)

Outer axes of kind values/range/pow2 become Optuna parameters named as the axes (`range` -> int,
`pow2` and lists -> categorical over the listed values: `gpus` takes 1024, 2048, ..., as written;
measured on the enumerable flagship, TPE's search quality is the same as with an integer log2
exponent); `derive` axes are computed from them; `divisors_of` is not allowed in the outer space
(give the values). Outer constraints are checked on every proposed point (a violating point is an
infeasible design).

Designs, not trials: a design is a distinct outer point. It is evaluated once, by the first trial
that proposes it; a later trial proposing it again (samplers repeat themselves) is a repeat, told
the stored values, constraint and result attribute of its design, never evaluated and without a
row. The budget, the summary line, `dse study show`, the figure and the manifest (`designs`,
`optuna_trials`) count designs. After REPEAT_STREAK repeats in a row the next design is drawn at
random among the unvisited points (seeded: a run is deterministic for its seed), so a discrete
outer space is sampled without replacement, and a study whose every point is a design stops.

Evaluation of one batch (`evaluate_outer`, dse.study.nested): hardware columns are derived once
per batch (`dse.evaluate_hardware` when the outer space has `node`; catalog `system` names
otherwise); each distinct inner mapping space (`Space.from_dict` with the workload, inner fixed
and referenced outer values as fixed columns) is enumerated once into cached integer tables, the
rows of all outer points are gathered from them with index arrays and evaluated in ONE vectorized
call of the workload's evaluator, and the study constraints are applied to the rows.

Best mapping rule (documented, deterministic): among the feasible rows of an outer point (fits,
hardware buildable, every study constraint true, finite objectives), the best is the
lexicographic minimum of the objectives in file order (each turned into minimisation; ties by
the next objective, then by row order). For time vs cost of training the two agree on a fixed
system (cost = capex x time + energy ~ time), so this is also the front of that point's mappings.
An outer point with no feasible row is infeasible: the trial is told with finite penalty values
(the worst feasible value seen so far plus the spread, per objective; 1e30 before any feasible
point) and a positive violation in the trial's `constraints` system attribute (`[v]`: the list that
Optuna's samplers and `optuna.visualization` read as `trial.constraints` and optuna-dashboard
shows), never as FAIL; its
Parquet row is the least-violating mapping. Violations: row constraints unmet on a fitting row
0.001..1 (graded by how far), out of memory 1 + overflow ratio, other infeasible mapping 20,
hardware not buildable 50, empty inner space 100, outer constraint violated 200 + count.

Derived columns added to every row: training `time_to_train_s`, `time_to_train_days`
(train_tokens / tokens_per_s); inference `cost_per_million_tokens_usd` and the other cost
columns when the evaluator does not give them (dse.hardware.workload_costs).

Distributed runs: all workers share one Optuna storage. Asking is serialised by a lock (fcntl
on results/<name>/.ask.lock for the journal file; a PostgreSQL advisory lock for a database):
under it a worker counts the designs in the storage and asks until it has at most budget - count
new ones, so all workers together evaluate exactly `budget` designs, none twice (a repeat of a
design another worker is evaluating stays RUNNING until that design is told, under the same lock,
with all its repeats). Each asked batch is one study user attribute `dse_batch:<n>-<worker>`
(worker, host, pid, asked_at, trials). A RUNNING design whose worker is dead (same host, pid gone)
or that is older than `stale_after_s` (default 900 s) is adopted by the next worker that asks: its
parameters are re-read, it is evaluated again and told, so a killed worker loses nothing.

Optuna's own tools (plain `optuna.load_study` on the journal, `optuna.visualization`,
optuna-dashboard): metric names are the objective columns (`set_metric_names`), parameters are the
outer axes as written, and each trial has one user attribute `dse_result` = {feasible, violation,
mapping: the best mapping's inner axes, metrics: objectives and key metrics (step time, MFU,
memory, TDP, ...), repeat_of: the design's trial number on a repeat}, written once, at tell time.

Parquet (every file through dse.store): each batch's rows are written, before the trials are
told, as one part file of the dataset results/<name>/trials/ (dse.store.write_part; part id = first trial number x 10^6 +
random, unique across workers); `trial` and `worker` columns identify the rows, and readers
keep one row per trial (the last written): one row per design. After a run: results/<name>/trials.parquet (the
deduplicated union), pareto.parquet (feasible non-dominated rows), pareto.png, manifest.json.

API: load_study(path_or_mapping) -> Study; run_study(study, budget=None, storage=None,
out=None, worker=False, seed=None, exhaustive_check=False, progress=None) -> StudyResult;
evaluate_outer(study, outer_cols) -> (rows, values, violation); read_trials(out);
pareto_rows(study, frame); run_exhaustive_check(study, out, trials) -> dict; hv_ratio(...);
front_table(study, front); plot_front(...).

Modules: spec (the file -> Study), nested (evaluate_outer), optuna_loop (run_study), storage
(journal / database, locks), results (Parquet outputs, readers), check (exhaustive check), plot,
progress (tqdm on a terminal: designs, rate, elapsed, ETA, best value per objective so far).
"""
from dse.study.check import MAX_EXHAUSTIVE, enumerate_outer, hv_ratio, run_exhaustive_check
from dse.study.nested import (V_EMPTY, V_HW, V_OUTER, V_STRUCT, InnerTables, best_rows,
                              evaluate_outer, evaluate_rows, outer_columns_from_params, row_violations)
from dse.study.optuna_loop import (PENALTY, RESULT_ATTR, StudyResult, _penalties, design_key, distributions, make_sampler,
                                   run_study)
from dse.study.plot import label, plot_front
from dse.study.results import ID_COLUMNS, front_table, make_manifest, ordered, pareto_rows, read_trials, write_outputs
from dse.study.spec import DERIVED, Study, inner_space, load_study
from dse.study.storage import open_storage, redact

__all__ = ["load_study", "run_study", "evaluate_outer", "read_trials", "pareto_rows", "front_table", "Study",
           "StudyResult", "outer_columns_from_params", "open_storage", "hv_ratio", "run_exhaustive_check",
           "enumerate_outer", "plot_front", "label", "write_outputs", "make_sampler", "distributions",
           "inner_space", "InnerTables", "evaluate_rows", "row_violations", "best_rows", "ordered",
           "make_manifest", "redact", "ID_COLUMNS", "DERIVED", "PENALTY", "MAX_EXHAUSTIVE",
           "V_OUTER", "V_EMPTY", "V_HW", "V_STRUCT", "_penalties", "design_key", "RESULT_ATTR"]
