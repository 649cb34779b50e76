"""Every input and output column of dse, and every reason a design point is infeasible: one place.

The column table is data (`dse/catalog/columns.csv`): name, group, dtype, unit, default (a number,
a name, `catalog:<table>` when a catalog fills it, or a formula of other columns), domain, which
evaluators read it, and a one-line doc. The evaluators, space and study files, the store, plots
(axis labels from units) and `dse list columns` all read it from here.

Domains: `>=1`, `>0`, `>=0`, `(0;1]`, `[0;1)`, `[0;1]`, `bool`, a `;`-separated list of allowed values
(enumerations and ZeRO stages), or `catalog:<kind>` for a name looked up in a catalog.

Infeasibility reasons live in `REASONS`: a small integer code (stored as `infeasible_code`), the
text (`infeasible_reason`) and the input field a user changes to fix it. Training, inference and
the hardware model share the codes, so nothing needs to parse reason text.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from dse.errors import ConfigError

# Prefix of columns a user may carry through an evaluation untouched (labels, ids).
USER_PREFIX = "user_"


@dataclass(frozen=True)
class Column:
    name: str
    group: str        # name, model, hardware, efficiency, technology, mapping, setting, scenario,
    dtype: str        # economics; outputs: training, inference, output, economics-out, hardware-out, study
    unit: str         # name | int | float | bool | enum | str
    default: str
    domain: str
    evaluators: tuple
    doc: str

    @property
    def is_input(self) -> bool:
        return bool(self.evaluators)


@lru_cache(maxsize=None)
def columns() -> dict[str, Column]:
    from dse.catalog import _read
    t = _read("columns.csv").fillna("")
    return {r.name: Column(r.name, r.group, r.dtype, str(r.unit), str(r.default), str(r.domain),
                           tuple(e for e in str(r.evaluators).split(";") if e), r.doc)
            for r in t.itertuples(index=False)}


def names(group: str | None = None, evaluator: str | None = None) -> tuple[str, ...]:
    """Column names in table order, optionally of one group and/or read by one evaluator."""
    return tuple(c.name for c in columns().values()
                 if (group is None or c.group == group) and (evaluator is None or evaluator in c.evaluators))


# Model columns a `model` name fills, and per-GPU hardware columns a `system` name fills.
MODEL_COLUMNS = names("model")
HARDWARE_COLUMNS = tuple(n for n in names("hardware") if n != "accelerator_cost_usd") + names("efficiency")
TECHNOLOGY_COLUMNS = names("technology")


def default_number(name: str) -> float:
    """The column's numeric default (NaN where it has none or it is derived from other columns)."""
    try:
        return float(columns()[name].default)
    except ValueError:
        return float("nan")


def unit(name: str) -> str:
    c = columns().get(name)
    return c.unit if c is not None else ""


# Frameworks' names of mapping inputs (Megatron-LM's arguments, trainers' configs), for the hint of an
# unknown column: `tensor_model_parallel_size` is `tp` here.
FRAMEWORK_SPELLINGS = {
    **dict.fromkeys(("tensor_parallel", "tensor_parallel_size", "tensor_model_parallel_size"), "tp"),
    **dict.fromkeys(("pipeline_parallel", "pipeline_parallel_size", "pipeline_model_parallel_size"), "pp"),
    **dict.fromkeys(("context_parallel", "context_parallel_size"), "cp"),
    **dict.fromkeys(("data_parallel", "data_parallel_size"), "dp"),
    **dict.fromkeys(("expert_parallel", "expert_model_parallel_size"), "ep"),
    "expert_tensor_parallel_size": "etp", "virtual_pipeline_model_parallel_size": "vp",
    **dict.fromkeys(("num_gpus", "world_size", "gpu_count"), "gpus"),
    "micro_batch_size": "micro_batch", "global_batch_size": "global_batch",
    **dict.fromkeys(("seq_length", "sequence_length", "max_seq_len"), "seq_len"),
}


