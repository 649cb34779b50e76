"""Peak memory of `dse.evaluate_training` on a long DataFrame (20 M rows: 4.5 GiB resident; issue 17
asked for under 6 GiB). The evaluation hands back freed memory before and between its slices
(dse.evaluate._release_freed_memory): without that, the Arrow pages cached by reading the Parquet
file and the C heap's freed block temporaries kept the peak at 6.3 GiB.

    python benchmarks/evaluate_memory.py [--rows 20000000]

The frame (random design points of `dse.bench`, names as categoricals) is written to a Parquet file
first, then a fresh process reads it and evaluates it, so the peak resident memory reported
(`ru_maxrss`) is that of reading the frame and evaluating it, not of building it. A long frame is
evaluated in slices of `dse.evaluate.SLICE_ROWS` rows written into preallocated output columns.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

MAKE = """
import sys, pandas as pd
from dse.bench import random_training_points
pts = random_training_points(int(sys.argv[2]))
pd.DataFrame({k: (pd.Categorical(v) if isinstance(v, pd.Categorical) else v) for k, v in pts.items()}).to_parquet(sys.argv[1])
"""
RUN = """
import resource, sys, time, pandas as pd, dse
df = pd.read_parquet(sys.argv[1])
t0 = time.perf_counter()
out = dse.evaluate_training(df)
wall = time.perf_counter() - t0
gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(f"evaluate_training: {len(df):,} rows in {wall:.1f} s; frame {df.memory_usage().sum() / 2**30:.2f} GiB, "
      f"results {out.memory_usage().sum() / 2**30:.2f} GiB (frame included), peak resident {gib:.2f} GiB")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "frame.parquet"
        subprocess.run([sys.executable, "-c", MAKE, str(path), str(args.rows)], check=True)
        subprocess.run([sys.executable, "-c", RUN, str(path)], check=True)


if __name__ == "__main__":
    main()
