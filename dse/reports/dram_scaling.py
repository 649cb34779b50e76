"""Study 5: DRAM technology against inference latency (Kundu et al. 2024): TPOT and
TTFT of Llama-2 70B on 8 H100-class GPUs (TP 8) when the memory is replaced by HBM2e ... HBM4e,
GDDR7 or LPDDR5X (evaluate_inference with the `memory` and `memory_stacks` override columns),
at batch 1 and a throughput batch, in one call. The HBM3 x 5 row is the catalog H100, the point
the published NeMo / TensorRT-LLM Llama-2 70B measurements anchor."""
from __future__ import annotations

import numpy as np
import pandas as pd


NAME = "dram-scaling"
TITLE = "DRAM technology and inference latency (TPOT, TTFT)"
GALLERY = "dram_scaling.png"

# memory -> devices per GPU: HBM 5 stacks as H100; GDDR7 16 x32 devices (a 512-bit bus, as the
# largest GDDR7 boards); LPDDR5X 8 x64 packages (a 512-bit bus, Grace-class).
MEMORIES = [("hbm2e", 5), ("hbm3", 5), ("hbm3e", 5), ("hbm4", 5), ("hbm4e", 5), ("gddr7", 16), ("lpddr5x", 8)]
JOB = dict(model="llama2-70b", system="h100-sxm", gpus=8, tp=8, isl=2048, osl=128, precision="bf16")
BATCHES = [1, 64]


def build(report, quick: bool = False) -> None:
    import dse
    from dse.hardware import memory_override
    from dse.reports.inference_roofline import validation_rows
    frame = pd.DataFrame([dict(memory=m, memory_stacks=float(s), batch=b) for m, s in MEMORIES for b in BATCHES]).assign(**JOB)
    out = dse.evaluate_inference(frame)
    mo = memory_override({"system": np.asarray(frame["system"], dtype=object),
                          "memory": np.asarray(frame["memory"], dtype=object),
                          "memory_stacks": frame["memory_stacks"].to_numpy(float)})
    out["memory_tb_per_s"] = np.asarray(mo["memory_bandwidth_bytes_per_s"]) / 1e12
    out["memory_gib"] = np.asarray(mo["memory_capacity_bytes"]) / 2**30
    out["ttft_ms"], out["tpot_ms"] = out["ttft_s"] * 1e3, out["tpot_s"] * 1e3
    base = out[out["memory"] == "hbm3"].set_index("batch")
    out["tpot_vs_hbm3"] = out["tpot_s"] / out["batch"].map(base["tpot_s"])
    out["ttft_vs_hbm3"] = out["ttft_s"] / out["batch"].map(base["ttft_s"])
    validation_rows(report, "Llama-2-70B")

    report.text(f"""
## Setup
{JOB['model']} on {JOB['gpus']} {JOB['system']} GPUs (TP {JOB['tp']}), {JOB['isl']} input / {JOB['osl']} output tokens,
BF16 weights and KV cache; only the DRAM changes (compute, links and kernel efficiencies stay
H100's). Devices per GPU: HBM 5 stacks, GDDR7 16 devices, LPDDR5X 8 packages (bandwidth and
capacity per device from dse/catalog/memory.csv). `fits` is False where the weights and KV cache
do not fit the capacity.
""")
    cols = ["memory", "memory_stacks", "memory_tb_per_s", "memory_gib", "batch", "fits", "ttft_ms", "tpot_ms",
            "ttft_vs_hbm3", "tpot_vs_hbm3", "prefill_bound", "decode_bound", "decode_memory_s", "decode_comm_s",
            "decode_overhead_s", "output_tokens_per_s"]
    report.table("latency", out[cols], "TTFT and TPOT per memory technology", ".3g")
    b1 = out[out["batch"] == 1].set_index("memory")
    report.text(f"""
## Reading, and comparison with the seed paper
TPOT follows DRAM bandwidth but sub-linearly: from HBM3 to HBM4e bandwidth grows
{b1.loc['hbm4e', 'memory_tb_per_s'] / b1.loc['hbm3', 'memory_tb_per_s']:.1f}x while batch-1 TPOT falls only to
{b1.loc['hbm4e', 'tpot_vs_hbm3']:.2f}x, because the TP all-reduces and the per-layer kernel overheads
(`decode_comm_s`, `decode_overhead_s`) do not scale with memory. LPDDR5X is
{b1.loc['lpddr5x', 'tpot_vs_hbm3']:.1f}x slower per token; GDDR7 lands near HBM2e. TTFT (prefill) is
compute-bound and barely moves with memory. Kundu et al. (2024, DRAM scaling study) find the same: decode latency
tracks memory bandwidth with diminishing returns once communication and fixed overheads dominate;
their figure has no table of values, so the numeric comparison is the published Llama-2 70B latency at the
HBM2e (A100-80GB) and HBM3 (H100) points (NeMo end-to-end latencies in dse/validation), table above.
""")

    # TPOT (top): bars on a linear axis. TTFT (bottom): batch 1 and 64 differ ~60x, so points on a
    # log axis (never bars on a log axis). Open/hatched: does not fit the memory capacity.
    from dse import plotstyle
    fig, (a1, a2) = plotstyle.figure(2, 1, height_in=7.6, sharex=True)
    x = np.arange(len(MEMORIES))
    labels = [f"{m}\n{out[(out['memory'] == m)]['memory_tb_per_s'].iloc[0]:.1f}" for m, _ in MEMORIES]
    colors = [plotstyle.BLUE, plotstyle.ORANGE]
    for j, b in enumerate(BATCHES):
        sub = out[out["batch"] == b].set_index("memory").loc[[m for m, _ in MEMORIES]]
        bars = a1.bar(x + (j - 0.5) * 0.38, sub["tpot_ms"], 0.38, label=f"batch {b}", color=colors[j])
        for bar, fits in zip(bars, sub["fits"]):
            if not fits:
                bar.set_hatch("//")
        fits = sub["fits"].to_numpy(bool)
        a2.plot(x, sub["ttft_ms"], "-", color=colors[j], linewidth=1.2, alpha=0.6)
        a2.plot(x[fits], sub["ttft_ms"][fits], "o", color=colors[j], markersize=8, label=f"batch {b}")
        if (~fits).any():
            a2.plot(x[~fits], sub["ttft_ms"][~fits], "o", color=colors[j], markerfacecolor="white", markersize=8)
    a1.set_ylabel("TPOT (ms)")
    a1.set_title("Time per output token (TPOT)")
    a1.legend(loc="upper left")
    a2.set_yscale("log")
    plotstyle.plain_log_ticks(a2.yaxis)
    a2.set_ylabel("TTFT (ms, log)")
    a2.set_title("Time to first token (TTFT)")
    a2.legend(loc="center left")
    a2.set_xticks(x, labels)
    a2.set_xlabel("memory technology and per-GPU bandwidth (TB/s)")
    fig.suptitle(f"{JOB['model']}, {JOB['gpus']}x H100-class GPUs, TP {JOB['tp']}")
    report.figure(fig, GALLERY, "TPOT (bars) and TTFT (points, log scale) against the memory technology "
                  "(hatched bars, open points: does not fit the capacity).")