def check_known(cols, where: str = "input") -> None:
    """ConfigError for the first column the schema does not know, with the closest known names
    (a framework's spelling of a column suggests that column)."""
    known = columns()
    for name in cols:
        key = str(name)
        if key in known or key.startswith(USER_PREFIX):
            continue
        spelled = difflib.get_close_matches(key, list(known) + list(FRAMEWORK_SPELLINGS), n=3, cutoff=0.6)
        close = list(dict.fromkeys(FRAMEWORK_SPELLINGS.get(c, c) for c in spelled))
        hint = f"did you mean {', '.join(close)}?" if close else "see `dse list columns`"
        raise ConfigError(f"{key}: unknown {where} column ({hint}); prefix your own columns with "
                          f"'{USER_PREFIX}' to carry them through")


# ---- enumerations: value spellings (lower case) and vendor aliases -> integer codes ----------
from dse.catalog import unambiguous  # noqa: E402
from dse.catalog.precision import NAMES as PRECISIONS, SPELLINGS as _PRECISION_ALIASES  # noqa: E402
ENUMS = {
    "precision": PRECISIONS,
    "kv_precision": PRECISIONS,
    "expert_precision": PRECISIONS,
    "recompute": ("none", "selective", "full", "op"),
    "topology": ("fat-tree", "torus2d", "torus3d"),
    "moe_dispatcher": ("alltoall", "allgather", "flex", "deepep"),
    "moe_routing": ("random", "consecutive"),
    "moe_kernels": ("trtllm", "vllm"),
    "cp_comm": ("p2p", "all_gather", "a2a", "a2a+p2p"),
    "adapter": ("none", "lora"),
    "pp_schedule": ("1f1b", "dualpipe"),
    "adapter_modules": ("all", "qkv", "attention", "mlp"),
}
ENUM_ALIASES = {
    "precision": _PRECISION_ALIASES,
    "kv_precision": _PRECISION_ALIASES,
    "expert_precision": _PRECISION_ALIASES,
    "recompute": {"none": 0, "no": 0, "off": 0, "selective": 1, "full": 2, "op": 3, "selective-op": 3, "op-sac": 3,
                  "per-op": 3},
    "topology": {"fat-tree": 0, "fattree": 0, "switched": 0, "torus2d": 1, "2d-torus": 1,
                 "torus3d": 2, "3d-torus": 2},
    "moe_dispatcher": {"alltoall": 0, "all-to-all": 0, "allgather": 1, "all-gather": 1, "flex": 2,
                       "hybridep": 2, "hybrid-ep": 2, "deepep": 3, "deep-ep": 3},
    "moe_routing": {"random": 0, "uniform": 0, "learned": 0, "consecutive": 1, "fake-balanced": 1,
                    "fake-balanced-gate": 1},
    "moe_kernels": {"trtllm": 0, "tensorrt-llm": 0, "vllm": 1},
    "cp_comm": {"p2p": 0, "ring": 0, "all_gather": 1, "allgather": 1, "all-gather": 1, "a2a": 2,
                "ulysses": 2, "all-to-all": 2, "a2a+p2p": 3, "hierarchical": 3},
    "adapter": {"none": 0, "no": 0, "off": 0, "full": 0, "sft": 0, "lora": 1, "peft": 1},
    "pp_schedule": {"1f1b": 0, "interleaved": 0, "1f1b-interleaved": 0, "dualpipe": 1, "dual-pipe": 1},
    "adapter_modules": {"all": 0, "all-linear": 0, "all_linear": 0, "qkv": 1, "attention_qkv": 1, "linear_qkv": 1,
                        "attention": 2, "attn": 2, "qkv,proj": 2, "mlp": 3, "fc1,fc2": 3},
}
BOOL_WORDS = {"true": True, "yes": True, "1": True, "on": True, "1.0": True,
              "false": False, "no": False, "0": False, "off": False, "none": False, "0.0": False}


# Megatron-Core's selective-recompute modules (--recompute-modules), one bit each, and mlp_up (the
# MLP's hidden layer re-run from its up-projection, as MaxText's remat policies that save the
# down-projection output do); a blank list is Megatron-Core's default, core_attn.
RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "moe_act", "mlp", "moe", "shared_experts", "mlp_up")
RECOMPUTE_MODULE_ALIASES = {**{name: name for name in RECOMPUTE_MODULES}, "core_attention": "core_attn",
                            "attention": "core_attn", "norm": "layernorm", "rmsnorm": "layernorm",
                            "act": "moe_act", "up_proj": "mla_up_proj", "mla_up": "mla_up_proj",
                            "shared_expert": "shared_experts", "mlpwi": "mlp_up", "mlp_fc1": "mlp_up"}


