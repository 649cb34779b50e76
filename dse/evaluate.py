"""The drivers: one design point per row, the whole pipeline readable in one place.

    to_columns -> schema.check_known -> resolve (model, framework) -> hardware (technology-derived
    accelerators; a catalog system's memory swap) -> resolve (system, defaults) -> normalise
    (schema defaults, enum codes, float32) -> blockwise(kernel) -> reasons -> economics -> pack

`evaluate_training`, `evaluate_inference` and `evaluate_hardware` take a pandas DataFrame or a
mapping of columns (scalars broadcast) and give back the same kind, same rows, same order, with
the result columns added. Columns are listed by `dse list columns` (dse.schema).
"""
from __future__ import annotations

import ctypes
import sys

import numpy as np
import pandas as pd

from dse import economics, hardware, resolve, schema
from dse.columns import MODEL_FLOAT, CatalogColumn, as_bool, as_float, blockwise, length, pack, real, to_columns
from dse.errors import ConfigError
from dse.perf.inference import BOUNDS, inference_columns
from dse.perf.serving import serving_columns
from dse.perf.training import training_columns


def resolved(frame, evaluator: str):
    """(caller's columns, resolved working columns, rows): names turned into numbers, hardware derived."""
    cols, n = to_columns(frame)
    schema.check_known(cols)
    work = dict(cols)
    resolve.model(work)
    resolve.framework(work)
    hardware_stage(work)
    return cols, work, n


def hardware_stage(work: dict) -> dict:
    """Per-GPU hardware columns: technology-derived accelerators (rows with a `node`), catalog
    systems (their NaN gaps), defaults for hardware given as numbers, and a catalog system's DRAM
    replaced by another `memory` generation. Explicit hardware columns win. Returns `work`."""
    if "node" in work:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # unbuildable rows are flagged
            derived = hardware.accelerator_columns(work)
        for k, v in derived.items():
            work.setdefault(k, v)
    resolve.system(work)
    resolve.hardware_defaults(work)
    if "memory" in work and "system" in work and "node" not in work:
        work.update(hardware.memory_override(work))
    return work


def _numeric(work: dict, names) -> dict:
    """Float32 arrays for the blockwise arithmetic (catalog columns stay lazy, looked up per block)."""
    return {k: work[k].astype(MODEL_FLOAT) if isinstance(work[k], CatalogColumn)
            else np.asarray(work[k], dtype=MODEL_FLOAT) for k in names}


def _one_valued(inputs: dict, n: int) -> dict:
    """`inputs` with each per-row array that holds one value on every row (a defaulted column, a
    broadcast scalar) as a one-entry CatalogColumn: a uniform block (dse.columns.blockwise) reads it
    as that one value, so it is never reordered and the arithmetic on it is not repeated per row."""
    zeros = None
    for k, v in inputs.items():
        if not isinstance(v, np.ndarray) or v.ndim != 1 or v.dtype.kind not in "biuf" or n < 2:
            continue
        bits = v.view(f"u{v.itemsize}")   # the same bits: -0.0 is not 0.0, a NaN is one value
        if v.strides == (0,) or (bits == bits[0]).all():
            zeros = np.zeros(n, dtype=np.intp) if zeros is None else zeros
            inputs[k] = CatalogColumn(zeros, v[:1].copy(), np.ones(1, dtype=bool))
    return inputs


def _setting(work: dict, name: str, kind: str):
    """A software setting for the blockwise arithmetic: a preset's per-row lookup stays lazy."""
    v = work[name]
    if isinstance(v, CatalogColumn) and not v.has_gaps:
        return v if kind == "bool" and v.dtype == bool else v if kind == "code" else v.astype(MODEL_FLOAT)
    if kind == "bool":
        return as_bool(work, name, False)
    if kind == "code":
        return schema.enum_codes(work, name)
    return np.asarray(as_float(work, name, np.nan), dtype=MODEL_FLOAT)


def _sequence_parallel(work: dict, tp) -> np.ndarray:
    """Sequence parallelism: as given, else on with TP (Megatron-Core and NeMo recipes)."""
    if "sp" not in work:
        return tp > 1
    sp = work["sp"]
    if np.asarray(sp).dtype.kind == "f":
        sp = np.asarray(sp)
        return np.where(np.isnan(sp), tp > 1, sp != 0)
    return as_bool(work, "sp", False)


