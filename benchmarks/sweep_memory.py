"""Peak memory of an exhaustive sweep over a 100-million-point space (issue 5: under 2 GiB).

    python benchmarks/sweep_memory.py                      # 100M points, toy evaluator, all cores
    python benchmarks/sweep_memory.py --evaluator training --space spaces/gpt3-175b-a100-4096.yaml
    python benchmarks/sweep_memory.py --points 10_000_000  # a smaller synthetic space

The sweep streams: the space is a mixed-radix index (never materialised), each worker holds one
chunk at a time and writes it to its own Parquet part file, and the parent only counts rows. So
peak memory is (workers + 1) x one chunk's working set, whatever the space size. A background
thread samples the resident memory of this process and all its descendants (psutil, from the
`bench` extra: pip install -e '.[bench]') every 50 ms and reports the peak of the sum and of the
largest single process. Output goes to a temporary
directory that is deleted afterwards.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GIB = 2**30


def synthetic_space(points: int) -> dict:
    """A space of exactly `points` rows with GPT-3-like mapping columns (a x b x c x 4 x 2 x 2)."""
    base = 4 * 2 * 2
    if points % base:
        raise SystemExit(f"--points must be a multiple of {base}")
    rest = points // base
    a = 1000 if rest % 1000 == 0 else 1
    rest //= a
    return {
        "name": f"memory-{points}",
        "evaluator": "dse.sweep:evaluate_toy",
        "fixed": {"model": "gpt3-175b", "system": "a100-80gb", "gpus": 4096},
        "axes": {
            "tp": {"pow2": [1, 8]},
            "cp": [1, 2],
            "sp": [False, True],
            "micro_batch": {"range": [1, a]},
            "global_batch": {"range": [1, rest]},
            "pp": {"derive": "8 / tp"},
            "dp": {"derive": "gpus / (tp * pp * cp)"},
        },
    }


class PeakRSS:
    def __init__(self, interval: float = 0.05):
        try:
            import psutil
        except ImportError:
            raise SystemExit("benchmarks/sweep_memory.py needs psutil: pip install -e '.[bench]'") from None
        self.proc = psutil.Process()
        self.interval = interval
        self.peak_total = self.peak_single = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self):
        import psutil
        total = single = 0
        for p in [self.proc, *self.proc.children(recursive=True)]:
            try:
                rss = p.memory_info().rss
            except psutil.Error:
                continue
            total += rss
            single = max(single, rss)
        self.peak_total = max(self.peak_total, total)
        self.peak_single = max(self.peak_single, single)

    def _run(self):
        while not self._stop.is_set():
            self._sample()
            time.sleep(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=lambda s: int(s.replace("_", "")), default=100_000_000)
    ap.add_argument("--space", help="a space file instead of the synthetic space")
    ap.add_argument("--evaluator", default=None, help="toy (default for the synthetic space), training, ...")
    ap.add_argument("--jobs", type=int, default=-1)
    ap.add_argument("--chunk-size", type=int, default=None)
    args = ap.parse_args(argv)

    from dse.space import load_space
    from dse.sweep import sweep

    space = load_space(args.space) if args.space else load_space(synthetic_space(args.points))
    evaluator = {"toy": "dse.sweep:evaluate_toy", None: None}.get(args.evaluator, args.evaluator)
    tmp = tempfile.mkdtemp(prefix="dse-sweep-memory-")
    try:
        with PeakRSS() as peak:
            res = sweep(space, out=Path(tmp) / "r", jobs=args.jobs, evaluator=evaluator, progress=False,
                        chunk_size=args.chunk_size, overwrite=True)
        disk = sum(f.stat().st_size for f in (Path(tmp) / "r").iterdir())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"space {space.name}: {res.rows:,} rows, {res.chunks} chunks, {res.wall_s:.1f} s wall "
          f"({res.rows_per_s:,.0f} rows/s), {disk / 1e9:.2f} GB Parquet")
    print(f"peak RSS: {peak.peak_total / GIB:.2f} GiB for the process tree "
          f"(largest process {peak.peak_single / GIB:.2f} GiB); limit 2 GiB -> "
          f"{'OK' if peak.peak_total < 2 * GIB else 'OVER'}")
    return 0 if peak.peak_total < 2 * GIB else 1


if __name__ == "__main__":
    sys.exit(main())
