"""Study 3: technology scaling 12 nm -> 1 nm (Kundu et al. 2024) for training and inference.

Accelerators derived from technology (dse.hardware) at a fixed die area and power budget; memory
and network generations advance with the node (dse/catalog/report_node_generations.csv, with the
basis of each row). Training:
GPT-3 175B on 1024 accelerators, best mapping per node (one evaluate_training call), step time
split into compute, memory-bound time, exposed communication and pipeline bubble. The memory-bound
share is measured as a counterfactual: the same rows re-evaluated with unlimited DRAM bandwidth.
Inference: Llama-2 70B on 8 accelerators (TP 8) at batch 1 and 64, TTFT and TPOT breakdowns from
evaluate_inference.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from dse.reports.common import (COMM_PARTS, best_rows, catalog_table, fmt_mapping, space_frame,
                                system_hardware)

NAME = "tech-scaling"
TITLE = "Technology scaling 12 nm -> 1 nm: where training and inference time goes"
GALLERY = "tech_scaling.png"

DIE_AREA_MM2 = 800.0
POWER_W = 1000.0
# node -> memory, scale-up, scale-out, year: the year each logic node carries a flagship accelerator
# paired with the DRAM and link generations shipping that year (source per row in the file).
GENERATIONS = "report_node_generations.csv"
# Real parts the technology model is checked against (node, die area, power, memory; source per row).
ANCHORS = ["a100-80gb", "h100-sxm"]
TRAIN = dict(model="gpt3-175b", gpus=1024, global_batch=1536, precision="bf16")
INFER = dict(model="llama2-70b", gpus=8, tp=8, isl=2048, osl=256, precision="bf16")


def hardware_frame() -> pd.DataFrame:
    gens = catalog_table(GENERATIONS)
    return pd.DataFrame({"node": gens["node"], "memory": gens["memory"], "scaleup": gens["scaleup"],
                         "scaleout": gens["scaleout"], "user_year": gens["year"], "die_area_mm2": DIE_AREA_MM2,
                         "power_w": POWER_W, "compute_dies": 1})


def build(report, quick: bool = False) -> None:
    import dse
    hw = hardware_frame()
    spec = dse.evaluate_hardware(hw)
    mapping = space_frame("tech-scaling", dict(TRAIN, sp=True, zero=1), {
        "tp": [2, 4, 8], "pp": [4, 8, 16] if quick else [2, 4, 8, 16, 32], "dp": {"derive": "gpus / (tp * pp)"},
        "vp": [1, 2, 3], "micro_batch": [1] if quick else [1, 2],
        "recompute": ["selective", "full"] if quick else ["none", "selective", "full"]},
        ["layers % (pp * vp) == 0", "global_batch % (dp * micro_batch) == 0"])
    frame = hw.merge(mapping, how="cross")
    out = dse.evaluate_training(frame)
    best = best_rows(out, ["node"])
    # counterfactual: the same best rows with unlimited DRAM bandwidth -> memory-bound time
    inf = best.drop(columns=[c for c in out.columns if c not in frame.columns]).assign(
        memory_bandwidth_bytes_per_s=1e18)
    ideal = dse.evaluate_training(inf)
    busy = ["compute_s", "recompute_s", "optimizer_s"]
    best["memory_bound_s"] = best[busy].sum(axis=1) - ideal[busy].sum(axis=1).to_numpy()
    best["compute_only_s"] = best[busy].sum(axis=1) - best["memory_bound_s"]
    best["exposed_comm_s"] = best[COMM_PARTS].sum(axis=1)
    parts = ["compute_only_s", "memory_bound_s", "exposed_comm_s", "bubble_s"]
    best["dominant"] = best[parts].idxmax(axis=1).str.replace("_s", "").str.replace("_only", "")
    order = list(hw["node"])
    best = best.set_index("node").loc[order].reset_index()
    best["mapping"] = best.apply(fmt_mapping, axis=1)
    best["speedup_vs_n12"] = best["tokens_per_s"] / best["tokens_per_s"].iloc[0]

    spec_t = spec.rename(columns={"user_year": "year"})[["node", "year", "memory", "scaleup", "scaleout", "peak_bf16_flops_per_s",
                   "memory_bandwidth_bytes_per_s", "memory_capacity_bytes", "scaleup_bandwidth_bytes_per_s",
                   "scaleout_bandwidth_bytes_per_s", "frequency_hz", "tdp_w", "accelerator_cost_usd"]].copy()
    spec_t["peak_bf16_tflops"] = spec_t.pop("peak_bf16_flops_per_s") / 1e12
    spec_t["hbm_tb_per_s"] = spec_t.pop("memory_bandwidth_bytes_per_s") / 1e12
    spec_t["hbm_gib"] = spec_t.pop("memory_capacity_bytes") / 2**30
    spec_t["scaleup_gb_per_s"] = spec_t.pop("scaleup_bandwidth_bytes_per_s") / 1e9
    spec_t["scaleout_gb_per_s"] = spec_t.pop("scaleout_bandwidth_bytes_per_s") / 1e9
    spec_t["flop_per_dram_byte"] = spec_t["peak_bf16_tflops"] * 1e12 / (spec_t["hbm_tb_per_s"] * 1e12)

    # ---- anchors: derived accelerators at the real parts' node, area, power and memory vs the catalog part ----
    parts = catalog_table("report_anchor_parts.csv").set_index("system").loc[ANCHORS].reset_index()
    anchors = parts[["node", "die_area_mm2", "power_w", "memory", "memory_stacks", "scaleup", "scaleout"]]
    peak = system_hardware(ANCHORS)["peak_bf16_flops_per_s"] / 1e12  # the datasheet peak of the catalog part
    job = best[best["node"] == "n7"].iloc[0]
    keep = ["tp", "pp", "vp", "dp", "micro_batch", "recompute", "sp", "zero"]
    jobcols = {k: job[k] for k in keep} | TRAIN
    derived = dse.evaluate_training(anchors.assign(**jobcols))
    real = dse.evaluate_training(pd.DataFrame({"system": ANCHORS}).assign(**jobcols))
    aspec = dse.evaluate_hardware(anchors)
    src = ("NVIDIA A100 / H100 datasheets and whitepapers (dse/catalog/systems.csv, "
           "dse/catalog/report_anchor_parts.csv) and the same job on the catalog part")
    for i, part in enumerate(ANCHORS):
        cat = real.iloc[i]
        report.compare(f"derived {anchors['node'][i]} accelerator vs {part}: peak BF16 (TFLOP/s)",
                       peak[part], aspec["peak_bf16_flops_per_s"].iloc[i] / 1e12, src, 15.0)
        report.compare(f"derived {anchors['node'][i]} accelerator vs {part}: GPT-3 175B step time (s)",
                       cat["step_time_s"], derived["step_time_s"].iloc[i], src, 15.0,
                       note="same mapping; catalog part uses its generation's kernel efficiencies")

    # ---- inference ----
    inf_frame = hw.merge(pd.DataFrame({"batch": [1, 64]}), how="cross").assign(**INFER)
    io = dse.evaluate_inference(inf_frame)
    io["node"] = pd.Categorical(io["node"], order, ordered=True)
    io = io.sort_values(["batch", "node"])

    report.text(f"""
