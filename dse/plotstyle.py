"""The one figure style of dse: every PNG (the reports, `dse roofline`, a study's pareto.png) takes
its size, dpi, fonts, colours and log-axis rule from here.

Sizing rule: the README gallery shows each report figure in a two-column table, about 440 px
wide. A figure is WIDTH_IN x DPI = 900 px wide, so the gallery scales it by ~0.49; a 9 pt font
is 9 x DPI / 72 = 18.75 px in the file and ~9 px in the gallery, the smallest text we allow
(MIN_FONT_PT). Panels are stacked vertically rather than set side by side, so each keeps the full
width. Figures are saved at their exact size (no tight bounding box) with constrained layout.

Log-axis rule (`auto_log`): an axis whose positive values span more than LOG_AXIS_SPAN is drawn in
log scale, so dominated outliers cannot squash the interesting points into a corner. Bars are
never drawn on a log axis (a bar's length from an arbitrary baseline means nothing): plot points.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import numpy as np

WIDTH_IN = 6.0        # figure width (inches)
DPI = 150             # -> 900 px wide; README gallery shows ~440 px
PANEL_HEIGHT_IN = 3.3  # one stacked panel
MIN_FONT_PT = 9.0     # 18.75 px in the file, ~9 px at gallery size
LOG_AXIS_SPAN = 4.0   # values spanning more than this ratio go on a log axis

RC = {
    "figure.dpi": DPI, "savefig.dpi": DPI, "figure.figsize": (WIDTH_IN, PANEL_HEIGHT_IN),
    "font.size": 10.0, "axes.titlesize": 11.0, "axes.titleweight": "bold", "axes.labelsize": 10.0,
    "xtick.labelsize": 9.5, "ytick.labelsize": 9.5, "legend.fontsize": MIN_FONT_PT,
    "legend.title_fontsize": MIN_FONT_PT, "figure.titlesize": 11.0,
    "axes.grid": True, "grid.alpha": 0.3, "axes.axisbelow": True,
    "lines.linewidth": 1.8, "lines.markersize": 6.5, "legend.framealpha": 0.9,
    "legend.handlelength": 1.6, "legend.borderaxespad": 0.4, "legend.columnspacing": 1.2,
    "axes.spines.top": False, "axes.spines.right": False,
}

# Colours: tab10, by role, so the same thing has the same colour in every figure.
BLUE, ORANGE, GREEN, RED, PURPLE, BROWN, PINK, GRAY, OLIVE, CYAN = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
LIGHT = {BLUE: "#aec7e8", ORANGE: "#ffbb78", GREEN: "#98df8a", RED: "#ff9896", GRAY: "#c7c7c7"}
SERIES = [BLUE, ORANGE, GREEN, RED, PURPLE, BROWN, PINK, GRAY, OLIVE, CYAN]
ROLE = {"compute": BLUE, "recompute": LIGHT[BLUE], "memory": ORANGE, "comm": RED, "other_comm": LIGHT[RED],
        "bubble": GRAY, "optimizer": OLIVE, "model_state": GRAY, "published": "black", "front": RED}
SYSTEM = {"a100-80gb": BLUE, "h100-sxm": GREEN, "b200": RED, "gb200": PURPLE}
# One marker per kernel of a transformer layer (roofline figures); the MoE layer (routed experts) its own.
OP_MARKER = {"qkv_proj": "o", "attn_out_proj": "s", "attention": "*", "mlp_up_gate": "^", "mlp_down": "v",
             "experts": "X", "router": "P", "lm_head": "D"}
OP_LABEL = {"qkv_proj": "QKV projection", "attn_out_proj": "attention out-projection", "attention": "attention (fused)",
            "mlp_up_gate": "MLP up+gate", "mlp_down": "MLP down", "experts": "MoE layer (routed experts)",
            "router": "MoE router", "lm_head": "LM head"}
OP_SHORT = {"qkv_proj": "QKV", "attn_out_proj": "out-proj", "attention": "attention", "mlp_up_gate": "up+gate",
            "mlp_down": "down", "experts": "experts", "router": "router", "lm_head": "LM head"}


def use() -> None:
    """Apply the style globally (the report modules, which own their process's pyplot)."""
    import matplotlib
    matplotlib.rcParams.update(RC)


@contextmanager
def context():
    """The style for one figure without touching global state (library functions)."""
    import matplotlib
    with matplotlib.rc_context(RC):
        yield


def figure(nrows: int = 1, ncols: int = 1, height_in: float | None = None, width_in: float = WIDTH_IN, **kw):
    """A Figure (no pyplot state) of the house width with constrained layout, and its axes
    (squeezed as plt.subplots does). Call inside `context()` or after `use()`."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width_in, height_in or PANEL_HEIGHT_IN * nrows), dpi=DPI, layout="constrained")
    return fig, fig.subplots(nrows, ncols, **kw)


def save(fig, path) -> Path:
    """Write the PNG atomically (temp file, then rename) at the house dpi and the figure's exact size."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=DPI)
    os.replace(tmp, path)
    return path


def wide_span(values, span: float = LOG_AXIS_SPAN) -> bool:
    """True when the positive finite values span more than `span` (the log-axis rule)."""
    a = np.asarray(values, dtype=float).ravel()
    a = a[np.isfinite(a) & (a > 0)]
    return bool(len(a)) and a.max() / a.min() > span


def auto_log(ax, axis: str, values) -> bool:
    """Log scale on `axis` ('x' or 'y') when `values` span more than LOG_AXIS_SPAN; returns whether."""
    log = wide_span(values)
    if log:
        getattr(ax, f"set_{axis}scale")("log")
        plain_log_ticks(getattr(ax, f"{axis}axis"))
    return log


def plain_log_ticks(axis) -> None:
    """Log-axis tick labels as plain numbers (0.5, 2, 10, 1,000) rather than 10^k: at 1, 2, 3 and 5
    within a decade, 1, 2 and 5 per decade over up to two decades, at the decades only beyond. Call after plotting (it reads
    the axis limits)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    def fmt(v, _pos=None):
        if v <= 0:
            return ""
        for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e4, "k")):
            if v >= scale:
                return f"{v / scale:g}{suffix}" if suffix != "k" else f"{v / 1e3:g}k"
        return f"{v:,.0f}" if v >= 1 else f"{v:.2g}"
    lo, hi = sorted(getattr(axis.axes, f"get_{axis.axis_name}lim")())
    decades = np.log10(hi / lo) if lo > 0 else np.inf
    subs = (1.0, 2.0, 3.0, 5.0) if decades <= 1.0 else (1.0, 2.0, 5.0) if decades <= 2.2 else (1.0,)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(fmt))
    axis.set_minor_formatter(FuncFormatter(lambda v, p: ""))