def _number(work: dict, name: str) -> np.ndarray:
    """A numeric input as floats (as_float, with the schema default); one not given is its default
    broadcast to every row (a read-only view, not a per-row copy)."""
    if name not in work:
        return np.broadcast_to(np.float64(schema.default_number(name)), (length(work),))
    return as_float(work, name, schema.default_number(name))


def _model_float(v) -> np.ndarray:
    """v as MODEL_FLOAT; one value broadcast to every row (_number) stays a broadcast."""
    v = np.asarray(v)
    if v.ndim == 1 and v.strides == (0,):
        return np.broadcast_to(v[:1].astype(MODEL_FLOAT), v.shape)
    return np.asarray(v, dtype=MODEL_FLOAT)


def _fill_missing(x: np.ndarray, fill) -> np.ndarray:
    """x with its NaN entries replaced by those of fill() (called only if x has any)."""
    missing = np.isnan(x)
    return np.where(missing, fill(), x) if missing.any() else x


def training_inputs(work: dict, n: int) -> dict:
    """Every input the training kernel reads, once for the whole batch."""
    f = lambda k: _number(work, k)  # noqa: E731
    tp, pp, cp, ep, vp = f("tp"), f("pp"), f("cp"), f("ep"), f("vp")
    gpus, dp = f("gpus"), f("dp")  # either may be missing (per row): one gives the other
    if (np.isnan(gpus) & np.isnan(dp)).all():
        raise ConfigError("gpus: missing; give `gpus` or `dp`")  # a row missing both is infeasible
    dp = _fill_missing(dp, lambda: gpus / (tp * pp * cp))
    gpus = _fill_missing(gpus, lambda: tp * pp * dp * cp)
    micro_batch = f("micro_batch")
    global_batch = _fill_missing(f("global_batch"), lambda: dp * micro_batch)
    out = _numeric(work, schema.MODEL_COLUMNS + schema.HARDWARE_COLUMNS)
    etp = f("etp")
    degrees = dict(gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=vp, micro_batch=micro_batch,
                   global_batch=global_batch, etp=np.where(np.isnan(etp), tp, etp))
    out.update({k: _model_float(v) for k, v in degrees.items()})
    precision = schema.enum_codes(work, "precision")
    out.update(precision=precision, expert_precision=schema.expert_precision_codes(work, precision),
               recompute=_setting(work, "recompute", "code"),
               recompute_modules=schema.module_masks(work), offload_modules=schema.module_masks(work, "offload_modules"),
               sp=_sequence_parallel(work, tp), topology_code=schema.enum_codes(work, "topology"),
               zero=_setting(work, "zero", "float"), moe_imbalance=_setting(work, "moe_imbalance", "float"),
               moe_capacity_factor=_setting(work, "moe_capacity_factor", "float"),
               moe_rank_capacity_factor=_setting(work, "moe_rank_capacity_factor", "float"),
               moe_dispatcher=_setting(work, "moe_dispatcher", "code"), moe_routing=_setting(work, "moe_routing", "code"),
               cp_comm=_setting(work, "cp_comm", "code"),
               pp_schedule=_setting(work, "pp_schedule", "code"),
               mtp_layers=_model_float(f("mtp_layers")),
               adapter=schema.enum_codes(work, "adapter"), adapter_rank=_model_float(f("adapter_rank")),
               adapter_modules=schema.enum_codes(work, "adapter_modules"),
               document_tokens=_model_float(f("document_tokens")),
               offload_layers=_model_float(f("offload_layers")), recompute_layers=_model_float(f("recompute_layers")),
               **{k: _setting(work, k, "float") for k in ("host_layer_s", "host_expert_s", "host_chunk_s", "expert_gemm_efficiency",
                                                           "main_grad_bytes", "adam_moment_bytes")},
               **{k: _setting(work, k, "bool") for k in ("flash_attention", "attention_fa2", "fp8_attention", "dp_overlap",
                                                         "tp_overlap", "tp_overlap_aggregate", "dp_hierarchical", "moe_a2a_overlap", "cuda_graphs",
                                                         "moe_pad_to_capacity",
                                                         "expert_bias_unfused", "expert_clamp_unfused", "yarn_rope_unfused", "remat_by_name")})
    return out


