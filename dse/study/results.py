"""Study results on disk, all written by dse.store, and readers (read_trials, pareto_rows, front_table).

Layout of a study's run directory `results/<study>/` (see dse.store for the sweep's)::

    manifest.json, journal.log, .ask.lock     the run (manifest, Optuna journal, ask lock)
    trials.parquet, pareto.parquet, pareto.png, exhaustive.parquet   derived summaries
    trials/                                   THE DATASET: part files only, one per asked batch,
                                              same encodings as a sweep (read it with pandas,
                                              pyarrow, polars, DuckDB 'results/<study>/trials/**/*.parquet')

`check_out(study, out)` refuses (one line, nothing created) a directory that holds a sweep,
another study or foreign files; `prepare_out(study, out, manifest)` then creates trials/.
"""
from __future__ import annotations

import datetime as _dt
import math
from pathlib import Path

import numpy as np
import pandas as pd

from dse import store
from dse.errors import ConfigError
from dse.study.spec import Study
from dse.study.storage import redact

ID_COLUMNS = ("trial", "worker", "feasible", "violation", "n_mappings", "n_feasible_mappings")


def ordered(rows: dict, st: Study) -> dict:
    first = ["trial", "worker", "feasible", "violation"] + list(st.objectives)
    keys = [c for c in first if c in rows] + [c for c in rows if c not in first]
    out = {}
    for c in keys:
        v = rows[c]
        a = np.asarray(v, dtype=object) if isinstance(v, pd.Categorical) else np.asarray(v)
        if a.dtype.kind == "O":
            a = np.array([None if x is None or (isinstance(x, float) and math.isnan(x)) else str(x) for x in a], dtype=object)
        out[c] = a
    return out


def make_manifest(st: Study, out: Path) -> dict:
    from dse import __version__
    return {
        "dse_version": __version__,
        "study": {"name": st.name, "file": st.source, "hash": st.hash, "content": st.canonical},
        "objectives": [f"{c}:{s}" for c, s in zip(st.objectives, st.senses)],
        "sampler": st.sampler, "budget": st.budget, "batch_size": st.batch_size, "seed": st.seed,
        "storage": redact(st.storage) or str(out / "journal.log"),
        "best_mapping_rule": "lexicographic over the objectives in file order among feasible mappings",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_revision": store.git_revision(),
        "packages": store.package_versions(),
    }


# ----------------------------------------------------------------------------- results

def check_out(st: Study, out) -> None:
    """ConfigError (one line; nothing touched) if `out` cannot hold study `st`'s results: it is a
    file, a sweep's dataset or sidecar, another study's run directory, or holds foreign files."""
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise ConfigError(f"{p}: exists and is not a directory; give --out a directory path")
    if not p.is_dir() or not any(p.iterdir()):
        return
    if store.is_dataset_dir(p) and p.name != store.STUDY_DATASET or p.name.endswith(store.SIDECAR_SUFFIX) \
            or (store.sidecar(p) / store.MANIFEST).is_file():
        try:
            what = store.read_manifest(p).get("space", {}).get("name")
        except ConfigError:
            what = None
        raise ConfigError(f"{p}: holds a sweep's results{f' (space {what!r})' if what else ''}, not study "
                          f"'{st.name}'; choose another --out")
    found = None
    for f in (p / store.MANIFEST, p / store.STUDY_DATASET / store.MANIFEST):
        m = store._load_json(f)
        if m is not None:
            found = m
            break
    if found is None:
        parts = store.part_files(p / store.STUDY_DATASET) if (p / store.STUDY_DATASET).is_dir() else []
        if parts:
            found = store.read_manifest(parts[0])
    if found is not None:
        other = (found.get("study") or {}).get("name")
        if store.run_kind(found) != "study" or other != st.name:
            raise ConfigError(f"{p}: holds the results of {'study ' + repr(other) if other else 'another run'}, "
                              f"not study '{st.name}'; choose another --out")
        return
    own = {"journal.log", ".ask.lock", store.STUDY_DATASET}
    if not {f.name for f in p.iterdir()} <= own:
        raise ConfigError(f"{p}: not empty and holds no dse study; choose another --out")