# Megatron-Core's fine-grained activation offloading (--offload-modules): each module's input goes to
# host memory in the forward and comes back before its backward (docs/user-guide/features/
# fine_grained_activation_offloading.md @d98e8a64dd); a blank list offloads nothing.
OFFLOAD_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act")
# per module-list column: its names, their spellings, the names a blank value means
MODULE_LISTS = {
    "recompute_modules": (RECOMPUTE_MODULES, RECOMPUTE_MODULE_ALIASES, ("core_attn",)),
    "offload_modules": (OFFLOAD_MODULES, {**{name: name for name in OFFLOAD_MODULES}, "none": None}, ()),
}


def module_bit(name: str, column: str = "recompute_modules") -> int:
    return 1 << MODULE_LISTS[column][0].index(name)


def module_mask(value, column: str = "recompute_modules") -> int:
    """Bit mask of one module-list value (recompute_modules, offload_modules): names separated by
    commas, spaces, '+' or ';'; a blank value is the column's default."""
    names, spellings, blank = MODULE_LISTS[column]
    words = [w for w in re.split(r"[\s,;+\[\]'\"]+", str(value).strip().lower()) if w]
    if not words or words == ["nan"]:
        words = list(blank)
    mask = 0
    for word in words:
        if word not in spellings:
            raise ConfigError(f"{column}: unknown module '{word}'; use names from "
                              f"{', '.join(names)} separated by commas")
        mask |= 0 if spellings[word] is None else module_bit(spellings[word], column)
    return mask


def module_masks(cols: dict, column: str = "recompute_modules") -> np.ndarray:
    """A module-list column of a batch as bit masks (int16); the column's default where absent."""
    from dse.columns import categories, length
    blank = module_mask("", column)
    if column not in cols:
        return np.full(length(cols), blank, dtype=np.int16)
    v = cols[column]
    if not hasattr(v, "categories") and np.asarray(v).dtype.kind in "iu":
        return np.asarray(v, dtype=np.int16)
    codes, uniques = categories(v)
    table = [module_mask(u, column) for u in uniques] + [blank]
    return np.asarray(table, dtype=np.int16)[np.where(codes < 0, len(table) - 1, codes)]


def _bare(spelling: str) -> str:
    """A spelling without its spaces, hyphens, underscores and brackets: 'FP8_CS', 'fp8 cs' and
    'FP8-CS' are one value, as are 'FP8 (block)' and 'fp8-block'."""
    return re.sub(r"[\s_\-()]+", "", spelling)


@lru_cache(maxsize=None)
def _bare_aliases(name: str) -> dict[str, int]:
    """_bare(spelling) -> code for one enumeration, where that is one code only."""
    return unambiguous(ENUM_ALIASES[name].items(), _bare)


def enum_code(name: str, value) -> int:
    """Integer code of one spelling of an enumeration value; ConfigError naming the choices."""
    key = str(value).strip().lower()
    table = ENUM_ALIASES[name]
    if key in table:
        return table[key]
    if _bare(key) in _bare_aliases(name):
        return _bare_aliases(name)[_bare(key)]
    raise ConfigError(f"{name}: unknown value '{value}'; use one of {', '.join(ENUMS[name])}")


def _value_codes(name: str, v, fill, blank=()) -> np.ndarray:
    """int8 codes of an enumeration column's values `v` (spellings, aliases, or codes already);
    `fill()` (a code, or one per row) where a value is missing or one of the `blank` spellings."""
    from dse.columns import categories
    if not hasattr(v, "categories") and np.asarray(v).dtype.kind in "iu":
        return np.asarray(v, dtype=np.int8)
    codes, uniques = categories(v)
    table = [-1 if str(u).strip().lower() in blank else enum_code(name, u) for u in uniques]
    own = np.asarray(table + [-1], dtype=np.int8)[codes]   # a missing value (code -1) takes the last
    missing = own < 0
    return np.where(missing, fill(), own).astype(np.int8) if missing.any() else own


