"""Catalogs: data files with a source beside every number.

`systems.csv`   accelerators in their standard server and cluster (one row per system name)
`efficiency.csv` kernel time-model parameters per GPU fitted by `dse calibrate` from measured kernels
`efficiency_projection.csv` the same per generation for parts without kernel data (with basis)
`models.csv`    transformer dimensions of published models

Names are matched case-insensitively; vendor spellings are aliases. An unknown name
raises `ConfigError` naming the closest catalog entries.
"""
from __future__ import annotations

import difflib
import re
from functools import lru_cache
from importlib import resources

import numpy as np
import pandas as pd

from dse.errors import ConfigError

GIB = 2**30
GB = 10**9


def _read(name: str) -> pd.DataFrame:
    with resources.files("dse.catalog").joinpath(name).open("r") as fh:
        return pd.read_csv(fh)


# Every catalog whose rows are looked up by name: kind -> (file, plural used by `dse list`).
NAMED = {
    "system": ("systems.csv", "systems"), "model": ("models.csv", "models"),
    "framework": ("frameworks.csv", "frameworks"), "node": ("nodes.csv", "nodes"),
    "memory": ("memory.csv", "memories"), "network": ("network.csv", "networks"),
    "package": ("packaging.csv", "packages"),
}
# How close a misspelling must be to a catalog name to be offered as "closest" (difflib ratio).
CLOSE_MATCH_CUTOFF = 0.5


@lru_cache(maxsize=None)
def aliases(kind: str) -> dict[str, str]:
    """Lower-case name or alias -> catalog name, for one named catalog."""
    table = _read(NAMED[kind][0])
    index: dict[str, str] = {}
    for name, more in zip(table["name"].astype(str), table["aliases"].fillna("")):
        index[name.strip().lower()] = name.strip()
        for alias in str(more).split(";"):
            if alias.strip():
                index[alias.strip().lower()] = name.strip()
    return index


# A published checkpoint's name beyond its architecture's: the organisation of a Hugging Face repo
# id, and the suffixes of tuned, reasoning or quantized releases of the same weights' shapes (the
# number format is the precision column's, not the model's)
CHECKPOINT_SUFFIXES = ("-instruct", "-chat", "-hf", "-it", "-base", "-thinking", "-fp8", "-fp4", "-nvfp4",
                       "-mxfp4", "-bf16", "-fp8-dynamic", "-awq", "-gptq", "-int4", "-int8")
# a vendor's name heading a repo name that the organisation already gave ('meta-llama/Meta-Llama-3-70B',
# 'nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16')
VENDOR_WORD = re.compile(r"^(meta|nvidia|mistralai|google|microsoft|ibm)-(?=[a-z])")
MINOR_VERSION = re.compile(r"(?<=\d)-(?=\d(?:-|$))")   # '3-1-405b' -> '3.1-405b', not '3-235b'
RELEASE_TAG = re.compile(r"-(v\d+(\.\d+)*|\d{4})$")   # '-v0.1', a month code '-2507'


def hyphenated(name: str) -> str:
    """Spaces and underscores as hyphens: 'Llama 3.1_8B' -> 'Llama-3.1-8B'."""
    return re.sub(r"[\s_]+", "-", name)


def unambiguous(pairs, key) -> dict:
    """key(spelling) -> value over (spelling, value) pairs, where the key holds one value only (a
    key two values share maps to neither)."""
    found: dict = {}
    for spelling, value in pairs:
        found.setdefault(key(spelling), set()).add(value)
    return {k: values.pop() for k, values in found.items() if len(values) == 1}


