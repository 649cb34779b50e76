"""`dse validate`: predictions against published measurements (dse/validation/*.csv).

For every row: the measured value, the prediction of the same quantity as the source defines
it, and the error. Then the mean absolute percentage error per source and overall.

What each source measured, and how the prediction is made comparable:
- step / iteration time: `step_time_s`.
- Narayanan et al. 2021 and Shoeybi et al. 2019 "achieved TFLOP/s": their eq. 3,
  96 B s L h^2 (1 + s/6h + V/16Lh), which counts the full-recompute forward, over the predicted
  step time; Megatron-Core r0.8 "TFLOP/s per GPU": model FLOPs (no recompute) over step time.
- MFU: model FLOPs / (step time x GPUs x peak at the training precision).
- tokens/s/GPU: global batch x sequence / step time / GPUs.
- activation memory per GPU (Korthikanti Fig. 1) and as a percentage of the tensor-parallel
  baseline (Fig. 7): `activations_bytes` of the first pipeline stage.
- forward+backward time of one layer (Korthikanti Table 4): the step-time difference between the
  same model with two layers and with one.

Software settings are properties of the framework that produced each row (FlashAttention,
overlap of TP and DP communication, the distributed optimizer), set once per framework in
`FRAMEWORKS`; nothing is fitted per row.
"""
from __future__ import annotations

import json
import sys
from importlib import resources

import numpy as np
import pandas as pd

GIB = 2**30

# framework prefix -> settings; first matching prefix wins (compare lower case).
FRAMEWORKS = [
    # Megatron-LM 2019-2022: unfused attention, no TP/DP overlap, full recompute unless stated.
    ("megatron-lm", dict(flash_attention=False, tp_overlap=False, dp_overlap=False, zero=0, recompute="full", sp=False)),
    # DeepSpeed ZeRO-3 (2021): parameter gathers and gradient reduce-scatters as flat NCCL rings
    # over the whole data-parallel group (no intra-node stage), overlapped with compute
    # (`overlap_comm`); Narayanan et al. 2021, Sec. 5.2 and Table 2.
    ("deepspeed zero-3", dict(flash_attention=False, tp_overlap=False, dp_overlap=True, dp_hierarchical=False,
                              zero=3, recompute="full", sp=False)),
    # Megatron-Core r0.8 weak-scaling runs: --overlap-grad-reduce --overlap-param-gather
    # --tp-comm-overlap, distributed optimizer, FlashAttention (README text).
    ("megatron-core", dict(flash_attention=True, tp_overlap=True, dp_overlap=True, zero=1, recompute="none")),
    # NeMo recipes: TE/cuDNN fused attention, TP comm overlap, distributed optimizer.
    ("nemo", dict(flash_attention=True, tp_overlap=True, dp_overlap=True, zero=1, recompute="none")),
    # Megatron-Bridge performance recipes (NeMo 25.11 / 26.02): as NeMo, and its MoE benchmarks
    # "force-balance the token distribution among experts" (performance-summary notes).
    ("megatron-bridge", dict(flash_attention=True, tp_overlap=True, dp_overlap=True, zero=1, recompute="none",
                             moe_imbalance=1.0)),
    # JAX FSDP recipes (MaxText, Paxml): fully sharded data parallel with rematerialisation.
    ("maxtext", dict(flash_attention=True, tp_overlap=False, dp_overlap=True, zero=3, recompute="full")),
    ("paxml", dict(flash_attention=True, tp_overlap=False, dp_overlap=True, zero=3, recompute="full")),
]

SKIP_NOTES = {
    "lora": "LoRA fine-tuning (frozen base weights) is not modelled",
}


def _read_csv(name: str) -> pd.DataFrame:
    with resources.files("dse.validation").joinpath(name).open("r") as fh:
        return pd.read_csv(fh, dtype=str, keep_default_na=False)