## Setup
Accelerators derived from technology at a fixed {DIE_AREA_MM2:.0f} mm2 compute die and a {POWER_W:.0f} W power
budget (the clock drops until compute + memory + I/O fit it), one die per package with the default
4 memory stacks. Memory and network advance with the node (table below; the basis of each row is
in dse/catalog/report_node_generations.csv: the generation shipping in the node's flagship year).
Training: {TRAIN['model']} on {TRAIN['gpus']} accelerators, global batch {TRAIN['global_batch']}, BF16, best
mapping per node over {len(mapping)} mappings (one `evaluate_training` call of {len(frame)} rows).
Inference: {INFER['model']} on {INFER['gpus']} accelerators (TP {INFER['tp']}), {INFER['isl']} input / {INFER['osl']} output tokens.
""")
    report.table("accelerators", spec_t, "Derived accelerator per node (fixed die area and power)", ".3g")
    report.table("training", best[["node", "mapping", "step_time_s", "compute_only_s", "memory_bound_s",
                                   "exposed_comm_s", "bubble_s", "dominant", "mfu", "speedup_vs_n12"]],
                 "Training step-time breakdown per node (s); memory_bound = time that unlimited DRAM bandwidth removes", ".3g")
    inf_t = io[["node", "batch", "ttft_s", "prefill_compute_s", "prefill_memory_s", "prefill_comm_s", "prefill_overhead_s",
                "prefill_bound", "tpot_s", "decode_compute_s", "decode_memory_s", "decode_comm_s", "decode_overhead_s",
                "decode_bound"]]
    report.table("inference", inf_t, "Inference: TTFT and TPOT breakdowns per node (s)", ".3g")

    first, last = best.iloc[0], best.iloc[-1]
    dom = ", ".join(f"{n}: {d}" for n, d in zip(best["node"], best["dominant"]))
    report.text(f"""
## Reading, and comparison with the seed paper
Training speeds up {last['speedup_vs_n12']:.1f}x from n12 to a10 while peak BF16 grows
{spec_t['peak_bf16_tflops'].iloc[-1] / spec_t['peak_bf16_tflops'].iloc[0]:.0f}x. Dominant term per node: {dom}.
The compute share falls from {first['compute_only_s'] / first['step_time_s']:.0%} to {last['compute_only_s'] / last['step_time_s']:.0%}
of the step while exposed communication and memory-bound time take over, because logic scales faster
than DRAM bandwidth (FLOP per DRAM byte {spec_t['flop_per_dram_byte'].iloc[0]:.0f} -> {spec_t['flop_per_dram_byte'].iloc[-1]:.0f})
and the links. Kundu et al. (2024, their 12 nm to 1 nm technology-scaling study) report the same qualitative
shift (compute-dominated at old nodes, communication and memory increasingly dominant at advanced
nodes, diminishing returns from logic scaling alone); their figure gives no table of values, so the
comparison with it is qualitative; the numeric check (table at the top) is the technology model
itself: an accelerator derived at A100's and H100's node, die area, power and memory against the
real part (peak and the step time of the same job). tech.py is calibrated on exactly these two
parts, so this checks the chain, not an independent prediction. Decode (TPOT) is memory-bound at every
node and improves only when the DRAM generation changes (flat steps where the memory stays the same).
""")

    # ---- figure: training shares + step time (top), inference latencies (bottom) ----
    from dse import plotstyle
    fig, (a1, a2) = plotstyle.figure(2, 1, height_in=8.0)
    x = np.arange(len(order))
    bottom = np.zeros(len(order))
    colors = {"compute_only_s": plotstyle.ROLE["compute"], "memory_bound_s": plotstyle.ROLE["memory"],
              "exposed_comm_s": plotstyle.ROLE["comm"], "bubble_s": plotstyle.ROLE["bubble"]}
    names = {"compute_only_s": "compute", "memory_bound_s": "memory-bound",
             "exposed_comm_s": "exposed comm.", "bubble_s": "pipeline bubble"}
    total = best["step_time_s"].to_numpy()
    for p in ["compute_only_s", "memory_bound_s", "exposed_comm_s", "bubble_s"]:
        share = best[p].to_numpy() / total * 100
        a1.bar(x, share, 0.7, bottom=bottom, color=colors[p], label=names[p])
        bottom += share
    ax2 = a1.twinx()
    ax2.plot(x, total, "o-", color="black", label="step time (right axis)")
    ax2.set_yscale("log")
    plotstyle.plain_log_ticks(ax2.yaxis)
    ax2.set_ylabel("step time (s, log)")
    ax2.grid(False)
    ax2.spines["right"].set_visible(True)
    a1.set_xticks(x, [f"{n}\n{m}" for n, m in zip(hw["node"], hw["memory"])])
    a1.set_ylabel("share of step time (%)")
    a1.set_ylim(0, 100)
    a1.set_title(f"Training {TRAIN['model']}, {TRAIN['gpus']} accelerators")
    h1, l1 = a1.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    a1.legend(h1 + h2, l1 + l2, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3)

    for b, style in ((1, "-"), (64, "--")):
        sub = io[io["batch"] == b]
        a2.plot(x, sub["ttft_s"].to_numpy() * 1e3, "o" + style, color=plotstyle.BLUE, label=f"TTFT, batch {b}")
        a2.plot(x, sub["tpot_s"].to_numpy() * 1e3, "s" + style, color=plotstyle.ORANGE, label=f"TPOT, batch {b}")
    a2.set_yscale("log")
    plotstyle.plain_log_ticks(a2.yaxis)
    a2.set_xticks(x, order)
    a2.set_ylabel("latency (ms, log)")
    a2.set_xlabel("logic node (memory and network advance with it)")
    a2.set_title(f"Inference {INFER['model']}, TP {INFER['tp']}")
    a2.legend(loc="upper right", ncol=2)
    report.figure(fig, GALLERY, "Top: training step-time shares per node (bars, left axis) and step time (line, "
                  "right axis, log). Bottom: inference TTFT and TPOT per node (log).")