def inference_inputs(work: dict, n: int) -> dict:
    """Every input the inference kernel reads, once for the whole batch."""
    f = lambda k: _number(work, k)  # noqa: E731
    tp, pp, ep = f("tp"), f("pp"), f("ep")
    gpus, dp = f("gpus"), f("dp")
    dp = np.where(np.isnan(dp), np.where(np.isnan(gpus), 1.0, gpus / (tp * pp)), dp)
    gpus = np.where(np.isnan(gpus), tp * pp * dp, gpus)
    out = _numeric(work, schema.MODEL_COLUMNS + schema.HARDWARE_COLUMNS)
    scenario = dict(gpus=gpus, tp=tp, pp=pp, dp=dp, ep=ep, batch=f("batch"), isl=f("isl"), osl=f("osl"))
    out.update({k: _model_float(v) for k, v in scenario.items()})
    precision = schema.enum_codes(work, "precision")
    out.update(precision=precision, expert_precision=schema.expert_precision_codes(work, precision),
               kv_precision=schema.enum_codes(work, "kv_precision"), topology_code=schema.enum_codes(work, "topology"),
               flash_attention=_setting(work, "flash_attention", "bool"),
               gqa_kv_sharing=_setting(work, "gqa_kv_sharing", "bool"),
               custom_all_reduce=_setting(work, "custom_all_reduce", "bool"),
               moe_min_latency=_setting(work, "moe_min_latency", "bool"),
               moe_kernels=_setting(work, "moe_kernels", "code"),
               **{k: _setting(work, k, "float") for k in ("launch_overhead_s", "layer_overhead_s",
                                                          "collective_overhead_s", "moe_imbalance")})
    return out


SERVING_SETTINGS = ("launch_overhead_s", "layer_overhead_s", "collective_overhead_s", "max_num_tokens", "max_num_seqs",
                    "kv_block_tokens", "kv_memory_fraction", "moe_imbalance")


def serving_inputs(work: dict, n: int) -> dict:
    """Every input the serving kernel reads, once for the whole batch."""
    f = lambda k: _number(work, k)  # noqa: E731
    tp, pp, ep = f("tp"), f("pp"), f("ep")
    gpus = f("gpus")
    gpus = np.where(np.isnan(gpus), tp * pp * np.where(np.isnan(f("dp")), 1.0, f("dp")), gpus)
    out = _numeric(work, schema.MODEL_COLUMNS + schema.HARDWARE_COLUMNS)
    scenario = dict(gpus=gpus, tp=tp, pp=pp, ep=ep, isl=f("isl"), osl=f("osl"), concurrency=f("concurrency"),
                    request_rate=f("request_rate"), isl_std=f("isl_std"),
                    spec_draft_tokens=f("spec_draft_tokens"), spec_acceptance=f("spec_acceptance"),
                    prefill_gpus=f("prefill_gpus"), decode_gpus=f("decode_gpus"), prefill_tp=f("prefill_tp"),
                    prefill_ep=f("prefill_ep"))
    out.update({k: _model_float(v) for k, v in scenario.items()})
    precision = schema.enum_codes(work, "precision")
    out.update(precision=precision, expert_precision=schema.expert_precision_codes(work, precision),
               kv_precision=schema.enum_codes(work, "kv_precision"),
               topology_code=schema.enum_codes(work, "topology"), disaggregated=as_bool(work, "disaggregated", False),
               moe_dispatcher=_setting(work, "moe_dispatcher", "code"), moe_routing=_setting(work, "moe_routing", "code"),
               moe_a2a_overlap=_setting(work, "moe_a2a_overlap", "bool"),
               flash_attention=_setting(work, "flash_attention", "bool"),
               gqa_kv_sharing=_setting(work, "gqa_kv_sharing", "bool"),
               custom_all_reduce=_setting(work, "custom_all_reduce", "bool"),
               moe_min_latency=_setting(work, "moe_min_latency", "bool"),
               moe_kernels=_setting(work, "moe_kernels", "code"),
               prefill_first=_setting(work, "prefill_first", "bool"),
               kv_fraction_of_free=_setting(work, "kv_fraction_of_free", "bool"),
               **{k: _setting(work, k, "float") for k in SERVING_SETTINGS})
    return out