def checkpoint_spellings(name: str):
    """`name` (lower case) without a repo's organisation, spaces and underscores as hyphens, then
    with its release tags and tuned/quantized suffixes dropped one at a time from the end, each
    spelling in turn: 'meta-llama/Llama 3.1 8B Instruct FP8' -> 'llama-3.1-8b-instruct-fp8',
    'llama-3.1-8b-instruct', 'llama-3.1-8b'. One at a time, because a tag may be the name's own
    ('deepseek-v3-0324' is deepseek-v3, not 'deepseek'). Then the same without a leading vendor word,
    and each with its one-digit minor versions dotted (Megatron-Bridge's 'LLAMA3_1_405B' and
    'Nemotron_3_5_Lightning' are Llama 3.1 405B and Nemotron 3.5 Lightning)."""
    name = hyphenated(name.rsplit("/", 1)[-1].strip())
    starts = (name, VENDOR_WORD.sub("", name))
    for start in dict.fromkeys(starts + tuple(MINOR_VERSION.sub(".", n) for n in starts)):   # 'Meta-Llama-3-70B' is 'Llama-3-70B'
        name = start
        while True:
            yield name
            release = RELEASE_TAG.search(name)
            suffix = next((s for s in CHECKPOINT_SUFFIXES if name.endswith(s) and len(name) > len(s)), None)
            if release:
                name = name[: release.start()]
            elif suffix:
                name = name[: -len(suffix)]
            else:
                break


def compact(name: str) -> str:
    """A name without the hyphens that do not separate two numbers: 'Qwen3 235B A22B' and
    'qwen3-235b-a22b' spell one model, while 'gpt-35b' stays apart from 'gpt3-5b'."""
    return re.sub(r"(?<!\d)-|-(?!\d)", "", name)


@lru_cache(maxsize=None)
def compact_aliases(kind: str) -> dict[str, str]:
    """compact(hyphenated name or alias) -> catalog name, where that is one name only."""
    return unambiguous(aliases(kind).items(), lambda spelling: compact(hyphenated(spelling)))


# a mixture-of-experts name's active-parameter tail ('-a22b', '-a3b', '-a12b'), which tables often leave
# off ('Qwen3_Next_80B', 'Qwen3.5-397B')
ACTIVE_PARAMS = re.compile(r"-a\d+(\.\d+)?b$")


@lru_cache(maxsize=None)
def active_free_models() -> dict[str, str]:
    """compact(model name or alias without its active-parameter tail) -> catalog name, where that
    is one model only: 'qwen3-235b' is Qwen3-235B-A22B as long as no other Qwen3 235B is listed."""
    tailed = [(a, n) for a, n in aliases("model").items() if ACTIVE_PARAMS.search(hyphenated(a))]
    return unambiguous(tailed, lambda spelling: compact(ACTIVE_PARAMS.sub("", hyphenated(spelling))))


# A part as vendors and clouds spell it beyond the catalog's aliases: the vendor's name first, the
# node it ships in, the form factor and memory size after it ('NVIDIA HGX H200 SXM 141GB HBM3e')
MEMORY_SIZE = re.compile(r"[- ]+(\d+) ?gb( ?hbm\d?e?)?$")
PART_WORDS = (re.compile(r"^\d+ ?x ?"), re.compile(r"^(nvidia|amd)[- ]+"), re.compile(r"^(dgx|hgx)[- ]+"),
              re.compile(r"[- ]+sxm\d*( ac)?"), MEMORY_SIZE)   # '8x H100', nvidia-smi's 'NVIDIA B300 SXM6 AC'
MEMORY_MATCH = 0.1   # a stated memory size within 10% of the part's (marketing GB against GiB: B200 192 vs 180)


def part_spellings(name: str):
    """(spelling, memory size it stated in GB or None) of a part name (lower case) with, one after
    another, the vendor, the node, the form factor and the memory size dropped, spaces as hyphens too."""
    memory = None
    for pattern in (None, *PART_WORDS):
        if pattern is not None:
            found = pattern.search(name) if pattern is MEMORY_SIZE else None
            memory = float(found.group(1)) if found else memory
            name = pattern.sub("", name).strip()
        yield name, memory
        yield re.sub(r"[ _]+", "-", name), memory


def _same_memory(system_name: str, memory_gb) -> bool:
    capacity = float(systems().loc[system_name, "memory_capacity_bytes"]) / 2**30
    return memory_gb is None or abs(capacity - memory_gb) <= MEMORY_MATCH * capacity


