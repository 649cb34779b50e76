"""Exhaustive sweeps: every row of a Space, in chunks, in parallel, into a Parquet dataset.

    sweep(space, out=None, jobs=-1, backend="loky", scheduler=None, overwrite=False,
          progress=None, evaluator=None, chunk_size=None, allow_code_evaluator=False) -> SweepResult

Each chunk is one task: `space.chunk(a, b)` -> evaluator (dict of arrays in, dict out) -> Arrow
table -> `part-<chunk id>.parquet`, written by the worker itself (atomically), so nothing but
row counts travels back. A killed sweep restarted on the same directory skips the chunks whose
part files exist and so ends with every row exactly once.

Backends: "loky" (default; `jobs` processes, -1 = all cores; jobs=1 runs in this process) and
"dask" (`scheduler` = a scheduler address "tcp://host:8786" or a distributed.Client; without one a
LocalCluster with `jobs` workers is started): the same chunks through joblib's dask backend. With
a remote cluster the output directory must be on a filesystem the workers share.

The evaluator is `space.evaluator` unless given: "training" -> dse.evaluate_training,
"inference" -> dse.evaluate_inference (the registered names, dse.space.spec.REGISTERED_EVALUATORS),
or, given here, any callable taking and returning a dict of column arrays (or its
"package.module:function" name). No code from data files: a space whose `evaluator` names other
code ("subprocess:run") is refused before anything is imported unless the caller passes
`allow_code_evaluator=True` (`dse sweep --allow-code-evaluator`).

bench_sweep() runs spaces/gpt3-175b-a100-4096.yaml end to end and prints rows, wall time, rows/s.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

from dse import store
from dse.errors import ConfigError
from dse.space import Space, load_space
from dse.space.spec import EVALUATORS, REGISTERED_EVALUATORS, code_evaluator
from dse.store.lock import process_alive

MAX_POINTS = 10**10  # a larger space is refused unless the caller raises max_points (`--max-points`)
BACKENDS = ("loky", "dask")


@dataclass
class SweepResult:
    path: Path
    rows: int              # rows in the dataset (all sessions)
    rows_written: int      # rows written by this call
    chunks: int            # chunks in the space
    chunks_run: int        # chunks evaluated by this call (the rest were already done)
    wall_s: float

    @property
    def rows_per_s(self) -> float:
        return self.rows_written / self.wall_s if self.wall_s > 0 else float("inf")


def resolve_evaluator(spec):
    """'training' | 'inference' | 'pkg.mod:func' | callable -> callable (imports the named code:
    check a space file's evaluator with `check_space_evaluator` first)."""
    if callable(spec):
        return spec
    spec = REGISTERED_EVALUATORS.get(spec or "training", spec)
    mod, _, fn = str(spec).partition(":")
    try:
        return getattr(import_module(mod), fn)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"evaluator: cannot import '{spec}' ({exc}); use training, inference or "
                          "package.module:function") from None


def check_space_evaluator(space: Space, allow_code_evaluator: bool = False) -> None:
    """Refuse, before anything is imported, a space whose `evaluator` names code outside the registry."""
    if code_evaluator(space.evaluator) and not allow_code_evaluator:
        where = f"{space.source}: " if getattr(space, "source", None) else ""
        raise ConfigError(f"{where}evaluator: '{space.evaluator}' names Python code to import and run, and a space "
                          f"file may name only a registered evaluator ({', '.join(EVALUATORS)}); pass a callable "
                          "as dse.sweep(space, evaluator=...), or allow_code_evaluator=True "
                          "(`dse sweep --allow-code-evaluator`) if you trust the file")


def _evaluator_name(spec) -> str:
    if isinstance(spec, str):
        return spec
    return f"{getattr(spec, '__module__', '?')}:{getattr(spec, '__qualname__', repr(spec))}"


def _run_chunk(space: Space, out: str, chunk_id: int, start: int, stop: int, evaluator, meta: bytes) -> int:
    """One task: enumerate, evaluate, write. Runs in a worker; returns rows written."""
    cols = space.chunk(start, stop)
    n = len(next(iter(cols.values()))) if cols else 0
    if n == 0:
        return store.write_part(out, chunk_id, None)
    import numpy as np

    fn = resolve_evaluator(evaluator)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # infeasible rows are rows, not noise
        result = fn(cols)
    table = store.to_arrow(result, space, metadata={store.META_KEY: meta})
    return store.write_part(out, chunk_id, table)


def _run_span(space: Space, out: str, chunk_id: int, start: int, stop: int, evaluator, meta: bytes,
              parent_pid: int | None = None):
    """`_run_chunk`, also returning the span of the index it covered (for the progress bar). A worker
    whose sweep process died stops here instead of computing chunks nobody will collect."""
    if parent_pid is not None and os.getpid() != parent_pid and not process_alive(parent_pid):
        os._exit(0)
    return stop - start, _run_chunk(space, out, chunk_id, start, stop, evaluator, meta)


