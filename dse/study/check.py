"""The search-quality check: sweep the whole outer space and compare the study's front with the
true front by the hypervolume ratio (common reference point)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dse import store
from dse.errors import ConfigError
from dse.study.nested import evaluate_outer
from dse.study.results import ordered, pareto_rows
from dse.study.spec import Study

MAX_EXHAUSTIVE = 500_000          # outer points the exhaustive check will enumerate
_HASH_KEY = b"dse.study_hash"


def enumerate_outer(st: Study) -> dict:
    """Every point of the outer space (ConfigError if it is not enumerable)."""
    sp = st.outer_space
    if sp is None or not sp.exact:
        raise ConfigError(f"{st.source}: outer: --exhaustive-check needs an enumerable outer space "
                          "(values/range/pow2/derive axes, constraints linking fewer than 20M combinations)")
    if sp.size > MAX_EXHAUSTIVE:
        raise ConfigError(f"{st.source}: outer: {sp.size:,} points is too many for --exhaustive-check "
                          f"(limit {MAX_EXHAUSTIVE:,}); restrict the outer axes")
    ch = sp.chunk(0, sp.size)
    return {k: (np.asarray(v, dtype=object) if isinstance(v, pd.Categorical) else np.asarray(v)) for k, v in ch.items()}


def _outer_keys(st: Study, df: pd.DataFrame) -> set:
    """One string per row identifying its outer point (the sampled parameters' values)."""
    cols = [np.asarray(df[c], dtype=object).astype(str) for _, c, _, _ in st.params]
    return set("|".join(t) for t in zip(*cols)) if cols else set()


def exhaustive_frame(st: Study, out: Path, batch: int = 512) -> pd.DataFrame:
    """The best mapping of every outer point (results/<study>/exhaustive.parquet, reused while the
    study file is unchanged). Independent of the study's trials, so it may run beside them."""
    path = Path(out) / "exhaustive.parquet"
    if path.is_file():
        import pyarrow.parquet as pq
        meta = pq.read_schema(path).metadata or {}
        if meta.get(_HASH_KEY, b"").decode() == st.hash:
            return pd.read_parquet(path)
    allo = enumerate_outer(st)
    N = len(next(iter(allo.values())))
    cache: dict = {}
    parts = []
    for s in range(0, N, batch):
        rows, _values, _violation = evaluate_outer(st, {k: v[s:s + batch] for k, v in allo.items()}, cache)
        parts.append(pd.DataFrame(ordered(rows, st)))
    ex = pd.concat(parts, ignore_index=True)
    store.write_table_atomic(path, ex, metadata={_HASH_KEY: st.hash})
    return ex


class SideWorker:
    """One worker process beside the study's serial ask/tell loop (which keeps one core busy): the
    exhaustive sweep runs there while trials are asked, then the figure is drawn there with
    matplotlib already imported. fork where available (the worker starts with dse imported)."""

    def __init__(self):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
        self.pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context(method))

    def submit(self, fn, *args):
        return self.pool.submit(fn, *args)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def _sweep_then_warm(st: Study, out: Path) -> None:
    exhaustive_frame(st, out)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401  (for the figure drawn next in this process)


def start_exhaustive(st: Study, out: Path) -> tuple:
    """Start the exhaustive sweep beside the study: (side worker, future)."""
    enumerate_outer(st)  # refuse a non-enumerable outer space here, in one line, before any work
    side = SideWorker()
    return side, side.submit(_sweep_then_warm, st, Path(out))


def run_exhaustive_check(st: Study, out: Path, trials: pd.DataFrame, batch: int = 512) -> dict:
    """Sweep the whole outer space; hypervolume ratio of the study's front to the true front."""
    from dse.pareto import pareto_mask
    ex = exhaustive_frame(st, out, batch)
    N = len(ex)
    feas = ex[ex["feasible"].astype(bool)]
    tv = feas[st.objectives].to_numpy(dtype=float)
    true_front = feas[pareto_mask(tv, st.senses)] if len(feas) else feas
    sf = pareto_rows(st, trials)
    result = hv_ratio(st, true_front[st.objectives].to_numpy(dtype=float), sf[st.objectives].to_numpy(dtype=float))
    space_keys = _outer_keys(st, ex)
    study_keys = _outer_keys(st, trials) if len(trials) else set()
    result.update(outer_points=int(N), trials=int(len(trials)),
                  unique_outer_points_evaluated=int(len(study_keys & space_keys)),
                  evaluated_fraction=float(len(study_keys & space_keys) / N) if N else 0.0,
                  trials_fraction=float(len(trials) / N) if N else 0.0,
                  true_front_points=int(len(true_front)), study_front_points=int(len(sf)),
                  feasible_outer_points=int(len(feas)))
    result["_true_front"] = true_front   # for the plot; not written to the manifest
    return result


def hv_ratio(st: Study, true_vals: np.ndarray, study_vals: np.ndarray) -> dict:
    """Hypervolume of the study front / the true front, with a common reference point: per objective,
    the worst value over both fronts plus 10% of their combined range (in the objective's sense)."""
    from dse.pareto import hypervolume
    k = len(st.objectives)
    if k < 2:
        raise ConfigError("exhaustive check: the hypervolume ratio needs 2 or 3 objectives")
    if len(true_vals) == 0:
        return {"hypervolume_ratio": float("nan"), "reference_point": None}
    both = np.vstack([true_vals, study_vals]) if len(study_vals) else true_vals
    sign = np.array([1.0 if s == "min" else -1.0 for s in st.senses])
    m = both * sign
    worst, best = m.max(axis=0), m.min(axis=0)
    ref_min = worst + 0.1 * np.where(worst > best, worst - best, np.maximum(np.abs(worst), 1.0))
    ref = ref_min * sign
    hv_true = hypervolume(true_vals, ref, st.senses)
    hv_study = hypervolume(study_vals, ref, st.senses) if len(study_vals) else 0.0
    return {"hypervolume_ratio": float(hv_study / hv_true) if hv_true > 0 else float("nan"),
            "hypervolume_study": float(hv_study), "hypervolume_true": float(hv_true),
            "reference_point": [float(x) for x in ref]}
