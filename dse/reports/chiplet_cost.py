"""Study 8: chiplets and cost (Guo et al. 2025; Chiplet Actuary cost model): monolithic against 2, 4
and 8 compute chiplets at several nodes, for a fixed total logic area (one reticle, 800 mm2, and
two reticles, 1600 mm2: beyond the reticle only chiplets can be built), the same power budget and
memory. Accelerator cost, training cost per run (GPT-3 175B, 300 B tokens on 1024 accelerators,
best mapping per design) and step time, and the Pareto front of performance against cost, in one
evaluate_training call (hardware derived inside it from the technology columns)."""
from __future__ import annotations

import numpy as np

from dse.reports.common import best_rows, catalog_table, fmt_mapping, space_frame

NAME = "chiplet-cost"
TITLE = "Chiplets and cost: monolithic vs 2/4/8 chiplets, cost per run and the Pareto front"
GALLERY = "chiplet_cost.png"

NODES = ["n7", "n5", "n3", "n2"]
DIES = [1, 2, 4, 8]
TOTAL_AREA_MM2 = [800.0, 1600.0]
PACKAGE = {1: "si-interposer", 2: "cowos-l", 4: "cowos-l", 8: "cowos-l"}
HW = dict(power_w=1000.0, memory="hbm3e", memory_stacks=6, scaleup="nvlink5", scaleout="ib-xdr", scaleup_domain=8)
JOB = dict(model="gpt3-175b", gpus=1024, global_batch=1536, precision="fp8", train_tokens=300e9)
# Real parts the cost model is checked against: their node, dies, package and memory, and a published
# bill-of-materials estimate, in dse/catalog/report_anchor_parts.csv; their price estimate in systems.csv.
ANCHORS = ["h100-sxm", "b200"]