def prepare_out(st: Study, out, manifest: dict | None = None) -> Path:
    """check_out, then create the dataset directory `out/trials` (and the manifest, when given)."""
    out = Path(out)
    check_out(st, out)
    tdir = out / store.STUDY_DATASET
    tdir.mkdir(parents=True, exist_ok=True)
    if manifest is not None and not (out / store.MANIFEST).is_file():
        store.write_manifest(out / store.MANIFEST, manifest)
    return tdir


def read_trials(out) -> pd.DataFrame:
    """The union of every worker's Parquet rows, one row per trial (the last written), by trial."""
    tdir = Path(out) / "trials"
    files = store.part_files(tdir) if tdir.is_dir() else []
    if not files:
        return pd.DataFrame(columns=list(ID_COLUMNS))
    import pyarrow as pa
    import pyarrow.parquet as pq
    tables = []
    for f in files:
        t = pq.read_table(f)
        t = t.append_column("_order", pa.array(np.full(t.num_rows, f.stat().st_mtime_ns, np.int64)))
        tables.append(t)
    df = pa.concat_tables(tables, promote_options="permissive").to_pandas()
    df = df.sort_values(["trial", "_order"], kind="stable").drop_duplicates("trial", keep="last")
    return df.drop(columns="_order").reset_index(drop=True)


def pareto_rows(st: Study, frame: pd.DataFrame) -> pd.DataFrame:
    from dse.pareto import pareto_mask
    if frame.empty or "feasible" not in frame:
        return frame.iloc[0:0]
    feas = frame[frame["feasible"].astype(bool)]
    if feas.empty:
        return feas
    v = feas[st.objectives].to_numpy(dtype=float)
    m = pareto_mask(v, st.senses)
    sort_sign = 1 if st.senses[0] == "min" else -1
    front = feas[m]
    return front.iloc[np.argsort(sort_sign * front[st.objectives[0]].to_numpy(dtype=float), kind="stable")]


def write_outputs(st: Study, out: Path, frame: pd.DataFrame, front: pd.DataFrame, manifest: dict,
                  wall_s: float, check: dict | None, side=None) -> None:
    """trials.parquet, pareto.parquet, pareto.png (drawn by `side`, a side worker, when given) and
    the manifest, all in the run directory, outside the dataset `trials/` (whose manifest, if an
    earlier version wrote one there, moves out: the dataset holds Parquet parts only)."""
    (out / store.STUDY_DATASET / store.MANIFEST).unlink(missing_ok=True)
    for name, df in (("trials.parquet", frame), ("pareto.parquet", front)):
        store.write_table_atomic(out / name, df, manifest)
    if len(frame):
        from dse.study.plot import plot_front
        args = (st, frame, front, out / "pareto.png", None if check is None else check.get("_true_front"))
        if side is not None:
            side.submit(plot_front, *args).result()
        else:
            plot_front(*args)
    m = dict(manifest)
    m.update(trials=int(len(frame)), feasible=int(frame["feasible"].astype(bool).sum()) if len(frame) else 0,
             front=int(len(front)), complete=bool(len(frame) >= st.budget),
             last_session_wall_s=round(float(wall_s), 3),
             finished=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    if check is not None:
        m["exhaustive_check"] = {k: v for k, v in check.items() if not k.startswith("_")}
    store.write_manifest(out / store.MANIFEST, m)


def front_table(st: Study, front: pd.DataFrame, max_rows: int = 40) -> str:
    """The front as a text table: objectives first, then the outer choices and the best mapping."""
    if front.empty:
        return "(no feasible point yet)"
    outer_cols = [c for _, c, _, _ in st.params] + [c for c, _, _ in st.derived_outer]
    inner_cols = [c for c in (st.inner.get("axes") or {}) if c in front.columns]
    cols = ["trial"] + list(st.objectives) + [c for c in outer_cols if c in front.columns] + inner_cols
    for extra in ("mfu", "tdp_w"):
        if extra in front.columns and extra not in cols:
            cols.append(extra)
    df = front[cols].copy()
    df = df.loc[~df.drop(columns="trial").astype(str).duplicated()].head(max_rows)
    for c in df.columns:
        if df[c].dtype.kind == "f":
            df[c] = df[c].map(lambda v: f"{v:.4g}")
    return df.to_string(index=False)