def resolve(kind: str, value, field: str | None = None) -> str:
    """Catalog name of `value` in the `kind` catalog (vendor spellings and aliases accepted).

    The one alias resolver of dse: an unknown name is a ConfigError naming the field, the
    closest catalog names and the command that lists them."""
    index = aliases(kind)
    key = str(value).strip().lower()
    if key in index:
        return index[key]
    spellings = checkpoint_spellings(key) if kind == "model" else [hyphenated(key)]
    for spelling in spellings:
        if spelling in index:
            return index[spelling]
        if compact(spelling) in compact_aliases(kind):
            return compact_aliases(kind)[compact(spelling)]
        if kind == "model" and compact(spelling) in active_free_models():
            return active_free_models()[compact(spelling)]
    if kind == "framework":
        from dse.catalog.versions import by_release
        preset = by_release(_read(NAMED[kind][0]), lambda n: compact(hyphenated(n.lower())), key)
        if preset is not None:
            return preset
    if kind == "system":
        for spelling, memory_gb in part_spellings(key):
            if spelling in index and _same_memory(index[spelling], memory_gb):
                return index[spelling]
    close = difflib.get_close_matches(key, list(index), n=3, cutoff=CLOSE_MATCH_CUTOFF)
    names = sorted({index[c] for c in close})
    plural = NAMED[kind][1]
    hint = f"closest: {', '.join(names)}" if names else f"known: {', '.join(sorted(set(index.values())))}"
    if kind == "model" and "mtp" in key:   # 'DeepSeekV3 (w/ MTP)': a mapping in the model's name
        hint += "; multi-token prediction is the mtp_layers column, not part of a model's name"
    raise ConfigError(f"{field or kind}: unknown {kind} '{value}' ({hint}); see `dse list {plural}`")


@lru_cache(maxsize=None)
def systems() -> pd.DataFrame:
    """Systems with SI-unit columns added (the CSV keeps vendor units with sources)."""
    t = _read("systems.csv")
    out = pd.DataFrame({"name": t["name"]})
    out["generation"] = t["generation"]
    out["peak_bf16_flops_per_s"] = t["peak_bf16_tflops"] * 1e12
    # A precision the part lacks runs at the next wider one (FP8 on Ampere runs as BF16).
    out["peak_fp8_flops_per_s"] = t["peak_fp8_tflops"].fillna(t["peak_bf16_tflops"]) * 1e12
    out["peak_fp4_flops_per_s"] = t["peak_fp4_tflops"].fillna(t["peak_fp8_tflops"]).fillna(t["peak_bf16_tflops"]) * 1e12
    # Which formats the tensor cores multiply at all: a part listing an FP4 peak has block-scaled MMAs
    # (Blackwell's FP4 instructions are block-scaled only; CDNA 4 likewise), one listing FP8 has FP8.
    out["fp8_tensor_cores"] = t["peak_fp8_tflops"].notna().astype(float)
    out["block_scaled_tensor_cores"] = t["peak_fp4_tflops"].notna().astype(float)
    # NVFP4's scales (E4M3 per 16) are NVIDIA's; other vendors' FP4 units take the OCP MX scales only
    out["nvfp4_tensor_cores"] = (t["peak_fp4_tflops"].notna() & (t["vendor"] == "nvidia")).astype(float)
    out["memory"] = t["memory"]
    # HBM capacities are binary: an "80GB" H100 reports 81,559 MiB in nvidia-smi.
    out["memory_capacity_bytes"] = t["memory_capacity_gib"] * GIB
    out["memory_bandwidth_bytes_per_s"] = t["memory_bandwidth_tbps"] * 1e12
    out["scaleup"] = t["scaleup"]
    out["scaleup_bandwidth_bytes_per_s"] = t["scaleup_gbps_per_dir"] * 1e9
    out["scaleup_domain"] = t["scaleup_domain"].astype(np.int64)
    out["scaleup_latency_s"] = t["scaleup_latency_us"] * 1e-6
    out["scaleout"] = t["scaleout"]
    out["scaleout_bandwidth_bytes_per_s"] = t["scaleout_gbit_per_s"] * 1e9 / 8
    out["scaleout_latency_s"] = t["scaleout_latency_us"] * 1e-6
    out["host_link_bandwidth_bytes_per_s"] = t["host_link_gbps_per_dir"] * 1e9
    out["tdp_w"] = t["tdp_w"].astype(float)
    # the generation's parameters, replaced where this system's own kernels were measured and fitted
    per_generation = efficiency_si().reindex(t["generation"]).set_index(out.index)
    from dse.catalog.fitted import fitted_columns
    own = fitted_columns().reindex(columns=per_generation.columns).reindex(out["name"]).set_index(out.index)
    listed = [c for c in own.columns if c in out]  # the system's own catalog value beats a generation's
    own[listed] = own[listed].fillna(out[listed])
    out = pd.concat([out.drop(columns=listed), own.fillna(per_generation).astype(float)], axis=1)
    return out.set_index("name", drop=False)