def _source_label(source: str, metric: str) -> str:
    s = source.lower()
    if s.startswith("korthikanti"):
        return "Korthikanti 2022 Table 5" if "table 5" in s else "Korthikanti 2022"
    if "table 2" in s and s.startswith("narayanan"):
        return "Narayanan 2021 Table 2"
    if s.startswith("narayanan"):
        return "Narayanan 2021 Table 1"
    if "megatron-core" in s or "weak scaling" in s:
        return "Megatron-Core r0.8 (H100)"
    if "megatron-lm readme" in s:
        return "Megatron-LM 2020 README"
    if s.startswith("shoeybi"):
        return "Shoeybi 2019"
    if "megatron-bridge" in s and "fine-grained moe" in s:
        return "Megatron-Bridge Qwen3 MoE (128 experts, top-8)"
    if "megatron-bridge" in s:
        return "Megatron-Bridge 25.11/26.02 (H100, Blackwell)"
    if "dgx cloud" in s:
        return "DGX Cloud 25.01 (H100)"
    if "nemo" in s:
        return "NeMo 24.07 (H100)"
    return source[:40]


def _num(x, default=np.nan):
    try:
        return float(str(x).replace(",", "").strip())
    except ValueError:
        return default


def _recompute(text: str, default: str) -> str:
    t = text.lower()
    if "full" in t:
        return "full"
    if "selective" in t:
        return "selective"
    if "no recompute" in t or t.strip() == "none" or "sequence par" in t:
        return "none"
    return default


def _precision(text: str) -> str:
    """Training precision code of a source's spelling: FP8-CS / FP8-MX -> fp8, NVFP4 / MXFP4 -> fp4,
    everything else (BF16, FP16 mixed, not stated) -> bf16."""
    t = text.strip().lower()
    return "fp8" if t.startswith("fp8") else "fp4" if t.startswith(("nvfp4", "mxfp4", "fp4")) else "bf16"


