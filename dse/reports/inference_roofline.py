"""Study 4: compute- or memory-boundedness of every GEMM of prefill and decode (Kundu et al. 2024) for Llama-2 70B and Mixtral 8x7B on A100, H100 and B200, at batch 1 and a throughput
batch, from `dse.roofline_table` (the same roofline sides as `evaluate_inference`).

The quantitative anchor is the published latency/throughput of Llama-2 70B that the same
inference model reproduces (`dse validate` rows for Llama-2 70B, NeMo and TensorRT-LLM)."""
from __future__ import annotations

import numpy as np
import pandas as pd


NAME = "inference-roofline"
TITLE = "Inference boundedness: every GEMM of prefill and decode on the roofline"
GALLERY = "inference_roofline.png"

SYSTEMS = ["a100-80gb", "h100-sxm", "b200"]
MODELS = ["llama2-70b", "mixtral-8x7b"]
BATCHES = [1, 64]
ISL, OSL = 2048, 128


def validation_rows(report, model_pattern="70B"):
    """Compare with the published Llama-2 70B measurements the inference model is validated on."""
    from dse import validate
    r = validate.inference_results()
    r = r[r["model"].str.contains(model_pattern) & r["error_pct"].notna()]
    for _, row in r.iterrows():
        report.compare(f"{row['id']} {row['model']} {row['system']} {row['metric']} ({row['unit']})",
                       row["measured"], row["predicted"], row["source"] + " (dse/validation/inference.csv)", 25.0)
    return r


def build(report, quick: bool = False) -> None:
    import dse
    tables = []
    for model in MODELS:
        for b in BATCHES[:1] if quick else BATCHES:
            t = dse.roofline_table(model, SYSTEMS, batch=b, isl=ISL, osl=OSL, tp=1)
            tables.append(t.assign(model=model, batch=b))
    t = pd.concat(tables, ignore_index=True)
    # An all-MoE model (every layer MoE, no leading dense layers) has no dense MLP GEMMs; roofline_table
    # lists them for MoE models too, so drop them here.
    from dse import catalog
    all_moe = {m for m in MODELS if catalog.model(m)["experts"] > 0 and catalog.model(m)["dense_layers"] == 0
               and catalog.model(m)["moe_layer_interval"] == 1}
    t = t[~(t["model"].isin(all_moe) & t["op"].isin(["mlp_up_gate", "mlp_down"]))].reset_index(drop=True)
    t["attained_tflops"] = t["attained_flops_per_s"] / 1e12
    summary = (t.groupby(["model", "batch", "system", "phase"], sort=False)
               .agg(ops=("op", "size"), memory_bound=("bound", lambda s: int((s == "memory").sum())),
                    time_s=("time_s", "sum")).reset_index())
    n_val = len(validation_rows(report))

    report.text(f"""
## Setup
Each GEMM (and the fused attention kernel) of one transformer layer in one prefill pass
({ISL} tokens per sequence) and one decode step (KV length {ISL}+{OSL}/2), BF16, one GPU (TP 1; the
per-GPU shapes under TP shrink n or k by t and keep the verdicts), batch {', '.join(map(str, BATCHES))}.
A kernel is memory-bound when its time is set by its bytes over the achievable DRAM bandwidth
rather than its FLOPs over the achievable peak (the roofline sides `evaluate_inference` uses,
with the size-dependent GEMM efficiency). Arithmetic intensity = FLOPs / DRAM bytes; the ridge
point is peak / bandwidth.
""")
    report.table("summary", summary, "Memory-bound kernels per phase (count of ops) and time per layer (s)", ".3g")
    cols = ["model", "batch", "system", "phase", "op", "m", "n", "k", "arithmetic_intensity",
            "ridge_flops_per_byte", "bound", "time_s", "attained_tflops"]
    report.table("gemms", t[cols], "Every GEMM: shape, intensity, ridge point and verdict", ".4g")
    dec = t[t["phase"] == "decode"]
    pre = t[t["phase"] == "prefill"]
    report.text(f"""
## Reading, and comparison with the seed paper
Prefill GEMMs have arithmetic intensity in the hundreds to thousands of FLOP/byte (above every
ridge point: {pre['ridge_flops_per_byte'].min():.0f}-{pre['ridge_flops_per_byte'].max():.0f} FLOP/byte), so they are
compute-bound on all three GPUs ({int((pre['bound'] == 'compute').sum())} of {len(pre)} prefill kernels; the exceptions
are the LM head on the last token and the MoE router). Decode GEMMs at batch 1 have intensity ~1
(GEMV) and are memory-bound everywhere ({int((dec[dec['batch'] == 1]['bound'] == 'memory').sum())} of {len(dec[dec['batch'] == 1])}); at batch 64 the dense
GEMMs reach ~60 FLOP/byte, below the ridge point, but a 64-row GEMM runs the tensor cores at a
fraction of peak (dse's size-dependent GEMM form, fitted to measured kernels by `dse calibrate`), so they sit at the knee
and dse marks most of them compute(-efficiency)-bound; MoE expert GEMMs see only batch x top-k /
experts tokens each (16 at batch 64 for Mixtral) and stay memory-bound, as does attention over the KV cache. This is the picture of Kundu et al. (2024, inference boundedness study): prefill compute-bound, decode
memory-bound, the gap widening from A100 to B200 as the ridge point moves right (A100 153, H100 295,
B200 292 FLOP/byte at BF16). The seed paper plots this without a table of values, so the numeric
comparison above uses the published Llama-2 70B measurements the same model reproduces
({n_val} rows from dse/validation: NeMo end-to-end latencies and TensorRT-LLM first-token latency and
throughput; the 25% target is this study's, not the issue's).
""")

    # ---- figures: one per model, prefill (top) and decode (bottom) on the three rooflines ----
    for model in MODELS:
        fig = roofline_figure(t[t["model"] == model], model)
        name = GALLERY if model == MODELS[0] else f"inference_roofline_{model}.png"
        report.figure(fig, name, f"{model}: rooflines (BF16 peak, DRAM bandwidth) of A100, H100 and B200 with every GEMM "
                      "of one layer (marker: which GEMM; colour: system; filled: batch 64, open: batch 1). Prefill "
                      "(top) sits at the roof, compute-bound; decode (bottom) on the memory slope. GEMMs of equal "
                      "intensity coincide (decode at batch 1: every dense GEMM at ~1 FLOP/byte).")