KEY_RESULTS = ("step_time_s", "tokens_per_s", "mfu", "mem_per_gpu_bytes", "ttft_s", "tpot_s",
               "e2e_latency_s", "output_tokens_per_s")


def _reasons(work: dict, out: dict, invalid: list = ()) -> None:
    """`infeasible_reason` as a categorical (one string per distinct reason; missing where the row
    is feasible) from the code; rows feasible so far whose derived accelerator cannot be built get
    code `hardware` and the hardware model's own words; rows with an input outside its domain
    (`invalid`: [(column, mask)], dse.schema.domain_violations) get code `domain` naming the column,
    whatever the model computed for them."""
    code = out["infeasible_code"]
    finite = np.ones(len(code), dtype=bool)   # a feasible row never reports a non-finite result
    for k in KEY_RESULTS:
        if k in out:
            finite &= np.isfinite(out[k])
    code = np.where((code == 0) & ~finite, schema.REASON_CODE["overflow"], code).astype(np.int8)
    index = {t: i for i, t in enumerate(schema.REASON_TEXT)}  # reason text -> category
    text_code = np.where(code == 0, -1, code).astype(np.int32)
    if "hw_fits" in work:
        bad = (code == 0) & ~np.asarray(work["hw_fits"], dtype=bool)
        code = np.where(bad, schema.REASON_CODE["hardware"], code).astype(np.int8)
        if bad.any():
            hw_codes, hw_texts = pd.factorize(np.asarray(work["hw_infeasible_reason"], dtype=object)[bad])
            text_code[bad] = np.array([index.setdefault(t, len(index)) for t in hw_texts])[hw_codes]
    for name, bad in reversed(list(invalid)):  # the first violated column is written last
        code = np.where(bad, schema.REASON_CODE["domain"], code).astype(np.int8)
        text_code[bad] = index.setdefault(schema.domain_text(name), len(index))
    out["infeasible_reason"] = _used_categories(text_code, list(index))
    out["infeasible_code"], out["fits"] = code, code == 0


def _used_categories(codes: np.ndarray, categories: list) -> pd.Categorical:
    """Categorical of `codes` (-1: missing) keeping only the categories some row has, in their order
    (Categorical.remove_unused_categories without its sort of every code)."""
    used = np.bincount(codes + 1, minlength=len(categories) + 1)[1:] > 0
    remap = np.append(np.where(used, np.cumsum(used) - 1, -1), -1).astype(codes.dtype)
    kept = pd.Index([c for c, u in zip(categories, used) if u], dtype=object)
    return pd.Categorical.from_codes(remap[codes], categories=kept)


def _invalid(cols: dict, evaluator: str) -> list:
    """Rows whose explicit inputs are out of domain, plus rows that give neither gpus nor dp."""
    invalid = schema.domain_violations(cols, evaluator)
    if "gpus" in cols and np.asarray(cols["gpus"]).dtype.kind == "f":
        missing = np.isnan(np.asarray(cols["gpus"]))
        if "disaggregated" in cols:   # a disaggregated deployment counts its pools' GPUs
            missing &= ~as_bool(cols, "disaggregated", False)
        if "dp" in cols and np.asarray(cols["dp"]).dtype.kind in "iuf":
            missing &= np.isnan(np.asarray(cols["dp"], dtype=float))
        if missing.any():
            invalid.insert(0, ("gpus", missing))
    return invalid


# Rows resolved and evaluated at a time: a long frame is processed in slices written into
# preallocated output columns, so its temporaries (per-row lookups, float32 inputs, economics)
# never exist for the whole frame at once.
SLICE_ROWS = 1 << 20