def training_inputs(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """Evaluate-training input rows for the validation table, and a skip reason per row."""
    from dse import catalog
    from dse.errors import ConfigError

    records, skips = [], []
    for _, r in table.iterrows():
        fw = next((cfg for prefix, cfg in FRAMEWORKS if r["framework"].lower().startswith(prefix)), FRAMEWORKS[0][1])
        rec = dict(fw)
        skip = ""
        notes = (r["notes"] + " " + r["framework"]).lower()
        if "task=lora" in notes:
            skip = SKIP_NOTES["lora"]
        # Model: explicit dimensions in the row win; otherwise the catalog entry of that name.
        dims = {k: _num(r[c]) for k, c in (("layers", "layers"), ("hidden", "hidden"), ("ffn_hidden", "ffn_hidden"),
                                             ("heads", "heads"), ("kv_heads", "kv_heads"), ("experts", "num_experts"),
                                             ("top_k", "topk"), ("seq_len", "seq_len"), ("vocab", "vocab"))}
        try:
            base = catalog.model(r["model"].split(" (")[0])
            for k in ("layers", "hidden", "ffn_hidden", "heads", "kv_heads", "seq_len", "vocab", "gated_mlp",
                      "dropout", "tied_embeddings", "learned_pos_emb", "experts", "top_k", "moe_ffn_hidden",
                      "head_dim", "shared_experts", "dense_layers"):
                if k not in dims or np.isnan(dims[k]):
                    dims[k] = float(base[k])
            if dims["layers"] != float(base["layers"]) or dims["hidden"] != float(base["hidden"]):
                dims["head_dim"] = dims["hidden"] / dims["heads"]
        except ConfigError:
            for k in ("layers", "hidden", "heads"):
                if np.isnan(dims[k]):
                    skip = skip or f"model dimensions not given by the source ({k} missing)"
            dims.setdefault("head_dim", np.nan)
            gpt_like = "gpt" in r["model"].lower()
            dims.update(gated_mlp=0.0 if gpt_like else 1.0, dropout=1.0 if gpt_like else 0.0,
                        tied_embeddings=1.0 if gpt_like else 0.0, learned_pos_emb=1.0 if gpt_like else 0.0)
        if dims.get("experts", 0) and np.isnan(dims.get("moe_ffn_hidden", np.nan)):
            dims["moe_ffn_hidden"] = dims["ffn_hidden"]
        dims = {k: v for k, v in dims.items() if not (isinstance(v, float) and np.isnan(v))}
        rec.update(dims)
        # Hardware: the catalog system named by the GPU type.
        gpu = r["gpu_type"].split(" (")[0]
        try:
            rec["system"] = catalog.resolve_system(gpu)
        except ConfigError:
            skip = skip or f"system {gpu} not in the catalog"
            rec["system"] = "a100-80gb"
        gpus = _num(r["gpus"])
        tp, pp, cp, ep, vp = (_num(r[c], 1.0) for c in ("tp", "pp", "cp", "ep", "vp"))
        fsdp = r["fsdp"].strip() != ""
        if fsdp:
            rec["zero"] = 3
        if r["zero_stage"].strip():
            rec["zero"] = int(_num(r["zero_stage"]))
        if np.isnan(tp) or (r["tp"].strip() == "" and not fsdp and r["measured_metric_name"] == "MFU" and r["id"] != "T0032"):
            skip = skip or "parallel mapping (tp/pp) not stated by the source"
        rec.update(gpus=gpus, tp=tp, pp=pp, cp=cp, ep=ep, vp=vp, dp=gpus / (tp * pp * cp))
        rec["global_batch"] = _num(r["global_batch"])
        rec["micro_batch"] = _num(r["micro_batch"], 1.0)
        if r["sp"].strip():
            rec["sp"] = r["sp"].strip().lower() == "yes"
        elif "sequence par" in r["recompute"].lower() or "+ sp" in r["recompute"].lower():
            rec["sp"] = True
        elif "sp" not in rec:
            rec["sp"] = tp > 1
        rec["recompute"] = _recompute(r["recompute"], rec["recompute"])
        rec["precision"] = _precision(r["precision"])
        if np.isnan(rec["global_batch"]) or np.isnan(gpus):
            skip = skip or "global batch or GPU count not stated"
            rec["global_batch"] = rec.get("global_batch") if not np.isnan(rec["global_batch"]) else 1.0
            rec["gpus"] = gpus if not np.isnan(gpus) else 1.0
            rec["dp"] = rec["gpus"] / (tp * pp * cp)
        records.append(rec)
        skips.append(skip)
    frame = pd.DataFrame.from_records(records, index=table.index)
    return frame, pd.Series(skips, index=table.index)


def _narayanan_tflops(frame, step_time):
    B, s, L, h, V = (frame[k].astype(float) for k in ("global_batch", "seq_len", "layers", "hidden", "vocab"))
    flops = 96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
    return flops / step_time / frame["gpus"] / 1e12


# Training measurements: the shared set, then the Megatron-Bridge performance summary (H100 and
# Blackwell, FP8 and NVFP4), the only public Blackwell training measurements with a stated mapping.
TRAINING_FILES = ("training.csv", "megatron_bridge_training.csv")


def training_results() -> pd.DataFrame:
    import dse
    table = pd.concat([_read_csv(name) for name in TRAINING_FILES], ignore_index=True)
    frame, skips = training_inputs(table)
    out = dse.evaluate_training(frame)
    metric = table["measured_metric_name"]
    unit = table["unit"]
    measured = table["measured_value"].map(_num)
    predicted = pd.Series(np.nan, index=table.index)

    step = out["step_time_s"]
    is_time = metric.isin(["step_time", "iteration_time"])
    predicted[is_time] = np.where(unit[is_time] == "ms", step[is_time] * 1e3, step[is_time])
    narayanan_style = table["source"].str.lower().str.startswith(("narayanan", "shoeybi"))
    tf = metric.isin(["achieved_tflops_per_gpu", "tflops_per_gpu"])
    predicted[tf & narayanan_style] = _narayanan_tflops(frame, step)[tf & narayanan_style]
    predicted[tf & ~narayanan_style] = (out["model_flops_per_step"] / step / frame["gpus"] / 1e12)[tf & ~narayanan_style]
    agg = metric == "aggregate_petaflops"
    predicted[agg] = (_narayanan_tflops(frame, step) * frame["gpus"] / 1e3)[agg]
    mfu = metric == "MFU"
    predicted[mfu] = out["mfu"][mfu] * 100
    tok = metric == "tokens_per_sec_per_gpu"
    predicted[tok] = (out["tokens_per_s"] / frame["gpus"])[tok]
    act = metric == "activation_memory_per_GPU"
    predicted[act] = out["activations_bytes"][act] / GIB

    pct = metric == "activation_memory_pct_of_TP_baseline"
    if pct.any():
        base = frame[pct].copy()
        base["sp"], base["recompute"] = False, "none"
        base_out = dse.evaluate_training(base)
        predicted[pct] = out["activations_bytes"][pct] / base_out["activations_bytes"] * 100

    per_layer = metric == "fwd+bwd time per layer"
    if per_layer.any():
        one = frame[per_layer].copy()
        two = one.copy()
        one["layers"], two["layers"] = 1.0, 2.0
        o1, o2 = dse.evaluate_training(one), dse.evaluate_training(two)
        exclude = ["optimizer_s", "dp_comm_s"]
        t1 = o1["step_time_s"] - o1[exclude].sum(axis=1)
        t2 = o2["step_time_s"] - o2[exclude].sum(axis=1)
        predicted[per_layer] = (t2 - t1) * 1e3 / one["global_batch"] * one["micro_batch"] / one["dp"]

    res = pd.DataFrame({
        "id": table["id"], "suite": "training",
        "source": [_source_label(s, m) for s, m in zip(table["source"], metric)],
        "model": table["model"], "system": frame["system"], "metric": metric, "unit": unit,
        "measured": measured, "predicted": predicted,
        "gpus": frame["gpus"], "tokens_per_step": frame["global_batch"] * frame["seq_len"],
    })
    res["error_pct"] = (res["predicted"] / res["measured"] - 1) * 100
    res["skipped"] = skips.where(skips != "", np.where(predicted.isna(), "metric not modelled", ""))
    res.loc[res["skipped"] != "", ["predicted", "error_pct"]] = np.nan
    return res


def tokens_per_s_per_gpu(results: pd.DataFrame, column: str) -> pd.Series:
    """Training throughput per GPU of `column` ("measured" or "predicted") for the rows whose
    metric is a step time or tokens/s/GPU (NaN for the others), so rows measured in different
    units can be compared: the per-generation ratios of the gpu-generations study."""
    value = results[column].astype(float)
    seconds = value * np.where(results["unit"] == "ms", 1e-3, 1.0)
    timed = results["metric"].isin(["step_time", "iteration_time"])
    per_gpu = results["metric"] == "tokens_per_sec_per_gpu"
    return pd.Series(np.where(timed, results["tokens_per_step"] / (seconds * results["gpus"]),
                              np.where(per_gpu, value, np.nan)), index=results.index)


# Suites of validation rows: name -> function returning the frame above. Other models append.
SUITES = {"training": training_results}


# ---- inference -----------------------------------------------------------------------------
# Model spellings the inference sources use for catalog models: the TensorRT-LLM performance doc
# says its "LLaMA 7B/70B" are Llama-2 (methodology text; `notes` column of inference.csv).
INFERENCE_MODEL_NAMES = {"llama 7b": "llama2-7b", "llama 70b": "llama2-70b"}
# Software settings of the serving framework that produced each row (first matching prefix of the
# framework, lower case). TensorRT-LLM up to v0.6 decoded GQA models with its masked-MHA kernel,
# which reads a KV head once per query head; the MQA/GQA optimisation of that kernel landed on
# 2023-12-01 (NVIDIA/TensorRT-LLM PR #524) and the XQA kernels in v0.8. NeMo's 2023 Llama-2
# inference ran on TensorRT-LLM of that period.
INFERENCE_FRAMEWORKS = [
    ("tensorrt-llm v0.5", dict(gqa_kv_sharing=False)),
    ("tensorrt-llm v0.6", dict(gqa_kv_sharing=False)),
    ("nemo", dict(gqa_kv_sharing=False)),
]


def _inference_settings(framework: str) -> dict:
    f = framework.strip().lower()
    return next((cfg for prefix, cfg in INFERENCE_FRAMEWORKS if f.startswith(prefix)), {})


def _inference_row(model: str, gpu: str, prec: str, kv_quant: str):
    """(catalog model, catalog system, precision, kv_precision, skip reason)."""
    from dse import catalog
    from dse.errors import ConfigError
    skip = ""
    name = INFERENCE_MODEL_NAMES.get(model.strip().lower(), model.strip())
    try:
        name = catalog.resolve_model(name)
    except ConfigError:
        skip, name = f"model {model} not in the catalog", "llama2-7b"
    try:
        system = catalog.resolve_system(gpu.split(" (")[0].strip())
    except ConfigError:
        skip, system = skip or f"system {gpu} not in the catalog", "a100-80gb"
    precision = "fp8" if prec.strip().lower().startswith("fp8") else "bf16"
    # The KV cache is FP8 where the build says so, and, where the source does not say, for FP8
    # builds: the measured L40S batches (TensorRT-LLM v0.5) only fit 48 GB with an 8-bit cache.
    kv = "fp8" if "fp8 kv" in kv_quant.lower() or (not kv_quant.strip() and precision == "fp8") else "bf16"
    return name, system, precision, kv, skip


def inference_results() -> pd.DataFrame:
    """NeMo Llama-2 end-to-end latencies and TensorRT-LLM fixed-batch throughput / first-token
    latency against `evaluate_inference` (static batching: one prefill, then osl - 1 decode steps)."""
    import dse
    parts = []
    # NVIDIA NeMo Llama-2 (TensorRT-LLM backend), batch 1, end-to-end latency in seconds.
    nemo = _read_csv("nemo_llama2_latency.csv")
    rows = [_inference_row(r["model"], r["gpu_type"], r["precision"], "") for _, r in nemo.iterrows()]
    frame = pd.DataFrame({"model": [r[0] for r in rows], "system": [r[1] for r in rows],
                          "precision": [r[2] for r in rows], "kv_precision": [r[3] for r in rows],
                          "tp": nemo["tp"].map(_num), "pp": 1.0, "gpus": nemo["tp"].map(_num),
                          "batch": nemo["batch_size"].map(_num), "isl": nemo["isl"].map(_num),
                          "osl": nemo["osl"].map(_num)})
    for k, v in _inference_settings("nemo").items():
        frame[k] = v
    out = dse.evaluate_inference(frame)
    parts.append(pd.DataFrame({
        "id": [f"N{i + 1:04d}" for i in range(len(nemo))], "suite": "inference",
        "source": "NeMo Llama-2 latency", "model": nemo["model"], "system": frame["system"],
        "metric": "end_to_end_latency", "unit": "s", "measured": nemo["end_to_end_latency_s"].map(_num),
        "predicted": out["e2e_latency_s"], "skip": [r[4] for r in rows]}))

    # TensorRT-LLM performance doc: fixed-batch output throughput and batch-1 first-token latency.
    trt = _read_csv("inference.csv")
    rows = [_inference_row(r["model"], r["gpu_type"], r["precision"], r["weights_kv_quant"]) for _, r in trt.iterrows()]
    frame = pd.DataFrame({"model": [r[0] for r in rows], "system": [r[1] for r in rows],
                          "precision": [r[2] for r in rows], "kv_precision": [r[3] for r in rows],
                          "tp": trt["tp"].map(_num), "pp": trt["pp"].map(lambda v: _num(v, 1.0)),
                          "gpus": trt["gpus"].map(_num), "batch": trt["batch_size"].map(_num),
                          "isl": trt["isl"].map(_num), "osl": trt["osl"].map(_num)})
    settings = pd.DataFrame.from_records([_inference_settings(f) for f in trt["framework"]], index=trt.index)
    for k in settings.columns:
        frame[k] = settings[k].fillna(True).astype(bool)
    out = dse.evaluate_inference(frame)
    metric = trt["measured_metric_name"]
    predicted = pd.Series(np.nan, index=trt.index)
    per_gpu = metric == "output_throughput_per_gpu"
    predicted[per_gpu] = (out["output_tokens_per_s"] / frame["gpus"])[per_gpu]
    # "out tok/s" without "/GPU" (A100 and L40S tables of the same doc): read per GPU like the H100
    # table. The total reading is physically impossible: I0033 (Llama-2 70B, 4 x A100, batch 1280,
    # 128/128) at 670 tok/s in total would take 1.9 s per decode step, ten times the step's FLOPs at
    # peak. For the TP=1 rows both readings agree.
    total = metric == "output_throughput"
    predicted[total] = (out["output_tokens_per_s"] / frame["gpus"])[total]
    ftl = metric == "first_token_latency"
    predicted[ftl] = out["ttft_s"][ftl] * 1e3
    skip = pd.Series([r[4] for r in rows], index=trt.index)
    skip = skip.where(skip != "", np.where(~out["fits"], "does not fit: " + out["infeasible_reason"].astype(str), ""))
    fixed = trt["scenario"].str.contains("static batch")
    parts.append(pd.DataFrame({
        "id": trt["id"], "suite": "inference",
        "source": np.where(fixed, "TensorRT-LLM fixed-batch throughput", "TensorRT-LLM first-token latency"),
        "model": trt["model"], "system": frame["system"], "metric": metric, "unit": trt["unit"].str.split(" ").str[0],
        "measured": trt["measured_value"].map(_num), "predicted": predicted, "skip": skip}))
    res = pd.concat(parts, ignore_index=True)
    res["error_pct"] = (res["predicted"] / res["measured"] - 1) * 100
    res["skipped"] = res.pop("skip")
    res.loc[res["skipped"] != "", ["predicted", "error_pct"]] = np.nan
    return res[["id", "suite", "source", "model", "system", "metric", "unit", "measured", "predicted",
                "error_pct", "skipped"]]


SUITES["inference"] = inference_results


def collect(suites=None) -> pd.DataFrame:
    names = suites or list(SUITES)
    return pd.concat([SUITES[name]() for name in names], ignore_index=True)


def summary(results: pd.DataFrame) -> pd.DataFrame:
    ok = results[results["skipped"] == ""]
    g = ok.groupby("source")["error_pct"]
    table = pd.DataFrame({"rows": g.size(), "mape_pct": g.apply(lambda e: e.abs().mean()),
                          "max_abs_pct": g.apply(lambda e: e.abs().max()), "bias_pct": g.mean()})
    for suite, part in ok.groupby("suite"):
        table.loc[f"ALL {suite}"] = [len(part), part["error_pct"].abs().mean(),
                                     part["error_pct"].abs().max(), part["error_pct"].mean()]
    return table


def run(args) -> int:
    results = collect(args.suite or None)
    table = summary(results)
    if args.json:
        payload = {"rows": json.loads(results.to_json(orient="records")),
                   "summary": json.loads(table.reset_index(names="source").to_json(orient="records"))}
        json.dump(payload, sys.stdout, indent=1)
        print()
        return 0
    with pd.option_context("display.width", 200, "display.max_rows", 1000, "display.max_colwidth", 28):
        shown = results.copy()
        shown["measured"] = shown["measured"].map(lambda v: f"{v:.4g}")
        shown["predicted"] = shown["predicted"].map(lambda v: "" if np.isnan(v) else f"{v:.4g}")
        shown["error_pct"] = shown["error_pct"].map(lambda v: "" if np.isnan(v) else f"{v:+.1f}")
        print(shown[["id", "source", "model", "system", "metric", "unit", "measured", "predicted",
                     "error_pct", "skipped"]].to_string(index=False))
        print()
        print("Mean absolute percentage error per source:")
        print(table.round(2).to_string())
    return 0


def register(sub) -> None:
    p = sub.add_parser("validate", help="compare predictions with published measurements")
    p.add_argument("--json", action="store_true", help="print rows and summary as JSON")
    p.add_argument("--suite", action="append", choices=sorted(SUITES), help="only these suites (repeatable)")
    p.set_defaults(func=run)