def enum_codes(cols: dict, name: str, default: str | None = None) -> np.ndarray:
    """Integer codes of an enumeration column (spellings, aliases, or codes already), int8;
    the default value where the column is absent or a value is missing."""
    from dse.columns import length
    default = default if default is not None else columns()[name].default
    if name not in cols:
        return np.full(length(cols), enum_code(name, default), dtype=np.int8)
    # a default that is a preset ("framework") is filled before this is reached
    return _value_codes(name, cols[name], lambda: enum_code(name, default))


def expert_precision_codes(cols: dict, precision: np.ndarray) -> np.ndarray:
    """Codes of `expert_precision`: the row's `precision` where the column is absent or blank."""
    if "expert_precision" not in cols:
        return precision
    return _value_codes("expert_precision", cols["expert_precision"], lambda: precision,
                        blank=("", "precision", "nan", "none"))   # spellings of "as precision"


# ---- domains ---------------------------------------------------------------------------------
def out_of_domain(name: str, values) -> np.ndarray:
    """Mask of the values outside the column's declared domain (NaN counts as outside).
    Names, enumerations and booleans are checked where they are resolved, not here."""
    v = np.asarray(values)
    whole = v.dtype.kind in "iu"   # integers are finite and whole: compared as they are
    v = v if whole else v.astype(float)
    dom = columns()[name].domain
    integer = columns()[name].dtype == "int"
    with np.errstate(invalid="ignore"):
        if dom in ("", "bool") or dom.startswith("catalog:") or name in ENUMS:
            return np.zeros(v.shape, dtype=bool)
        if ";" in dom and not dom.startswith(("(", "[")):
            allowed = np.array([float(x) for x in dom.split(";")])
            return ~np.isin(v, allowed)
        if whole:
            bad = np.zeros(v.shape, dtype=bool)
        else:
            bad = ~np.isfinite(v) if dom != ">0" or name != "memory_capacity_bytes" else np.isnan(v)
        if dom.startswith(">="):
            bad |= ~(v >= float(dom[2:]))
        elif dom.startswith(">"):
            bad |= ~(v > float(dom[1:]))
        elif dom[0] in "([":
            lo, hi = (float(x) for x in dom[1:-1].split(";"))
            bad |= ~((v >= lo) if dom[0] == "[" else (v > lo)) | ~((v <= hi) if dom[-1] == "]" else (v < hi))
        if integer and not whole:
            bad |= np.isfinite(v) & (np.floor(v) != v)
    return bad


def domain_violations(cols: dict, evaluator: str) -> list:
    """[(column, mask)] of the rows whose explicit numeric input lies outside its declared domain.
    A missing value (NaN) is not a violation: the column's default fills it."""
    found = []
    for name, v in cols.items():
        c = columns().get(name)
        if c is None or evaluator not in c.evaluators or c.dtype not in ("int", "float") or hasattr(v, "categories"):
            continue
        arr = np.asarray(v)
        if arr.dtype.kind not in "iuf":
            continue
        bad = out_of_domain(name, arr)
        if arr.dtype.kind == "f":
            bad &= ~np.isnan(arr)
        if bad.any():
            found.append((name, bad))
    return found


def domain_text(name: str) -> str:
    c = columns()[name]
    return f"{name}: outside its domain {c.domain} ({c.doc})"


def check_value(name: str, value) -> None:
    """ConfigError if one scalar (a space's fixed value, a CLI argument) is outside its domain."""
    if name not in columns() or isinstance(value, str):
        return
    if bool(out_of_domain(name, [value])[0]):
        raise ConfigError(f"{name}: {value!r} is outside its domain {columns()[name].domain}; "
                          f"{columns()[name].doc}")


# ---- infeasibility reasons ------------------------------------------------------------------
@dataclass(frozen=True)
class Reason:
    code: int
    key: str
    field: str        # the input a user changes to fix it
    message: str