@lru_cache(maxsize=None)
def efficiency() -> pd.DataFrame:
    """Per-generation parameters of parts without measured kernels (projections with their basis):
    derived accelerators, and catalog systems `dse calibrate` has no kernel tables for."""
    return _read("efficiency_projection.csv").set_index("generation")


@lru_cache(maxsize=None)
def kernel_fits() -> pd.DataFrame:
    """The output of `dse calibrate`: one row per fitted parameter, system, family and precision."""
    return _read("efficiency.csv")


@lru_cache(maxsize=None)
def efficiency_si() -> pd.DataFrame:
    """The per-generation efficiency parameters as model columns: fractions as they are,
    microsecond overheads in seconds (`launch_overhead_us` -> `launch_overhead_s`)."""
    table = efficiency()
    eff = table.drop(columns=["basis", "kernels_like"]).astype(float)
    for col in [c for c in eff.columns if c.endswith("_us")]:
        eff[col[:-3] + "_s"] = eff.pop(col) * 1e-6
    from dse.catalog.fitted import fitted_columns
    # a generation carries over the fitted kernels of the system it names
    carried = fitted_columns().reindex(table["kernels_like"]).set_index(eff.index)
    stated = [c for c in carried.columns if c in eff]  # a projection the file states beats a carried fit
    carried[stated] = eff[stated].fillna(carried[stated])
    return pd.concat([eff.drop(columns=stated), carried], axis=1)


@lru_cache(maxsize=None)
def models() -> pd.DataFrame:
    t = _read("models.csv")
    return t.set_index("name", drop=False)


def resolve_system(name: str) -> str:
    """Catalog name of a system (accepts vendor spellings); ConfigError if unknown."""
    return resolve("system", name, "system")


def resolve_model(name: str) -> str:
    """Catalog name of a model (accepts published spellings); ConfigError if unknown."""
    return resolve("model", name, "model")


def system(name: str) -> pd.Series:
    return systems().loc[resolve_system(name)]


def model(name) -> pd.Series:
    """A catalog model's row, or the model columns of a Hugging Face config (dse.catalog.hfconfig)."""
    from dse.catalog import hfconfig
    if hfconfig.is_config(name):
        return pd.Series(hfconfig.model_columns(name))
    return models().loc[resolve_model(name)]


@lru_cache(maxsize=None)
def frameworks() -> pd.DataFrame:
    """Framework presets (frameworks.csv): software settings per named framework, source and basis."""
    return _read("frameworks.csv").set_index("name", drop=False)


@lru_cache(maxsize=None)
def constants() -> dict[str, float]:
    """Physical and kernel constants (constants.csv), each with its source in the file."""
    t = _read("constants.csv")
    return {str(k): float(v) for k, v in zip(t["name"], t["value"])}


def constant(name: str) -> float:
    return constants()[name]


@lru_cache(maxsize=None)
def assumptions() -> dict[str, float]:
    """Economic defaults and technology-model constants (assumptions.csv), each with its basis."""
    t = _read("assumptions.csv")
    return {str(k): float(v) for k, v in zip(t["name"], t["value"]) if _is_number(v)}


def _is_number(v) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return True


@lru_cache(maxsize=None)
def prices() -> dict[str, float]:
    """price_usd per catalog system (NaN where systems.csv has no sourced price)."""
    t = _read("systems.csv")
    return dict(zip(t["name"].astype(str), t["price_usd"].astype(float)))
