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

How each row is read is data, in the `dse_*` columns beside the published fields: the framework
preset that produced it (`dse_framework`, a row of dse/catalog/frameworks.csv: FlashAttention,
TP/DP overlap, distributed optimizer, MoE balancing, GQA decode kernels), the catalog model and
system, the settings the source states (recompute, sequence parallelism, ZeRO stage, precision),
the source group it is reported under, and why a row is skipped. Nothing is fitted per row and
nothing here parses source text.
"""
from __future__ import annotations

from importlib import resources

import numpy as np
import pandas as pd

from dse import catalog

GIB = 2**30


def _read_csv(name: str) -> pd.DataFrame:
    with resources.files("dse.validation").joinpath(name).open("r") as fh:
        return pd.read_csv(fh, dtype=str, keep_default_na=False)


def _num(x, default=np.nan):
    try:
        return float(str(x).replace(",", "").strip())
    except ValueError:
        return default


EQ3_TFLOPS_SOURCES = ("Narayanan 2021 Table 1", "Narayanan 2021 Table 2", "Narayanan 2021 Fig 13",
                      "Narayanan 2021 Fig 14", "Narayanan 2021 Fig 15", "Shoeybi 2019")
DIMENSIONS = (("layers", "layers"), ("hidden", "hidden"), ("ffn_hidden", "ffn_hidden"), ("heads", "heads"),
              ("kv_heads", "kv_heads"), ("experts", "num_experts"), ("top_k", "topk"), ("seq_len", "seq_len"),
              ("vocab", "vocab"))
FLAGS = ("gated_mlp", "dropout", "tied_embeddings", "learned_pos_emb")


def _model_columns(r) -> dict:
    """Model columns of a row: the catalog model (`dse_model`) with the dimensions the row states."""
    from dse import catalog, schema
    dims = {k: _num(r[c]) for k, c in DIMENSIONS}
    if r["dse_model"]:
        base = catalog.model(r["dse_model"])
        changed = (not np.isnan(dims["layers"]) and dims["layers"] != base["layers"]) or \
                  (not np.isnan(dims["hidden"]) and dims["hidden"] != base["hidden"])
        for k in schema.MODEL_COLUMNS:  # every field of the catalog model (MLA ranks, windows, ...)
            if k in base and (k not in dims or np.isnan(dims[k])) and _num(base[k]) == _num(base[k]):
                dims[k] = _num(base[k])
        if changed:  # a resized variant of a catalog model keeps h / heads per head
            dims["head_dim"] = dims["hidden"] / dims["heads"]
    else:
        dims.update({k: _num(r[f"dse_{k}"]) for k in FLAGS})
    if dims.get("experts", 0) and np.isnan(dims.get("moe_ffn_hidden", np.nan)):
        dims["moe_ffn_hidden"] = dims["ffn_hidden"]
    return {k: v for k, v in dims.items() if not np.isnan(v)}


# Settings a row takes from the recipe or script that produced it (MoE, CUDA graphs, recompute modules,
# the TP-overlap switch, the DDP implementation of Narayanan et al.'s scripts, an expert capacity)
STATED_SETTINGS = ("moe_dispatcher", "moe_routing", "moe_a2a_overlap", "cuda_graphs", "adapter", "pp_schedule", "recompute_modules", "attention_fa2",
                   "fp8_attention", "expert_precision", "tp_overlap", "tp_overlap_aggregate", "dp_overlap", "moe_pad_to_capacity", "expert_clamp_unfused",
                   "yarn_rope_unfused", "adapter_modules", "offload_modules")
# Numbers a row states (default: etp = tp, no MTP, unpacked, no offloading, dropless experts)
STATED_NUMBERS = ("etp", "mtp_layers", "document_tokens", "offload_layers", "dse_moe_capacity_factor", "dse_adam_moment_bytes",
                  "adapter_rank", "recompute_layers")


def routing_imbalance(routing) -> np.ndarray:
    """moe_imbalance of the routing a row states (`dse_routing`), NaN (the preset's) where it states
    none: `dropless`, a real auxiliary-loss router under a forced-balance preset, takes the
    dropless-training scenario of the `default` preset; `eplb`, redundant experts placed by a load
    balancer, evens the loads the serving presets take as skewed; `balanced`, a benchmark's router
    replaced by an even one (NeMo AutoModel's FakeBalancedGate), evens them in training."""
    scenario = {"dropless": float(catalog.frameworks().loc["default", "moe_imbalance"]), "eplb": 1.0, "balanced": 1.0}
    return np.array([scenario.get(v, np.nan) for v in routing], dtype=float)


def training_inputs(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """Evaluate-training input rows for the validation table, and a skip reason per row."""
    records = []
    for _, r in table.iterrows():
        rec = {"framework": r["dse_framework"], "system": r["dse_system"] or "a100-80gb",
               "precision": r["dse_precision"]}
        rec.update(_model_columns(r))
        for name in ("recompute", "zero"):
            if r[f"dse_{name}"]:
                rec[name] = r[f"dse_{name}"]
        if r["dse_sp"]:
            rec["sp"] = r["dse_sp"] == "yes"
        for name in STATED_SETTINGS:  # settings a row's source states (its recipe), where the table has them
            stated = r.get(f"dse_{name}")
            if isinstance(stated, str) and stated:
                rec[name] = stated
        tp, pp, cp, ep, vp = (_num(r[c], 1.0) for c in ("tp", "pp", "cp", "ep", "vp"))
        gpus, gb = _num(r["gpus"], 1.0), _num(r["global_batch"], 1.0)
        rec.update(gpus=gpus, tp=tp, pp=pp, cp=cp, ep=ep, vp=vp, dp=gpus / (tp * pp * cp), global_batch=gb,
                   micro_batch=_num(r["micro_batch"], 1.0))
        for column in STATED_NUMBERS:
            value = _num(r.get(column, ""))
            if value == value:
                rec[column.removeprefix("dse_")] = value
        records.append(rec)
    frame = pd.DataFrame.from_records(records, index=table.index)
    if "dse_routing" in table:
        frame["moe_imbalance"] = routing_imbalance(table["dse_routing"])
    for name in ("recompute", "zero", "sp") + STATED_SETTINGS:  # columns some rows state: the preset fills the others
        if name in frame:
            frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
    return frame, table["dse_skip"]


def _narayanan_tflops(frame, step_time):
    B, s, L, h, V = (frame[k].astype(float) for k in ("global_batch", "seq_len", "layers", "hidden", "vocab"))
    flops = 96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
    return flops / step_time / frame["gpus"] / 1e12


# Training measurements: the shared set, then the Megatron-Bridge performance summary (H100 and
# Blackwell, FP8 and NVFP4), the only public Blackwell training measurements with a stated mapping.
TRAINING_FILES = ("training.csv", "megatron_bridge_training.csv", "narayanan_2021_figures.csv", "new_families_training.csv",
                  "moe_training.csv")


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
    # Narayanan et al. and Shoeybi et al. report TFLOP/s by their eq. 3 (full-recompute forward counted)
    narayanan_style = table["dse_source_group"].isin(EQ3_TFLOPS_SOURCES)
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
        "source": table["dse_source_group"],
        "model": table["model"], "system": frame["system"], "metric": metric, "unit": unit,
        "measured": measured, "predicted": predicted,
        "gpus": frame["gpus"], "tokens_per_step": frame["global_batch"] * frame["seq_len"],
    })
    res["error_pct"] = (res["predicted"] / res["measured"] - 1) * 100
    res["skipped"] = skips.where(skips != "", np.where(predicted.isna(), "metric not modelled", ""))
    res.loc[res["skipped"] != "", ["predicted", "error_pct"]] = np.nan
    # a measured run dse holds infeasible (out of memory, mostly) is still timed and compared, and
    # counted apart: a search would not have offered it (memory figures describe a configuration,
    # which may well not fit, not a run)
    res["fits"] = out["fits"].to_numpy() | (res["skipped"] != "") | (act | pct).to_numpy()
    return res


def moe_row_ids() -> list[str]:
    """Ids of the training rows whose model is a mixture of experts (catalog or stated experts)."""
    table = pd.concat([_read_csv(name) for name in TRAINING_FILES], ignore_index=True)
    frame, _ = training_inputs(table)
    experts = frame["experts"] if "experts" in frame else pd.Series(0.0, index=frame.index)
    return table.loc[experts.fillna(0.0).astype(float) > 0, "id"].tolist()


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
# the columns every suite returns, and the skip reason of a row dse holds infeasible
RESULT_COLUMNS = ["id", "suite", "source", "model", "system", "metric", "unit", "measured", "predicted",
                  "error_pct", "skipped", "fits"]
DOES_NOT_FIT = "does not fit"


# ---- inference -----------------------------------------------------------------------------
def _inference_frame(t: pd.DataFrame, batch: str, pp) -> pd.DataFrame:
    """Evaluate-inference inputs of a validation table: catalog names and the preset from `dse_*`."""
    return pd.DataFrame({"model": t["dse_model"].replace("", "llama2-7b"),
                         "system": t["dse_system"].replace("", "a100-80gb"),
                         "framework": t["dse_framework"], "precision": t["dse_precision"],
                         "kv_precision": t["dse_kv_precision"], "tp": t["tp"].map(_num), "pp": pp,
                         "gpus": t["gpus"].map(_num) if "gpus" in t else t["tp"].map(_num),
                         "batch": t[batch].map(_num), "isl": t["isl"].map(_num), "osl": t["osl"].map(_num)})


def inference_results() -> pd.DataFrame:
    """NeMo Llama-2 end-to-end latencies and TensorRT-LLM fixed-batch throughput / first-token
    latency against `evaluate_inference` (static batching: one prefill, then osl - 1 decode steps)."""
    import dse
    parts = []
    # NVIDIA NeMo Llama-2 (TensorRT-LLM backend), batch 1, end-to-end latency in seconds.
    nemo = _read_csv("nemo_llama2_latency.csv")
    frame = _inference_frame(nemo, "batch_size", 1.0)
    out = dse.evaluate_inference(frame)
    parts.append(pd.DataFrame({
        "id": [f"N{i + 1:04d}" for i in range(len(nemo))], "suite": "inference",
        "source": "NeMo Llama-2 latency", "model": nemo["model"], "system": frame["system"],
        "metric": "end_to_end_latency", "unit": "s", "measured": nemo["end_to_end_latency_s"].map(_num),
        "predicted": out["e2e_latency_s"], "skip": nemo["dse_skip"]}))

    # TensorRT-LLM performance doc: fixed-batch output throughput and batch-1 first-token latency.
    trt = _read_csv("inference.csv")
    frame = _inference_frame(trt, "batch_size", trt["pp"].map(lambda v: _num(v, 1.0)))
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
    skip = trt["dse_skip"]
    skip = skip.where(skip != "", np.where(~out["fits"], DOES_NOT_FIT + ": " + out["infeasible_reason"].astype(str), ""))
    parts.append(pd.DataFrame({
        "id": trt["id"], "suite": "inference",
        "source": trt["dse_source_group"],
        "model": trt["model"], "system": frame["system"], "metric": metric, "unit": trt["unit"].str.split(" ").str[0],
        "measured": trt["measured_value"].map(_num), "predicted": predicted, "skip": skip}))
    res = pd.concat(parts, ignore_index=True)
    res["error_pct"] = (res["predicted"] / res["measured"] - 1) * 100
    res["skipped"] = res.pop("skip")
    res.loc[res["skipped"] != "", ["predicted", "error_pct"]] = np.nan
    res["fits"] = ~res["skipped"].str.startswith(DOES_NOT_FIT)
    return res[RESULT_COLUMNS]


SUITES["inference"] = inference_results


# ---- serving --------------------------------------------------------------------------------
SERVING_NUMBERS = ("isl", "osl", "concurrency", "prefill_gpus", "prefill_tp", "prefill_ep", "decode_gpus", "tp", "pp",
                   "ep", "max_num_tokens", "experts", "gpus", "max_num_seqs", "kv_memory_fraction")


# published serving runs, and AIConfigurator's measured TPOT of aggregated serving (dse/validation/README.md)
SERVING_FILES = ("serving.csv", "aiconfigurator_silicon.csv")


def serving_results(files=SERVING_FILES) -> pd.DataFrame:
    """Published serving throughput (steady state, per pool) and measured TPOT against `evaluate_serving`."""
    import dse
    t = pd.concat([_read_csv(name) for name in files], ignore_index=True)
    frame = pd.DataFrame({"model": t["dse_model"], "system": t["dse_system"], "framework": t["dse_framework"],
                          "precision": t["dse_precision"], "expert_precision": t["dse_expert_precision"],
                          "kv_precision": t["dse_kv_precision"].replace("", None),
                          "disaggregated": t["disaggregated"] == "yes",
                          "moe_dispatcher": t["dse_moe_dispatcher"].replace("", None),   # blank: the preset's
                          "moe_a2a_overlap": t["dse_moe_a2a_overlap"] == "yes",
                          **{k: t[k].map(_num) for k in SERVING_NUMBERS}})
    if "dse_routing" in t:
        frame["moe_imbalance"] = routing_imbalance(t["dse_routing"])
    out = dse.evaluate_serving(frame)
    metric = t["measured_metric_name"]
    predicted = pd.Series([out[m].iloc[i] for i, m in enumerate(metric)], index=t.index, dtype=float)
    skip = t["dse_skip"].where(t["dse_skip"] != "", np.where(~out["fits"], DOES_NOT_FIT + ": " + out["infeasible_reason"].astype(str), ""))
    res = pd.DataFrame({"id": t["id"], "suite": "serving", "source": t["dse_source_group"], "model": t["model"],
                        "system": frame["system"], "metric": metric, "unit": t["unit"],
                        "measured": t["measured_value"].map(_num), "predicted": predicted, "skipped": skip})
    res["error_pct"] = (res["predicted"] / res["measured"] - 1) * 100
    res.loc[res["skipped"] != "", ["predicted", "error_pct"]] = np.nan
    res["fits"] = ~res["skipped"].str.startswith(DOES_NOT_FIT)
    return res[RESULT_COLUMNS]


SUITES["serving"] = serving_results


def collect(suites=None) -> pd.DataFrame:
    names = suites or list(SUITES)
    return pd.concat([SUITES[name]() for name in names], ignore_index=True)


def summary(results: pd.DataFrame) -> pd.DataFrame:
    """Per source the compared rows, their mean, largest and signed mean error (%), and how many of
    its measured runs dse holds infeasible (`not_fit`: compared in training, skipped elsewhere)."""
    ok = results[results["skipped"] == ""]
    g = ok.groupby("source")["error_pct"]
    not_fit = (~results["fits"].astype(bool)).groupby(results["source"]).sum()
    table = pd.DataFrame({"rows": g.size(), "mape_pct": g.apply(lambda e: e.abs().mean()),
                          "max_abs_pct": g.apply(lambda e: e.abs().max()), "bias_pct": g.mean()})
    table["not_fit"] = not_fit.reindex(table.index).fillna(0).astype(int)
    for suite, part in ok.groupby("suite"):
        everything = results[results["suite"] == suite]
        table.loc[f"ALL {suite}"] = [len(part), part["error_pct"].abs().mean(), part["error_pct"].abs().max(),
                                     part["error_pct"].mean(), int((~everything["fits"].astype(bool)).sum())]
    table["rows"] = table["rows"].astype(int)
    table["not_fit"] = table["not_fit"].astype(int)
    return table