def build(report, quick: bool = False) -> None:
    import dse
    from dse.pareto import pareto_mask
    designs = space_frame("chiplet-cost-designs", HW, {
        "node": NODES[1:3] if quick else NODES, "compute_dies": DIES, "user_total_area_mm2": TOTAL_AREA_MM2,
        "die_area_mm2": {"derive": "user_total_area_mm2 / compute_dies", "real": True}})
    designs["package"] = designs["compute_dies"].map(PACKAGE)
    mapping = space_frame("chiplet-cost-mappings", dict(JOB, sp=True, zero=1), {
        "tp": [4, 8], "pp": [8, 16], "dp": {"derive": "gpus / (tp * pp)"}, "vp": [1, 3], "micro_batch": [1],
        "recompute": ["selective", "full"] if not quick else ["full"]}, ["layers % (pp * vp) == 0"])
    frame = designs.merge(mapping, how="cross")
    out = dse.evaluate_training(frame).rename(columns={"user_total_area_mm2": "total_area_mm2"})
    best = best_rows(out, ["node", "compute_dies", "total_area_mm2"])
    hw = dse.evaluate_hardware(designs).rename(columns={"user_total_area_mm2": "total_area_mm2"}).copy()
    hw = hw.set_index(["node", "compute_dies", "total_area_mm2"])
    key = list(zip(best["node"], best["compute_dies"], best["total_area_mm2"]))
    for c in ("die_yield", "die_cost_usd", "package_cost_usd", "hbm_cost_usd", "package_yield", "peak_bf16_flops_per_s"):
        best[c] = hw.loc[key, c].to_numpy()
    best = best.copy()  # one block again after the columns added above
    best["mapping"] = best.apply(fmt_mapping, axis=1)
    best["run_days"] = best["step_time_s"] * JOB["train_tokens"] / best["tokens_per_step"] / 86400
    infeasible = hw[~hw["hw_fits"].astype(bool)].reset_index()[["node", "compute_dies", "total_area_mm2", "hw_infeasible_reason"]]
    best["pareto"] = pareto_mask(best[["step_time_s", "accelerator_cost_usd"]].to_numpy(), ["min", "min"])
    best["pareto_run"] = pareto_mask(best[["step_time_s", "cost_per_run_usd"]].to_numpy(), ["min", "min"])

    # anchors: derived accelerators shaped like H100 and B200 against published estimates of their
    # manufacturing cost (a bill of materials: die, HBM, packaging, test; no R&D) and price
    from dse.hardware import tables
    margin = tables.assumptions()["gross_margin"]
    anchors = catalog_table("report_anchor_parts.csv").set_index("system").loc[ANCHORS].reset_index()
    prices = catalog_table("systems.csv").set_index("name").loc[ANCHORS]
    ah = dse.evaluate_hardware(anchors[["node", "compute_dies", "die_area_mm2", "package", "memory", "memory_stacks",
                                        "power_w"]])
    bom = ah["manufacturing_cost_usd"] - ah["nre_per_unit_usd"]
    for i, r in anchors.iterrows():
        dies = f"{r['compute_dies']} x {r['die_area_mm2']:.0f}" if r["compute_dies"] > 1 else f"{r['die_area_mm2']:.0f}"
        part = f"{r['label']} ({r['node']}, {dies} mm2, {r['memory_stacks']} {r['memory'][:4].upper()}{r['memory'][4:]})"
        report.compare(f"{part}: manufacturing cost without NRE (USD)", r["bom_cost_usd"], bom.iloc[i],
                       f"bill-of-materials estimate, {r['system']}: {r['bom_cost_source']} "
                       "(dse/catalog/report_anchor_parts.csv)", 30.0, note="dse: known-good dies + package + HBM")
        report.compare(f"{part}: accelerator price (USD)", prices.loc[r["system"], "price_usd"],
                       ah["accelerator_cost_usd"].iloc[i],
                       f"price {r['system']}: {prices.loc[r['system'], 'price_source']} (dse/catalog/systems.csv)", 30.0,
                       note=f"dse: manufacturing cost with NRE / (1 - gross margin {margin:.2f})")

    report.text(f"""
## Setup
Derived accelerators (dse.hardware, Chiplet Actuary-style cost): total compute silicon of
{', '.join(f'{a:.0f}' for a in TOTAL_AREA_MM2)} mm2 split into 1, 2, 4 or 8 dies at nodes {', '.join(NODES)}; monolithic on a silicon
interposer, chiplets on CoWoS-L with die-to-die links (their PHY area comes out of each die);
{HW['memory_stacks']} HBM3e stacks, {HW['power_w']:.0f} W, NVLink5-class scale-up and XDR scale-out for all. Training job:
{JOB['model']} on {JOB['gpus']} accelerators, FP8, {JOB['train_tokens'] / 1e9:.0f} B tokens per run; best mapping per design
({len(frame)} rows, one call). Cost per run = amortised capex (4 years) + energy (dse/catalog/assumptions.csv).
""")
    cols = ["node", "total_area_mm2", "compute_dies", "package", "die_yield", "die_cost_usd", "package_cost_usd",
            "hbm_cost_usd", "accelerator_cost_usd", "peak_bf16_flops_per_s", "mapping", "step_time_s", "run_days",
            "cost_per_run_usd", "pareto", "pareto_run"]
    report.table("designs", best[cols].sort_values(["total_area_mm2", "node", "compute_dies"]),
                 "Every feasible design: cost, step time, cost per run, Pareto membership", ".3g")
    if len(infeasible):
        report.table("infeasible", infeasible, "Designs that cannot be built", ".3g")
    pf = best[best["pareto"]].sort_values("step_time_s")
    mono = best[(best["compute_dies"] == 1)]
    cheap = []
    for node in [n for n in NODES if n in set(best["node"])]:
        sub = best[(best["node"] == node) & (best["total_area_mm2"] == TOTAL_AREA_MM2[0])].set_index("compute_dies")
        if 1 in sub.index:
            k = sub["accelerator_cost_usd"].idxmin()
            cheap.append(f"{node}: {int(k)} chiplets cheapest, monolithic costs {sub.loc[1, 'accelerator_cost_usd'] / sub.loc[k, 'accelerator_cost_usd'] - 1:+.0%} more")
    cheapest = "At one reticle of logic: " + "; ".join(cheap) + "."
    n2 = best[(best["node"] == best["node"].iloc[0]) & (best["total_area_mm2"] == TOTAL_AREA_MM2[0])].set_index("compute_dies")
    y1, y8 = n2["die_yield"].get(1, np.nan), n2["die_yield"].get(8, np.nan)
    gains = []
    for node in [n for n in NODES if n in set(best["node"])]:
        a_ = best[(best["node"] == node) & (best["compute_dies"] == 4)].set_index("total_area_mm2")["step_time_s"]
        if len(a_) == 2:
            gains.append(f"{node} x{a_.iloc[0] / a_.iloc[1]:.2f}")
    gain = "speed-up from 800 to 1600 mm2 at 4 chiplets: " + ", ".join(gains)
    report.text(f"""
## Reading, and comparison with the seed paper
`pareto`: on the front of step time against accelerator price; `pareto_run`: against cost per run
(capex amortised over the run's wall-clock time, so a faster part also costs less per run: that front
is short). The price front holds {len(pf)} designs:
{'; '.join(f"{r.node} {int(r.compute_dies)}x{r.die_area_mm2:.0f} mm2 ({r.step_time_s:.2f} s, ${r.cost_per_run_usd / 1e6:.2f} M)" for r in pf.itertuples())}.
{cheapest}
Smaller dies yield better ({best['node'].iloc[0]}: {y1:.0%} for one 800 mm2 die, {y8:.0%} for 100 mm2 dies), which outweighs
the die-to-die PHY area, bonding losses and the larger CoWoS-L package here, at a few percent of step time
(the PHY area comes out of the tensor cores). Doubling the logic to two reticles (only possible as
chiplets) pays at old nodes and not at new ones under the fixed {HW['power_w']:.0f} W budget: step time
{gain}; at n2 the extra silicon only runs at a lower clock.
Guo et al. (2025) add this chiplet cost model (Chiplet Actuary: yield, known-good-die, packaging
and bonding costs) to trade performance against cost; they give no table for this sweep to compare against, so the numeric check above costs derived
H100-like and B200-like parts against published bill-of-materials estimates (the cost model alone,
no margin) and prices them against market estimates (cost with amortised NRE over one minus the
per-GPU gross margin, {margin:.2f}, itself taken from published cost and price estimates; all of
these are analysts' estimates, NVIDIA publishes neither).
Monolithic designs: {', '.join(f"{r.node} {r.total_area_mm2:.0f} mm2 ${r.accelerator_cost_usd:,.0f}" for r in mono.itertuples())}.
""")

    from dse import plotstyle
    fig, (a1, a2) = plotstyle.figure(2, 1, height_in=8.6)
    markers = {1: "o", 2: "s", 4: "^", 8: "D"}
    colors = dict(zip(NODES, [plotstyle.BLUE, plotstyle.GREEN, plotstyle.ORANGE, plotstyle.RED]))
    pr = best[best["pareto_run"]].sort_values("step_time_s")
    panels = ((a1, "accelerator_cost_usd", 1e3, pf, "price"), (a2, "cost_per_run_usd", 1e6, pr, "cost per run"))
    for ax, col, scale, front, what in panels:
        for r in best.itertuples():
            filled = r.total_area_mm2 > 1000
            ax.scatter(getattr(r, col) / scale, r.step_time_s, marker=markers[r.compute_dies], s=60,
                       facecolors=colors[r.node] if filled else "white", edgecolors=colors[r.node], linewidths=1.5,
                       zorder=3)
        # the front: a staircase through its designs (by increasing cost), each ringed
        front = front.sort_values(col)
        ax.plot(front[col] / scale, front["step_time_s"], "-", color="black", linewidth=1.3, drawstyle="steps-post",
                zorder=2)
        ax.scatter(front[col] / scale, front["step_time_s"], s=230, facecolors="none", edgecolors="black",
                   linewidths=1.3, zorder=4)
        plotstyle.auto_log(ax, "x", best[col] / scale)
        plotstyle.auto_log(ax, "y", best["step_time_s"])
        ax.set_ylabel("training step time (s)")
        ax.set_title(f"Step time vs {what}: Pareto front of {len(front)} designs")
    a1.set_xlabel("accelerator price (k USD)")
    a2.set_xlabel(f"cost per training run (M USD; {JOB['model']}, {JOB['gpus']} accelerators, 300 B tokens)")
    from matplotlib.lines import Line2D
    handles = ([Line2D([], [], color=colors[n], marker="o", linestyle="", label=n) for n in NODES if n in set(best["node"])]
               + [Line2D([], [], color="black", marker=markers[d], linestyle="", markerfacecolor="white",
                         label="monolithic" if d == 1 else f"{d} chiplets") for d in DIES]
               + [Line2D([], [], color="gray", marker="o", linestyle="", label="filled: 1600 mm2"),
                  Line2D([], [], color="gray", marker="o", markerfacecolor="white", linestyle="", label="open: 800 mm2"),
                  Line2D([], [], color="black", marker="o", markersize=12, markerfacecolor="none", linewidth=1.3,
                         label="Pareto front")])
    fig.legend(handles=handles, loc="outside lower center", ncol=4)
    report.figure(fig, GALLERY, "Each derived design (colour: node, marker: chiplet count, filled: two reticles of logic) "
                  "by accelerator price (top) and by cost per run (bottom) against step time; black line and rings: "
                  "the Pareto front of each pair (log axes where values span more than 4x).")
