"""Parquet result datasets: a directory that holds nothing but Parquet parts, and a sidecar beside it.

Layout of a sweep's results (`dse sweep SPACE --out results/example`)::

    results/example/                  THE DATASET: only part-NNNNNN.parquet files, so that
        part-000000.parquet           pd.read_parquet(dir), pyarrow.dataset.dataset(dir),
        part-000001.parquet           pl.read_parquet(dir) / pl.scan_parquet(dir) and DuckDB
                                      read_parquet('dir/**/*.parquet') read exactly its rows
    results/example.dse/              the sidecar (never read as data; `sidecar(dir)`):
        manifest.json                 run manifest (dse version, space file + hash + canonical content,
                                      seed, evaluator, chunking, package versions, creation time, git
                                      revision) and run state (complete, rows)
        part-000007.empty             a chunk that has no rows (resume skips it)
        pareto.parquet                derived outputs: `dse pareto` writes here by default
    results/.example.part-*.tmp       a part being written (temp file beside the dataset, then renamed
                                      into it: a part either is complete or does not exist)

A study's run directory (`dse study run --out results/quickstart`) holds the Optuna journal, the
manifest and the study's summaries (trials.parquet, pareto.parquet, pareto.png,
exhaustive.parquet); its dataset is the subdirectory `trials/` (parts only, same encodings), and
`trials.dse/` beside it takes `dse pareto` outputs. `dataset_dir(path)` resolves a study run
directory to its `trials/`, so `dse show | top | pareto` and `read_results` take either.
Directories of earlier versions (manifest.json and .empty markers inside the dataset) are still
read; a resumed sweep moves them into the sidecar.

Every part file carries the manifest in its Parquet key-value metadata (key `dse.manifest`), so a
copied dataset directory keeps it. Columns: the space's columns, then the evaluator's outputs;
string columns dictionary-encoded (categories in pandas and polars), integers at least int32 in
files (so products of parallel degrees do not wrap in pandas or polars), floats as float64 with
units in their names. Catalog columns the evaluator resolves from a `model`/`system` name
(layers, hidden, peak_bf16_flops_per_s, ...) are not stored unless the space gives them.

Resume and refusal: a dataset whose manifest has the same space hash resumes (finished chunks are
skipped); another space's dataset is refused (ConfigError) unless `overwrite=True`, which deletes
only dse's own files (part-NNNNNN.parquet in the dataset; manifest, markers and derived outputs in
the sidecar); a study's directory is always refused. Nothing is created before the checks pass.

API: read_results(path, columns=None) -> pandas.DataFrame, read_manifest(path), dataset_dir(path),
sidecar(path), run_kind(path), part_files(path), iter_batches(path, columns) (streaming),
check_output(...), prepare_output(...), write_part(...), to_arrow(...), write_table_atomic(path,
table_or_frame, manifest) (single files: trials.parquet, pareto.parquet, ...), check_derived_out(...),
write_manifest(path, dict), git_revision(), package_versions().
"""
from __future__ import annotations

from dse.store.layout import (  # noqa: F401
    _migrate_legacy,
    _remove_own_files,
    _temp_files,
    check_output,
    done_chunks,
    finish,
    part_files,
    prepare_output,
)
from dse.store.lock import writer_lock  # noqa: F401
from dse.store.manifest import (  # noqa: F401
    _OWN_SIDECAR,
    COMPRESSION,
    MANIFEST,
    META_KEY,
    PART_RE,
    SIDECAR_SUFFIX,
    STUDY_DATASET,
    _has_parts,
    _is_study_run,
    _load_json,
    _manifest_file,
    dataset_dir,
    git_revision,
    make_manifest,
    package_versions,
    read_manifest,
    run_kind,
    sidecar,
    write_manifest,
)
from dse.store.parquet import (  # noqa: F401
    PARETO_KEY,
    _catalog_columns,
    _small_int,
    _temp_path,
    _to_arrow_array,
    check_derived_out,
    default_derived_out,
    is_dataset_dir,
    to_arrow,
    widen_ints,
    write_part,
    write_table_atomic,
)
from dse.store.read import (  # noqa: F401
    _check_columns,
    _schema,
    count_rows,
    iter_batches,
    read_results,
    result_files,
    take_rows,
)
