"""A study's progress on a terminal: designs done of the budget, rate, elapsed, ETA (tqdm) and the
best feasible value of each objective so far. Nothing when stderr is not a TTY (or under CI)."""
from __future__ import annotations

import os
import sys

import numpy as np

from dse.study.spec import Study


class Progress:
    def __init__(self, st: Study, designs_before: int, enabled=None):
        if enabled is None:
            enabled = sys.stderr.isatty() and not os.environ.get("CI")
        self.st = st
        self.bar = None
        self.best = np.array([np.inf if s == "min" else -np.inf for s in st.senses])
        self.designs = designs_before
        if enabled:
            from tqdm import tqdm
            self.bar = tqdm(total=st.budget, initial=min(designs_before, st.budget), desc=st.name,
                            unit="design", file=sys.stderr, dynamic_ncols=True, leave=True)

    def update(self, designs: int, rows: dict, repeats: int) -> None:
        """After a batch: `designs` in the storage, `rows` the batch's evaluated rows."""
        if self.bar is None:
            return
        feas = np.asarray(rows["feasible"], dtype=bool)
        for j, (c, s) in enumerate(zip(self.st.objectives, self.st.senses)):
            v = np.asarray(rows[c], dtype=float)[feas]
            v = v[np.isfinite(v)]
            if len(v):
                self.best[j] = min(self.best[j], v.min()) if s == "min" else max(self.best[j], v.max())
        best = ", ".join(f"{c} {b:.4g}" for c, b in zip(self.st.objectives, self.best) if np.isfinite(b))
        self.bar.set_postfix_str(f"best {best or '-'}; {repeats} repeats", refresh=False)
        self.bar.update(max(0, min(designs, self.st.budget) - self.bar.n))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
