"""Search spaces: a YAML file -> validated `Space` -> chunks of design points (dict of columns).

Space file schema (YAML; unknown keys anywhere are a `ConfigError` naming file, key path and
the allowed keys)::

    name: gpt3-175b-a100-4096      # results go to results/<name>/
    description: free text          # optional
    evaluator: training             # training (default) | inference (other code only with `--allow-code-evaluator`)
    seed: 0                         # recorded in the run manifest
    chunk_size: 131072              # optional: rows per chunk (one Parquet part file each)
    fixed:                          # scalar columns, the same on every row
      model: gpt3-175b
      system: a100-80gb
      gpus: 4096
    axes:                           # ordered: an axis may refer to fixed values and EARLIER axes
      tp: {divisors_of: [gpus, heads]}       # divisors of the gcd of the items
      pp: {divisors_of: layers}              # `heads`, `layers`: catalog dimensions of the fixed model
      cp: [1, 2, 4, 8]                       # a list, same as {values: [...]}
      dp: {derive: "gpus / (tp * pp * cp)"}  # rows where a split does not divide are dropped
      global_batch: {pow2: [256, 2048]}      # powers of two, inclusive
      micro_batch: {divisors_of: "global_batch // dp"}   # per-row divisors of an expression
      zero: {range: [0, 3]}                  # inclusive; optional step: k
      layers_per_stage: {derive: "layers / pp", real: true}  # real: a float column, no integrality
    constraints:                    # boolean expressions over columns; rows where False are dropped
      - "global_batch % dp == 0"
      - "tp > 1 or zero < 3"

Expressions (derive, divisors_of, constraints) are evaluated vectorized over numpy arrays with
a restricted grammar: numbers, strings, column names, + - * / // % **, comparisons (chains
allowed), and/or/not (also & | ~), and the functions min, max, abs, floor, ceil, round, sqrt,
log, log2, log10, exp, where, gcd, lcm, clip, float, int, is_pow2. Besides fixed values and
axes, a name may be a model dimension (`layers`, `heads`, `hidden`, `seq_len`, ...) of a fixed
catalog `model`, or a per-GPU hardware column (`scaleup_domain`, ...) of a fixed `system`;
such catalog constants are used in expressions but not emitted as columns.

Enumeration. Axes that refer to each other (through derive, divisors_of or constraints) form a
group; each group is enumerated once at load time into a small table of its valid rows (valid
by construction: only splits that divide), and independent axes are their own groups. Rows of
the space are the mixed-radix product of the groups (first group most significant; within a
group, nested-loop order of its axes in file order), so row `i` depends only on `i` and
`Space.chunk(start, stop)` only on start and stop. A constraint linking groups whose product
would exceed `MAX_GROUP_ROWS` is applied lazily, per chunk, instead (then chunks may hold fewer
than stop - start rows; `Space.exact` is False).

Public API (stable; `dse.study` builds inner mapping spaces with it):
    load_space(path_or_mapping, name=None) -> Space
    Space.from_dict(mapping, name=None) -> Space
    Space.name, .hash (sha256 of the canonical content: the parsed file as JSON, top-level
        keys sorted, axis order kept; comments and layout do not count), .size (length of the mixed-radix
        index; the row count when .exact), .exact, .columns (ordered output columns),
        .evaluator, .seed, .chunk_size, .source (file path or None), .spec (the validated
        SpaceSpec), .canonical (the canonical mapping that was hashed)
    Space.chunk(start, stop) -> dict[str, array]: numeric columns are numpy arrays (int64,
        float64 or bool); string columns are pandas.Categorical with the axis' categories
        (accepted by dse.evaluate_*; np.asarray gives strings)
    Space.chunks(chunk_size=None) -> iterator of (chunk_id, start, stop)
    Space.n_chunks(chunk_size=None), Space.int_bounds (column -> (min, max)),
    Space.categories (column -> list of strings)
    Space.codes(start, stop) -> like chunk, string columns as integer codes into .categories
        (before lazy constraints), Space.constants (fixed values and catalog constants)

Modules: spec (validated models, parse_spec, parse_axis, check_columns, check_keys, catalog_names), expr (the
expression language), groups (linked axes -> tables of valid rows), enumerate (Space), yaml_io.
"""
from dse.space.enumerate import DEFAULT_CHUNK_SIZE, Space, canonical
from dse.space.expr import CONSTS, FUNCS, Expr, eval_checked
from dse.space.groups import MAX_GROUP_ROWS
from dse.space.spec import (AXIS_EXTRA, AXIS_KINDS, EVALUATORS, TOP_KEYS, AxisSpec, Ctx, SpaceSpec, as_int,
                            catalog_names, check_columns, check_keys, parse_axis, parse_constraints, parse_spec, scalar_ok)
from dse.space.yaml_io import load_space, read_yaml

__all__ = ["load_space", "read_yaml", "Space", "SpaceSpec", "AxisSpec", "Expr", "Ctx", "parse_spec",
           "parse_axis", "parse_constraints", "check_columns", "check_keys", "as_int", "scalar_ok", "catalog_names",
           "eval_checked", "canonical", "DEFAULT_CHUNK_SIZE", "MAX_GROUP_ROWS", "TOP_KEYS", "AXIS_KINDS",
           "AXIS_EXTRA", "EVALUATORS", "FUNCS", "CONSTS"]