def roofline_figure(t: pd.DataFrame, model: str):
    """Prefill and decode panels of one model: rooflines per system, one marker per GEMM."""
    from matplotlib.lines import Line2D

    from dse import plotstyle
    fig, axes = plotstyle.figure(2, 1, height_in=8.2, sharex=True, sharey=True)
    ai = np.logspace(-0.5, 4, 200)
    batches = sorted(t["batch"].unique())
    for ax, phase in zip(axes, ("prefill", "decode")):
        for s in SYSTEMS:
            r = t[t["system"] == s].iloc[0]
            color = plotstyle.SYSTEM[s]
            ax.plot(ai, np.minimum(r["peak_flops_per_s"], ai * r["memory_bandwidth_bytes_per_s"]) / 1e12,
                    color=color, linewidth=1.5)
            for b in batches:
                p = t[(t["system"] == s) & (t["phase"] == phase) & (t["batch"] == b)]
                for op, rows in p.groupby("op", sort=False):
                    ax.scatter(rows["arithmetic_intensity"], rows["attained_tflops"], marker=plotstyle.OP_MARKER[op],
                               s=90 if op == "attention" else 55, facecolors=color if b > 1 else "white",
                               edgecolors=color, linewidths=1.3, zorder=3)
        ax.text(0.98, 0.04, _coinciding(t[t["phase"] == phase]), transform=ax.transAxes, ha="right", va="bottom",
                fontsize=plotstyle.MIN_FONT_PT, linespacing=1.3)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{model}: {phase}")
        ax.set_ylabel("attained TFLOP/s")
    axes[1].set_xlabel("arithmetic intensity (FLOP / DRAM byte)")
    ops = list(dict.fromkeys(plotstyle.OP_LABEL[o] for o in t["op"].unique()))
    marker_of = {plotstyle.OP_LABEL[o]: plotstyle.OP_MARKER[o] for o in t["op"].unique()}
    handles = ([Line2D([], [], color=plotstyle.SYSTEM[s], label=s) for s in SYSTEMS]
               + [Line2D([], [], marker=marker_of[lab], color="black", linestyle="", markerfacecolor="white",
                         markersize=10 if marker_of[lab] == "*" else 7, label=lab) for lab in ops]
               + [Line2D([], [], marker="o", color="gray", linestyle="", label=f"filled: batch {batches[-1]}"),
                  Line2D([], [], marker="o", color="gray", markerfacecolor="white", linestyle="", label="open: batch 1")])
    fig.legend(handles=handles, loc="outside lower center", ncol=2)
    return fig


def _coinciding(t: pd.DataFrame) -> str:
    """Which GEMMs share a point (same intensity within 30%, per batch): the markers overlap there."""
    from dse import plotstyle
    lines = []
    for b, sub in t[t["system"] == SYSTEMS[0]].groupby("batch"):
        sub = sub.sort_values("arithmetic_intensity")
        log_ai = np.log10(sub["arithmetic_intensity"].to_numpy())
        groups = np.cumsum(np.r_[True, np.diff(log_ai) > np.log10(1.3)])
        for g in np.unique(groups):
            part = sub[groups == g]
            names = list(dict.fromkeys(plotstyle.OP_SHORT[o] for o in part["op"]))
            if len(names) > 1:
                lines.append(f"batch {b}, ~{part['arithmetic_intensity'].median():.0f} FLOP/B: {', '.join(names)}")
    return ("overlapping points:\n" + "\n".join(lines)) if lines else ""