def _release_freed_memory():
    """Hand freed memory back to the OS before and between the slices of a long frame: pages of
    Arrow's allocator that reading the frame (pandas.read_parquet) left cached, about the frame's
    size again, and the C heap's freed block temporaries (a few hundred kB each, which glibc keeps
    on its heap once its mmap threshold has grown). Neither is memory anything still uses."""
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.default_memory_pool().release_unused()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):   # not glibc: nothing to trim
        pass


def _in_slices(frame, run):
    """Results of `run(columns)` for the whole frame, computed slice by slice; categorical outputs
    keep one category list across slices."""
    cols, n = to_columns(frame)
    if n <= SLICE_ROWS:
        return pack(frame, run(cols))
    _release_freed_memory()
    out, categories = {}, {}
    for start in range(0, n, SLICE_ROWS):
        part = run({k: v[start:start + SLICE_ROWS] for k, v in cols.items()})
        _release_freed_memory()
        for k, v in part.items():
            if isinstance(v, pd.Categorical):
                index = categories.setdefault(k, {})
                remap = np.array([index.setdefault(c, len(index)) for c in v.categories] + [-1], dtype=np.int32)
                v = remap[np.where(v.codes < 0, len(v.categories), v.codes)]
            v = np.asarray(v)
            if k not in out:
                out[k] = np.empty(n, dtype=v.dtype if v.dtype.kind != "O" else object)
            out[k][start:start + len(v)] = v
    for k, index in categories.items():
        out[k] = pd.Categorical.from_codes(out[k], categories=pd.Index(list(index), dtype=object))
    return pack(frame, out)


def evaluate_training(frame):
    """Add training results to every row of `frame` (DataFrame or mapping of arrays)."""
    return _in_slices(frame, _training)


def _kernel(cols: dict, evaluator: str, inputs_of, columns_of):
    """(resolved columns, the kernel's inputs, its outputs with reasons) of one evaluator: names
    resolved, inputs built once for the batch, the kernel run block by block, reasons attached."""
    cols, work, n = resolved(cols, evaluator)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # infeasible rows may divide by zero
        inputs = _one_valued(inputs_of(work, n), n)
        out = blockwise(columns_of, inputs, n)
    _reasons(work, out, _invalid(cols, evaluator))
    return work, inputs, out


def _training(cols: dict) -> dict:
    work, inputs, out = _kernel(cols, "training", training_inputs, training_columns)
    out.update(economics.workload_costs(work, out["step_time_s"], out["tokens_per_step"], inputs["gpus"]))
    return out


def evaluate_inference(frame):
    """Add inference results to every row of `frame`: one static batch of `batch` sequences of
    `isl` prompt and `osl` output tokens (see dse.perf.inference)."""
    return _in_slices(frame, _inference)


def _inference(cols: dict) -> dict:
    work, inputs, out = _kernel(cols, "inference", inference_inputs, inference_columns)
    for phase in ("prefill_bound", "decode_bound"):  # compute / memory / network, as a categorical
        out[phase] = pd.Categorical.from_codes(out[phase], categories=list(BOUNDS))
    # One batch run (prefill + decode of `batch` sequences) is the step, its output tokens the tokens.
    with np.errstate(invalid="ignore", over="ignore"):
        output_tokens = real(inputs["batch"]).astype(float) * real(inputs["osl"])
    out.update(economics.workload_costs(work, out["e2e_latency_s"], output_tokens, real(inputs["gpus"]).astype(float)))
    return out


def evaluate_serving(frame):
    """Add serving results to every row of `frame`: continuous batching in steady state, aggregated
    or disaggregated, at a concurrency or as many requests as fit (see dse.perf.serving)."""
    return _in_slices(frame, _serving)


def _serving(cols: dict) -> dict:
    work, _, out = _kernel(cols, "serving", serving_inputs, serving_columns)
    # one second of the deployment: its output tokens, on all its GPUs
    out.update(economics.workload_costs(work, 1.0, out["output_tokens_per_s"], out["serving_gpus"]))
    return out


def evaluate_hardware(frame):
    """Accelerator specs and cost per row from technology columns (see dse.hardware)."""
    cols, _ = to_columns(frame)
    schema.check_known(cols)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # unbuildable rows are flagged
        return pack(frame, hardware.accelerator_columns(cols))