SHM = Path("/dev/shm")
_SHM_OWNED = re.compile(r"^(?:joblib_memmapping_folder_|loky-)(\d+)[_-]")


def clean_shared_memory() -> int:
    """Remove joblib/loky shared-memory entries whose creating process is dead (a killed sweep
    leaves them behind); returns how many were removed."""
    removed = 0
    if not SHM.is_dir():
        return 0
    for entry in SHM.iterdir():
        m = _SHM_OWNED.match(entry.name)
        if not m or process_alive(int(m.group(1))):
            continue
        try:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            removed += 1
        except OSError:
            pass  # another user's, or gone meanwhile
    return removed


def _progress_bar(space: Space, todo):
    """A tqdm bar counting rows (index positions) with rows/s; a resumed sweep starts at the rows done."""
    from tqdm.auto import tqdm
    remaining = sum(b - a for _, a, b in todo)
    return tqdm(total=space.size, initial=space.size - remaining, unit="row", unit_scale=True,
                desc=space.name, dynamic_ncols=True, smoothing=0.05)


def _show_progress(progress) -> bool:
    if progress is not None:
        return bool(progress)
    return sys.stderr.isatty() and not os.environ.get("CI")


def default_out(space: Space) -> Path:
    return Path("results") / space.name


def sweep(space, out=None, jobs: int = -1, backend: str = "loky", scheduler=None,
          overwrite: bool = False, progress=None, evaluator=None, chunk_size: int | None = None,
          allow_code_evaluator: bool = False, max_points: int = MAX_POINTS) -> SweepResult:
    """Evaluate every row of `space` (a Space, path or mapping) into the Parquet dataset `out`.

    `evaluator` (a callable, or a registered name) overrides the space's; `allow_code_evaluator`
    lets the space's own `evaluator` name code outside the registry (`package.module:function`)."""
    t0 = time.perf_counter()
    space = load_space(space)
    if space.size > max_points:
        raise ConfigError(f"{space.name}: {space.size:,} points is more than max_points {max_points:,} "
                          "(`--max-points` raises the limit); restrict the axes or raise it knowingly")
    if backend not in BACKENDS:
        raise ConfigError(f"--backend {backend}: unknown; use one of {', '.join(BACKENDS)}")
    if scheduler is not None and backend != "dask":
        raise ConfigError("--scheduler: only with --backend dask")
    if jobs is None or int(jobs) == 0 or int(jobs) < -1:
        raise ConfigError(f"--jobs {jobs}: use a positive number of workers or -1 for all cores")
    if evaluator is None:
        check_space_evaluator(space, allow_code_evaluator)
    ev = evaluator if evaluator is not None else space.evaluator
    fn = resolve_evaluator(ev)
    # Fail early, in this process, on bad names (unknown model/system, ...): evaluate a few rows.
    probe = space.chunk(0, min(space.size, 4))
    if probe and len(next(iter(probe.values()))):
        import numpy as np
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            fn(probe)
    out = Path(out) if out is not None else default_out(space)
    store.check_output(out, space, overwrite)  # refuse another space's directory before any work
    with ExitStack() as stack:
        stack.enter_context(store.writer_lock(out))  # one sweep per dataset; a second is refused in one line
        client = stack.enter_context(_dask_client(jobs, scheduler)) if backend == "dask" else None
        return _sweep(space, out, jobs, client, overwrite, progress, ev, fn, chunk_size, t0)


def _sweep(space, out, jobs, client, overwrite, progress, ev, fn, chunk_size, t0) -> SweepResult:
    import json

    import joblib

    manifest, done = store.prepare_output(out, space, overwrite=overwrite, chunk_size=chunk_size,
                                          evaluator=_evaluator_name(ev))
    cs = int(manifest["chunk_size"])  # a resumed run keeps its chunk boundaries
    meta = json.dumps({k: v for k, v in manifest.items() if k not in ("complete", "rows", "finished")},
                      default=str).encode()
    todo = [(cid, a, b) for cid, a, b in space.chunks(cs) if cid not in done]
    n_chunks = space.n_chunks(cs)
    ev_task = ev if isinstance(ev, str) else fn
    written = 0
    bar = _progress_bar(space, todo) if _show_progress(progress) and todo else None
    try:
        if todo:
            clean_shared_memory()  # what earlier, killed sweeps left in /dev/shm
            me = os.getpid()
            tasks = (joblib.delayed(_run_span)(space, str(out), cid, a, b, ev_task, meta, me) for cid, a, b in todo)
            for span, rows in _execute(tasks, len(todo), jobs, client):
                written += rows
                if bar is not None:
                    bar.update(span)
                    if not space.exact:  # lazy constraints: index positions advance, fewer rows are written
                        bar.set_postfix(written=f"{written:,}", refresh=False)
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - t0
    total = store.count_rows(out)
    store.finish(out, total, wall)
    return SweepResult(out, total, written, n_chunks, len(todo), wall)


