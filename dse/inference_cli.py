"""`dse roofline MODEL --systems a,b,c --batch B --isl I --osl O [--out DIR]`: which GEMMs of prefill
and decode are compute-bound and which memory-bound on each system, as a table and a roofline plot."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dse.errors import ConfigError


def roofline_plot(table, path, title: str) -> Path:
    """Log-log roofline (attained FLOP/s against arithmetic intensity): one roof and ridge line per
    system, one labelled point per GEMM and phase."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(10, 6.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    ai_all = table["arithmetic_intensity"].to_numpy()
    x = np.logspace(np.log10(max(ai_all.min() / 4, 1e-2)), np.log10(ai_all.max() * 4), 200)
    markers = {"prefill": "o", "decode": "s"}
    for i, (system, part) in enumerate(table.groupby("system", sort=False)):
        color = colors[i % len(colors)]
        peak = part["peak_flops_per_s"].max()
        bw = part["memory_bandwidth_bytes_per_s"].iloc[0]
        ridge = peak / bw
        ax.plot(x, np.minimum(peak, x * bw), color=color, lw=1.8,
                label=f"{system}: {peak / 1e12:,.0f} TFLOP/s, {bw / 1e12:.2f} TB/s")
        ax.axvline(ridge, color=color, ls=":", lw=1.0)
        ax.annotate(f"ridge {ridge:.0f}", (ridge, peak), textcoords="offset points", xytext=(3, 4),
                    color=color, fontsize=7)
        for phase, rows in part.groupby("phase", sort=False):
            ax.scatter(rows["arithmetic_intensity"], rows["attained_flops_per_s"], color=color,
                       marker=markers.get(phase, "o"), s=28, zorder=3, edgecolor="black", linewidth=0.4)
            for j, (_, r) in enumerate(rows.iterrows()):  # stagger labels of points that share an intensity
                ax.annotate(f"{phase[0].upper()}:{r['op']}", (r["arithmetic_intensity"], r["attained_flops_per_s"]),
                            textcoords="offset points", xytext=(4, 6 - 7 * (j % 4)), fontsize=6, color=color)
    for phase, marker in markers.items():
        ax.scatter([], [], marker=marker, color="gray", edgecolor="black", linewidth=0.4,
                   label=f"{phase} GEMMs ({phase[0].upper()}:)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte of DRAM traffic)")
    ax.set_ylabel("attained throughput (FLOP/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def run(args) -> int:
    import pandas as pd

    from dse.optable import roofline_table

    for name in ("batch", "isl", "osl", "tp"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name}: must be a positive integer, got {getattr(args, name)}")
    table = roofline_table(args.model, args.systems, batch=args.batch, isl=args.isl, osl=args.osl, tp=args.tp,
                           precision=args.precision, kv_precision=args.kv_precision)
    shown = table[["system", "phase", "op", "m", "n", "k", "flops", "bytes", "arithmetic_intensity",
                   "ridge_flops_per_byte", "bound", "time_s"]].copy()
    shown["time_us"] = shown.pop("time_s") * 1e6
    with pd.option_context("display.width", 200, "display.max_rows", 500, "display.float_format", "{:.4g}".format):
        print(f"{args.model}: batch {args.batch}, isl {args.isl}, osl {args.osl}, tp {args.tp}, "
              f"{args.precision} (per layer; decode at the mean KV length isl + osl/2)")
        print(shown.to_string(index=False))
    out = Path(args.out)
    stem = f"roofline_{args.model}_b{args.batch}_i{args.isl}_o{args.osl}".replace("/", "_")
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{stem}.csv", index=False)
    png = roofline_plot(table, out / f"{stem}.png",
                        f"Roofline: {args.model}, batch {args.batch}, isl {args.isl}, osl {args.osl}, "
                        f"TP {args.tp}, {args.precision}")
    print(f"wrote {png}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("roofline", help="compute- vs memory-bound GEMMs of inference per system (table + PNG)")
    p.add_argument("model", help="catalog model name (see `dse list models`)")
    p.add_argument("--systems", default="a100-80gb,h100-sxm,b200", help="comma-separated catalog systems")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--isl", type=int, default=2048, help="input (prompt) tokens per sequence")
    p.add_argument("--osl", type=int, default=128, help="output tokens per sequence")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp8", "fp4"])
    p.add_argument("--kv-precision", dest="kv_precision", default="bf16", choices=["bf16", "fp8", "fp4"])
    p.add_argument("--out", default="results/roofline", help="directory for the PNG and CSV")
    p.set_defaults(func=run)