REASONS = (
    Reason(0, "feasible", "", ""),
    Reason(1, "split", "gpus", "tp*pp*dp*cp != gpus: the split must multiply out to the GPU count "
                               "(tp*pp*cp must divide gpus)"),
    Reason(2, "tp_heads", "tp", "tp must divide heads"),
    Reason(3, "tp_kv_heads", "tp", "tp must divide kv_heads or be a multiple of it"),
    Reason(4, "pp_layers", "pp", "pp*vp must not exceed layers + 2 (every model chunk holds a layer, the embedding or the loss)"),
    Reason(5, "global_batch", "global_batch", "dp*micro_batch must divide global_batch"),
    Reason(6, "batch", "batch", "dp must divide batch (each replica serves batch/dp sequences)"),
    Reason(7, "ep_dp", "ep", "ep x etp must divide tp x cp x dp (training; serving: ep must divide dp, or be dp "
                             "times a divisor of tp): the expert layers fold a pipeline stage's ranks"),
    Reason(8, "ep_experts", "ep", "ep must divide experts"),
    Reason(9, "cp_seq_len", "cp", "cp must divide seq_len"),
    Reason(10, "ep_dense", "ep", "ep > 1 needs a mixture-of-experts model"),
    Reason(11, "not_integer", "tp", "degrees, batch sizes and lengths must be positive integers"),
    Reason(12, "out_of_memory", "gpus", "out of memory: weights + gradients + optimizer + activations "
                                        "(or KV cache) exceed the GPU's memory"),
    Reason(13, "hardware", "node", "the technology-derived accelerator cannot be built"),
    Reason(14, "domain", "", "an input is outside its domain (the reason names the column)"),
    Reason(15, "overflow", "", "the inputs are too large for the model's arithmetic (a result is not finite)"),
    # Megatron-LM/Megatron-Core refuse this (schedules.py, forward_backward_pipelining_with_interleaving:
    # "number of microbatches is not divisible by pipeline-model-parallel-size when using interleaved
    # schedule"); the ideal bubble (p-1)/vp would otherwise make such schedules look best.
    Reason(16, "interleave_microbatches", "global_batch",
           "an interleaved schedule (vp > 1) needs a micro-batch count global_batch/(dp*micro_batch) "
           "that is a multiple of pp"),
    Reason(17, "cp_heads", "cp_comm", "all-to-all context parallelism (cp_comm a2a, a2a+p2p) needs its "
                                      "all-to-all group to divide heads/tp; use cp_comm p2p"),
    Reason(18, "disaggregation", "prefill_gpus", "disaggregated serving needs whole prefill and decode pools: "
                                                "prefill_tp must divide prefill_gpus and the heads"),
    Reason(19, "overloaded", "request_rate", "the offered request rate exceeds what the deployment serves; "
                                             "lower request_rate or add GPUs"),
    Reason(20, "dualpipe", "pp_schedule", "DualPipe needs an even pp, an even micro-batch count of at least pp "
                                          "and vp 1 (DeepSeek-V3 report Sec. 3.2.1); use pp_schedule 1f1b"),
    # Megatron-Core refuses these (transformer_config.py: "no support for Pipeline parallelism with
    # CPU offloading", "CPU offloading does not work when activation recomputation is enabled",
    # "CPU offloading can be done only for layers less than num_layers").
    Reason(21, "offload", "offload_layers", "activation offloading needs pp 1, recompute none and fewer "
                                            "offloaded layers than the model has; lower offload_layers or set it to 0"),
    Reason(22, "precision_unsupported", "precision",
           "the GPU's tensor cores cannot multiply in this precision or expert_precision (fp8 and fp8-block "
           "need Ada, Hopper or newer; mxfp8, nvfp4 and mxfp4 Blackwell or newer, nvfp4 an NVIDIA part); use bf16 or a supported format"),
    # Megatron-Core refuses recompute_num_layers under selective recompute (transformer_config.py:
    # "recompute_num_layers must be None") and reads it only under full recompute.
    Reason(23, "recompute_layers", "recompute_layers", "recompute_layers (the block method) applies to full "
                                                        "recompute only; set recompute full or recompute_layers 0"),
)
REASON_CODE = {r.key: r.code for r in REASONS}
REASON_TEXT = np.array([r.message for r in REASONS], dtype=object)