def _execute(tasks, n_tasks: int, jobs, client=None):
    """Run delayed tasks (a lazy iterable of n_tasks; loky, or Dask when a client is given), yielding
    results as they finish; tasks are made as workers take them, so memory does not grow with them."""
    import joblib

    jobs = int(jobs)
    if client is not None:
        with client.as_current(), joblib.parallel_config(backend="dask"):
            yield from joblib.Parallel(n_jobs=-1, return_as="generator_unordered", batch_size=1)(tasks)
        return
    if jobs == 1 or n_tasks == 1:
        for f, args, kwargs in tasks:
            yield f(*args, **kwargs)
        return
    n = min(n_tasks, jobs if jobs > 0 else (os.cpu_count() or 1))
    yield from joblib.Parallel(n_jobs=n, backend="loky", return_as="generator_unordered",
                               batch_size=1, pre_dispatch="2*n_jobs", max_nbytes=None)(tasks)


@contextmanager
def _dask_client(jobs, scheduler):
    """A distributed.Client: the given one, one connected to `scheduler`, or a LocalCluster's."""
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError("--backend dask: needs dask[distributed] (pip install 'dse[cluster]')") from None
    if isinstance(scheduler, Client):
        yield scheduler
        return
    cluster = None
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise ConfigError(f"--scheduler {scheduler}: cannot connect ({exc}); check the address") from None
    else:
        n = int(jobs) if int(jobs) > 0 else (os.cpu_count() or 1)
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None)
        client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def evaluate_toy(cols: dict) -> dict:
    """A trivial, fast evaluator (tests, benchmarks of the sweep machinery itself).

    Adds `toy_gpus_used` (product of the parallel degrees present) and `toy_score_s`
    (a deterministic float of the row), and `fits`.
    """
    import numpy as np

    n = len(next(iter(cols.values())))
    used = np.ones(n, dtype=np.int64)
    for k in ("tp", "pp", "dp", "cp", "ep"):
        if k in cols:
            used = used * np.asarray(cols[k], dtype=np.int64)
    score = np.zeros(n)
    for i, (k, v) in enumerate(cols.items()):
        a = np.asarray(v.codes if hasattr(v, "codes") else v, dtype=float)
        score += (i + 1) * a
    out = dict(cols)
    out["toy_gpus_used"] = used
    out["toy_score_s"] = 1.0 / (1.0 + score)
    out["fits"] = used <= (np.asarray(cols["gpus"]) if "gpus" in cols else used)
    return out


# ----------------------------------------------------------------------------- benchmark

GPT3_SPACE = "gpt3-175b-a100-4096.yaml"


def spaces_dir() -> Path:
    """The repository's spaces/ directory (next to the dse package), else ./spaces."""
    here = Path(__file__).resolve().parent.parent / "spaces"
    return here if here.is_dir() else Path("spaces")


def bench_sweep(space=None, out=None, jobs: int = -1, backend: str = "loky", keep: bool = False) -> dict:
    """Sweep the GPT-3 175B / 4,096 A100 space end to end; print and return rows, wall time, rows/s."""
    path = space or spaces_dir() / GPT3_SPACE
    tmp = None
    if out is None:
        tmp = tempfile.mkdtemp(prefix="dse-bench-sweep-")
        out = Path(tmp) / "results"
    try:
        res = sweep(path, out=out, jobs=jobs, backend=backend, overwrite=True, progress=False)
        size_mb = sum(f.stat().st_size for f in Path(out).iterdir()) / 1e6
        import numpy as np  # one numpy pass over as many floats: a machine-speed yardstick for ratios
        x = np.random.default_rng(1).random(res.rows)
        t1 = time.perf_counter()
        np.sqrt(x * 2.0 + 1.0).sum()
        baseline = time.perf_counter() - t1
        workers = jobs if jobs > 0 else (os.cpu_count() or 1)
        figures = {"model": f"sweep {Path(str(path)).stem}", "space": str(path), "rows": res.rows,
                   "chunks": res.chunks, "seconds": res.wall_s, "wall_s": round(res.wall_s, 2),
                   "rows_per_s": res.rows_per_s, "parquet_mb": round(size_mb, 1), "jobs": workers,
                   "numpy_baseline_s": baseline, "cost_vs_one_numpy_pass": res.wall_s / baseline}
        print(f"sweep {Path(str(path)).name}: {res.rows:,} rows in {res.wall_s:.2f} s wall "
              f"({res.rows_per_s:,.0f} rows/s, {workers} workers, {res.chunks} chunks, "
              f"{size_mb:.0f} MB Parquet)")
        return figures
    finally:
        if tmp is not None and not keep:
            shutil.rmtree(tmp, ignore_errors=True)
