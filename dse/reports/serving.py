"""Serving design-space exploration: for a dense model (Llama-3 70B) and a MoE model (DeepSeek-V3)
on H100, B200 and GB200 NVL72, the output tokens/s per GPU against tokens/s per user Pareto
curves, aggregated (continuous batching with chunked prefill) and disaggregated (prefill and
decode pools), every mapping and concurrency in one dse.serve search; checked against the
published large-scale expert-parallel serving measurements in dse/validation/serving.csv."""
from __future__ import annotations

import numpy as np

NAME = "serving"
TITLE = "Serving: throughput per GPU against per-user speed, aggregated and disaggregated"
GALLERY = "serving.png"

SYSTEMS = ["h100-sxm", "b200", "gb200"]
JOBS = {   # model -> (GPU counts, isl, osl, framework, precision, kv precision)
    "llama3-70b": ([8], 1024, 1024, "vllm", "fp8", "fp8"),
    "deepseek-v3": ([16, 32], 2048, 1024, "sglang", "fp8-block", "bf16"),
}
TARGETS = ((2.0, 0.05), (1.0, 0.02))   # (TTFT s, TPOT s): relaxed and interactive


def build(report, quick: bool = False) -> None:
    import dse
    import pandas as pd
    from dse import serve, validate

    # ---- the published comparisons: every serving validation row ----
    for _, r in validate.serving_results(("serving.csv",)).iterrows():   # the published runs, not the TPOT sweep
        if r["skipped"] == "":
            report.compare(f"{r['id']} {r['model']} {r['system']} {r['metric']} ({r['unit']})", r["measured"],
                           r["predicted"], r["source"], 25.0)

    frames = []
    for model, (gpus, isl, osl, framework, precision, kv) in JOBS.items():
        space = serve.space(model, SYSTEMS, gpus[:1] if quick else gpus, isl, osl, framework, precision, kv)
        if model == "deepseek-v3":   # DeepEP dispatch under two-batch overlap and EPLB-balanced experts,
            space["moe_dispatcher"], space["moe_a2a_overlap"] = "flex", True   # as the SGLang rows run
            space["moe_imbalance"] = 1.0
        frames.append(dse.evaluate_serving(space))
    results = pd.concat(frames, ignore_index=True)
    fronts = serve.front(results, by=("model", "system", "disaggregated"))

    rows = []
    for (model, system), group in results.groupby(["model", "system"], observed=True):
        for ttft, tpot in TARGETS:
            for disagg in (False, True):
                part = serve.best(group[group["disaggregated"].astype(bool) == disagg], ttft, tpot)
                top = part.iloc[0] if len(part) else None
                rows.append(dict(model=model, system=system, ttft_target_s=ttft, tpot_target_s=tpot,
                                 mode="disaggregated" if disagg else "aggregated",
                                 tokens_per_s_per_gpu=np.nan if top is None else top["output_tokens_per_s_per_gpu"],
                                 tokens_per_s_per_user=np.nan if top is None else top["output_tokens_per_s_per_user"],
                                 gpus=np.nan if top is None else top["gpus"],
                                 cost_per_million_tokens_usd=np.nan if top is None else top["cost_per_million_tokens_usd"]))
    best = pd.DataFrame(rows)

    report.text(f"""
## Setup
`dse serve` for two models: Llama-3 70B (FP8 weights and KV cache, vLLM scheduler defaults, 8 GPUs,
1024 in / 1024 out) and DeepSeek-V3 (FP8 block-scaled weights, BF16 MLA cache, SGLang scheduler with
DeepEP dispatch, two-batch overlap and EPLB-balanced experts, 16{'' if quick else ' and 32'} GPUs, 2048 in / 1024 out), on H100, B200 and GB200.
Every tp x pp (x ep) mapping, aggregated and disaggregated (prefill on 1/8, 1/4 or 1/2 of the GPUs),
at 1 to 1024 requests per replica and at as many as fit: {len(results):,} configurations. The
comparisons above are the published per-pool throughputs of SGLang's large-scale expert-parallel
deployments (dse/validation/serving.csv).
""")
    report.table("best", best, "Best output tokens/s per GPU meeting each (TTFT, TPOT) target, per mode", ".3g")
    report.table("fronts", fronts[["model", "system", "disaggregated", "gpus", "tp", "pp", "ep", "prefill_gpus",
                                   "concurrency", "ttft_s", "tpot_s", "output_tokens_per_s_per_gpu",
                                   "output_tokens_per_s_per_user", "cost_per_million_tokens_usd"]],
                 "Pareto fronts (output tokens/s per GPU vs per user) per model, system and mode", ".3g")
    report.text(_reading(best))

    from dse import plotstyle
    fig, axes = plotstyle.figure(2, 1, height_in=7.8)
    for ax, model in zip(axes, JOBS):
        for i, system in enumerate(SYSTEMS):
            color = plotstyle.SYSTEM.get(system, plotstyle.SERIES[i])
            for disagg, style in ((False, "-o"), (True, "--^")):
                part = fronts[(fronts["model"] == model) & (fronts["system"] == system)
                              & (fronts["disaggregated"].astype(bool) == disagg)]
                ax.plot(part["output_tokens_per_s_per_user"], part["output_tokens_per_s_per_gpu"], style, color=color,
                        ms=4, label=f"{system} {'disaggregated' if disagg else 'aggregated'}")
        ax.set_title(f"{model}: {JOBS[model][1]} in / {JOBS[model][2]} out")
        ax.set_ylabel("output tokens/s per GPU")
    axes[1].set_xlabel("output tokens/s per user (1 / TPOT)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3)
    report.figure(fig, GALLERY, "Pareto fronts of output tokens/s per GPU against tokens/s per user; solid: "
                  "aggregated (continuous batching, chunked prefill), dashed: disaggregated prefill and decode.")


def _reading(best) -> str:
    def value(model, system, mode, target):
        row = best[(best["model"] == model) & (best["system"] == system) & (best["mode"] == mode)
                   & (best["tpot_target_s"] == target)]
        return float(row["tokens_per_s_per_gpu"].iloc[0]) if len(row) else float("nan")
    lines = ["\n## Reading"]
    for model in JOBS:
        h, g = value(model, "h100-sxm", "aggregated", 0.05), value(model, "gb200", "aggregated", 0.05)
        ha, hd = value(model, "h100-sxm", "aggregated", 0.02), value(model, "h100-sxm", "disaggregated", 0.02)
        if hd > ha:
            why = "the prompt chunks that ride in every aggregated iteration cost the decoders their TPOT"
        else:
            why = "the prefill pool's GPUs cost more than the chunks they take out of the decode iterations"
        lines.append(f"{model}: at a 50 ms TPOT target GB200 serves {g / h:.1f}x the output tokens/s per GPU of H100 "
                     f"({g:,.0f} vs {h:,.0f}); at the interactive 20 ms target on H100, disaggregation gives "
                     f"{hd:,.0f} against {ha:,.0f} aggregated ({why}).")
    lines.append("Tighter TPOT targets cut the batch and with it the throughput per GPU; the fronts show the whole "
                 "trade. Disaggregated TTFT counts the KV-cache transfer between the pools.")
    return "\n".join(lines) + "\n"
