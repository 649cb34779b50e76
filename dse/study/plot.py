"""pareto.png: the study's trials and front (one panel per pair of objectives)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dse import plotstyle
from dse.study.spec import Study


def label(col: str) -> str:
    """Axis label from the column schema: its doc and its unit (dse list columns)."""
    from dse import schema
    c = schema.columns().get(col)
    if c is None:
        return col.replace("_", " ")
    unit = "" if c.unit in ("", "1") else f" ({c.unit})"
    return c.doc.split(";")[0].split(" (")[0] + unit


def plot_front(st: Study, frame: pd.DataFrame, front: pd.DataFrame, path: Path, true_front: pd.DataFrame | None = None) -> None:
    """pareto.png: trials and the front. One objective: value per trial. Two: the front as a
    staircase. Three or more: one panel per pair of objectives (the front is non-dominated in the
    full space, so in a projection its points are highlighted, not joined)."""
    import itertools

    feas = frame["feasible"].astype(bool).to_numpy()
    pairs = list(itertools.combinations(range(len(st.objectives)), 2)) or [None]
    cols = min(len(pairs), 3)
    rows = -(-len(pairs) // cols)
    with plotstyle.context():  # the house style (dse.plotstyle), no pyplot global state
        fig, axes = plotstyle.figure(rows, cols, height_in=5.0 * rows if cols == 1 else 4.6 * rows,
                                     width_in=plotstyle.WIDTH_IN if cols == 1 else 4.6 * cols, squeeze=False)
        _draw(fig, axes, st, frame, front, feas, pairs, true_front)
        plotstyle.save(fig, path)


def _draw(fig, axes, st: Study, frame: pd.DataFrame, front: pd.DataFrame, feas: np.ndarray, pairs,
          true_front: pd.DataFrame | None) -> None:
    for ax, pair in zip(axes.flat, pairs):
        if pair is None:
            _single_objective_panel(ax, st, frame, front, feas)
        else:
            _pair_panel(ax, st, frame, front, feas, *pair, true_front=true_front if len(pairs) == 1 else None,
                        staircase=len(pairs) == 1)
    for ax in list(axes.flat)[len(pairs):]:
        ax.set_visible(False)
    fig.suptitle(f"{st.name}: {len(frame)} designs (distinct outer points), {int(feas.sum())} feasible, "
                 f"sampler {st.sampler}")


def _single_objective_panel(ax, st: Study, frame: pd.DataFrame, front: pd.DataFrame, feas: np.ndarray) -> None:
    c = st.objectives[0]
    y = frame[c].to_numpy(dtype=float)
    x = frame["trial"].to_numpy()
    ax.scatter(x[feas], y[feas], s=20, c="#7fa7d4", label="feasible trials")
    ax.scatter(x[~feas], y[~feas], s=20, marker="x", c="#999999", label="infeasible trials")
    if len(front):
        ax.scatter(front["trial"], front[c], s=60, c="#d62728", label="best")
    ax.set_xlabel("trial number (one per design)")
    ax.set_ylabel(label(c))
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="best")


def _pair_panel(ax, st: Study, frame: pd.DataFrame, front: pd.DataFrame, feas: np.ndarray, i: int, j: int,
                true_front: pd.DataFrame | None, staircase: bool) -> None:
    cx, cy = st.objectives[i], st.objectives[j]
    x, y = frame[cx].to_numpy(dtype=float), frame[cy].to_numpy(dtype=float)
    dom = feas.copy()
    if len(front):
        dom &= ~frame["trial"].isin(front["trial"]).to_numpy()
    inf = ~feas & np.isfinite(x) & np.isfinite(y)
    ax.scatter(x[inf], y[inf], s=22, marker="x", c="#aaaaaa", linewidths=0.8,
               label=f"infeasible ({int((~feas).sum())}; least-violating mapping shown)")
    ax.scatter(x[dom], y[dom], s=22, c="#7fa7d4", alpha=0.8, label=f"dominated ({int(dom.sum())})")
    if true_front is not None and len(true_front):
        tf = true_front.sort_values(cx)
        ax.plot(tf[cx], tf[cy], "--", c="#2ca02c", lw=1, drawstyle="steps-post", label="true front (exhaustive)")
    if len(front):
        fr = front.sort_values(cx)
        if staircase:
            ax.plot(fr[cx], fr[cy], "-", c="#d62728", lw=1.2, drawstyle="steps-post")
        ax.scatter(fr[cx], fr[cy], s=46, c="#d62728", edgecolors="black", linewidths=0.5, zorder=3,
                   label=f"Pareto front ({len(fr)} designs)")
    # log where the values span more than plotstyle.LOG_AXIS_SPAN: dominated outliers would
    # otherwise squash the front into a corner of a linear axis
    plotstyle.auto_log(ax, "x", x[feas | inf])
    plotstyle.auto_log(ax, "y", y[feas | inf])
    for axis in ("x", "y"):  # large linear values (dollars) in scientific notation, not run together
        if getattr(ax, f"get_{axis}scale")() == "linear":
            ax.ticklabel_format(axis=axis, style="sci", scilimits=(-3, 4), useMathText=True)
    ax.set_xlabel(label(cx) + (" [min]" if st.senses[i] == "min" else " [max]"))
    ax.set_ylabel(label(cy) + (" [min]" if st.senses[j] == "min" else " [max]"))
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(loc="best")

