"""Per-op breakdown of one design point per system: every kernel of the op inventory with its shape,
FLOPs, bytes, arithmetic intensity, the system's ridge point, whether compute or memory bounds it
and its time per layer (the same roofline sides as the evaluators). Phases: `prefill` and
`decode` (inference), `train` (one training micro-batch, forward; backward is about 2x).

    op_table(model, systems, phases=("prefill", "decode"), batch=1, isl=2048, osl=128, tp=1, ...)
    roofline_table(...)   the inference phases (the `dse roofline` table)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dse import catalog, schema
from dse.columns import CatalogColumn
from dse.errors import ConfigError
from dse.evaluate import inference_inputs, resolved, training_inputs
from dse.catalog import hfconfig
from dse.perf import layer as L
from dse.perf import mixers as X
from dse.perf import roofline as R
from dse.perf.inference import Pass
from dse.workload import Model

PHASES = ("prefill", "decode", "train")


def _frame(model, systems, tp, precision, kv_precision, flash_attention, extra) -> dict:
    n = len(systems)
    cols = {"system": np.asarray(systems, dtype=object), "tp": np.full(n, float(tp)), "gpus": np.full(n, float(tp)),
            "precision": np.full(n, precision, dtype=object),
            "kv_precision": np.full(n, kv_precision or "bf16", dtype=object),
            "flash_attention": np.full(n, bool(flash_attention))}
    if isinstance(model, str) and hfconfig.is_config(model):
        cols["model"] = np.full(n, model, dtype=object)       # a Hugging Face config (dse.catalog.hfconfig)
    elif isinstance(model, str):
        cols["model"] = np.full(n, catalog.resolve_model(model), dtype=object)
    else:
        cols.update({k: np.full(n, v) for k, v in dict(model).items()})
    for k, v in extra.items():
        cols[k] = np.full(n, v, dtype=object if isinstance(v, str) else None)
    return cols


def _phase_ops(phase, w, m, batch, isl, osl, tp, n):
    """(ops, rates) of one phase for the n rows."""
    ep = np.broadcast_to(np.asarray(w["ep"], dtype=np.float32), (n,))
    b = np.full(n, float(batch), dtype=np.float32)
    if phase == "train":
        s = L.Shape(b, m.seq_len, m.seq_len, tp, ep)
        operand = L.GEMM_OPERAND_BYTES[w["precision"]]
        dense, moe = L.layer_shares(m)
        ops = X.attention_projection_ops(m, s, operand) + L.mlp_ops(m, s, operand, dense)
        if np.any(m.is_moe):
            busiest, full = L.routing_load(m, w, ep)
            ops += L.moe_ops(m, s, operand, moe, busiest, token_scale=full)
        ops += [L.fused_attention_op(m, s, 0.0, 1.0, 2.5)] + X.recurrent_ops(m, s, operand, decode=False)
        ops += L.training_head_ops(m, s.tokens, tp)
        hw = {k: w[k] for k in schema.HARDWARE_COLUMNS}
        return ops, R.Rates.of(hw, w["precision"])
    p = Pass(w, m, tp, ep, np.maximum(w["dp"], 1))
    decode = phase == "decode"
    s = L.Shape(b, 1.0 if decode else float(isl), float(isl) + float(osl) / 2.0 if decode else float(isl), tp, ep)
    return p.ops(s, decode) + [L.serving_head_op(m, b, tp)], p.rates(decode)


def op_table(model, systems, phases=("prefill", "decode"), batch=1, isl=2048, osl=128, tp=1, precision="bf16",
             kv_precision=None, flash_attention=True, **extra) -> pd.DataFrame:
    if isinstance(systems, str):
        systems = [s for s in systems.split(",") if s.strip()]
    systems = [catalog.resolve_system(s.strip()) for s in systems]
    if not systems:
        raise ConfigError("systems: empty list; give at least one catalog system, e.g. h100-sxm")
    for ph in phases:
        if ph not in PHASES:
            raise ConfigError(f"phases: unknown phase '{ph}'; use {', '.join(PHASES)}")
    n = len(systems)
    _, work, _ = resolved(_frame(model, systems, tp, precision, kv_precision, flash_attention, extra), "inference")
    w = inference_inputs(work, n)
    w.update({k: v for k, v in training_inputs(work, n).items() if k not in w})
    w = {k: v[:] if isinstance(v, CatalogColumn) else v for k, v in w.items()}  # one small block
    m = Model(w)
    rows = []
    for phase in phases:
        ops, rates = _phase_ops(phase, w, m, batch, isl, osl, w["tp"], n)
        rows += _op_rows(phase, ops, rates, systems)
    return pd.DataFrame(rows)


def _op_rows(phase, ops, rates, systems) -> list:
    n = len(systems)
    at = lambda v, i: float(np.broadcast_to(np.asarray(v, dtype=float), (n,))[i])  # noqa: E731
    rows = []
    for op in ops:
        if op.kind == "elementwise" or op.timing == "stream":
            continue
        flops, nbytes = R.op_flops_bytes(op)
        compute, memory = R.op_compute_memory_s(op, rates)
        peak, gemm = (rates.peak_gemm, rates.gemm) if op.low_precision else (rates.peak_bf16, rates.gemm_bf16)
        time_s = R.op_time_s(op, rates)
        for i, system in enumerate(systems):
            if at(flops, i) <= 0 or at(op.weight, i) <= 0:
                continue  # absent from this model (e.g. the dense MLP of an all-MoE model)
            c, mm = at(compute, i), at(memory, i)
            rows.append({
                "system": system, "phase": phase, "op": op.name, "m": at(op.m, i), "n": at(op.n, i),
                "k": at(op.k, i), "flops": at(flops, i), "bytes": at(nbytes, i),
                "arithmetic_intensity": at(flops, i) / at(nbytes, i), "peak_flops_per_s": at(peak, i),
                "memory_bandwidth_bytes_per_s": at(rates.bandwidth, i),
                "ridge_flops_per_byte": at(peak, i) / at(rates.bandwidth, i),
                "achievable_ridge_flops_per_byte": at(peak, i) * at(gemm.efficiency_max, i)
                / (at(rates.bandwidth, i) * at(gemm.memory_efficiency, i)),
                "bound": "compute" if c >= mm else "memory", "time_s": at(time_s, i),
                "attained_flops_per_s": at(flops, i) / at(time_s, i)})
    return rows


def roofline_table(model, systems, batch=1, isl=2048, osl=128, tp=1, precision="bf16", kv_precision=None,
                   flash_attention=True, **extra) -> pd.DataFrame:
    """The inference phases of `op_table`, by system then phase (the `dse roofline` table)."""
    table = op_table(model, systems, ("prefill", "decode"), batch, isl, osl, tp, precision, kv_precision,
                     flash_attention, **extra)
    order = {s: i for i, s in enumerate(dict.fromkeys(table["system"]))}
    table["_s"] = table["system"].map(order)
    table["_p"] = (table["phase"] == "decode").astype(int)
    return table.sort_values(["_s", "_p"], kind="stable").drop(columns=["_s", "_p"]).reset_index(drop=True)


def roofline_plot(table, path, title: str) -> Path:
    """Log-log roofline (attained FLOP/s against arithmetic intensity) in the house style
    (dse.plotstyle): one roof per system (colour; ridge point in the legend), one marker per GEMM
    (shape: which GEMM, fill: which phase); no per-point text, so nothing overprints."""
    import textwrap

    from matplotlib.lines import Line2D

    from dse import plotstyle

    path = Path(path)
    fills = {"prefill": "full", "decode": "white", "train": "light"}
    with plotstyle.context():
        fig, ax = plotstyle.figure(1, 1, height_in=6.6)
        ai_all = table["arithmetic_intensity"].to_numpy()
        x = np.logspace(np.log10(max(ai_all.min() / 4, 1e-2)), np.log10(ai_all.max() * 4), 200)
        handles = []
        for i, (system, part) in enumerate(table.groupby("system", sort=False)):
            color = plotstyle.SERIES[i % len(plotstyle.SERIES)]
            peak = part["peak_flops_per_s"].max()
            bw = part["memory_bandwidth_bytes_per_s"].iloc[0]
            ax.plot(x, np.minimum(peak, x * bw) / 1e12, color=color, lw=1.6)
            ax.axvline(peak / bw, color=color, ls=":", lw=1.0)
            handles.append(Line2D([], [], color=color, label=f"{system}: ridge {peak / bw:.0f} FLOP/B"))
            for (phase, op), rows in part.groupby(["phase", "op"], sort=False):
                fill = {"full": color, "white": "white", "light": plotstyle.LIGHT.get(color, "white")}[fills.get(phase, "full")]
                ax.scatter(rows["arithmetic_intensity"], rows["attained_flops_per_s"] / 1e12,
                           marker=plotstyle.OP_MARKER.get(op, "o"), s=80 if op == "attention" else 50,
                           facecolors=fill, edgecolors=color, linewidths=1.3, zorder=3)
        ops = list(dict.fromkeys(table["op"]))
        labels = list(dict.fromkeys(plotstyle.OP_LABEL.get(o, o) for o in ops))
        marker_of = {plotstyle.OP_LABEL.get(o, o): plotstyle.OP_MARKER.get(o, "o") for o in ops}
        handles += [Line2D([], [], marker=marker_of[lab], color="black", linestyle="", markerfacecolor="white",
                           markersize=10 if marker_of[lab] == "*" else 7, label=lab) for lab in labels]
        for phase in dict.fromkeys(table["phase"]):
            how = {"full": "filled", "white": "open", "light": "light"}[fills.get(phase, "full")]
            handles.append(Line2D([], [], marker="o", color="gray", linestyle="", label=f"{how}: {phase}",
                                  markerfacecolor={"filled": "gray", "open": "white", "light": "#c7c7c7"}[how]))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP / DRAM byte)")
        ax.set_ylabel("attained TFLOP/s")
        ax.set_title(textwrap.fill(title, 60), fontsize=plotstyle.RC["font.size"])
        ax.grid(True, which="major", alpha=0.3)
        fig.legend(handles=handles, loc="outside lower center", ncol=2)
        plotstyle.save(fig, path)
    return path
