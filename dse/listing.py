"""`dse list systems|models|frameworks|precisions|columns|reasons|assumptions|nodes|memories|networks|packages`:
what the catalogs and the column schema hold; `precisions` are the number formats with their vendor
spellings (dse/catalog/precisions.csv). `assumptions` are the economic defaults behind every
dollar figure (electricity price, PUE, lifetime, margin, host and network cost, ...) and the
technology model's constants, each with its basis (dse/catalog/assumptions.csv)."""
from __future__ import annotations

from dse import catalog

WHAT = ("systems", "models", "frameworks", "precisions", "columns", "reasons", "assumptions", "nodes", "memories", "networks",
        "packages")
# The columns a text listing shows where the whole table is too wide to read (`--json` has them all).
TEXT_COLUMNS = {"models": ("name", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn_hidden", "vocab",
                           "seq_len", "experts", "top_k", "shared_experts", "moe_ffn_hidden", "sliding_window",
                           "kv_lora_rank", "mamba_layer_fraction", "linear_attention_layer_fraction")}
# What each kind of assumption feeds, by the schema group of the column it is the default of.
ASSUMPTION_USE = {"economics": "cost per run and per Mtoken (capex amortisation, energy)",
                  "technology": "price of a technology-derived accelerator"}
OTHER_ASSUMPTION_USE = "technology model constant"


def table(what: str):
    """The listing as a DataFrame (sources and long notes left to the CSV files)."""
    import pandas as pd
    from dse import schema
    if what == "systems":
        return catalog.systems()[["generation", "peak_bf16_flops_per_s", "peak_fp8_flops_per_s", "memory_capacity_bytes",
                                  "memory_bandwidth_bytes_per_s", "scaleup_bandwidth_bytes_per_s", "scaleup_domain",
                                  "scaleout_bandwidth_bytes_per_s", "tdp_w"]]
    if what == "models":
        return catalog.models().drop(columns=["aliases", "source"]).reset_index(drop=True)
    if what == "frameworks":
        return catalog.frameworks().drop(columns=["aliases", "source", "basis"]).reset_index(drop=True).astype(object).fillna("")
    if what == "precisions":
        t = catalog._read("precisions.csv").drop(columns=["source"]).fillna("")
        return t[[c for c in t.columns if c != "aliases"] + ["aliases"]]   # the long spellings last
    if what == "columns":
        return pd.DataFrame([{"name": c.name, "group": c.group, "dtype": c.dtype, "unit": c.unit, "default": c.default,
                              "domain": c.domain, "doc": c.doc} for c in schema.columns().values()])
    if what == "reasons":
        return pd.DataFrame([{"code": r.code, "key": r.key, "field": r.field, "message": r.message}
                             for r in schema.REASONS])
    if what == "assumptions":
        return assumptions_table()
    import dse.hardware as hw
    t = getattr(hw, what)()
    return t[[c for c in t.columns if not any(w in c for w in ("source", "basis", "notes", "aliases"))]]


def assumptions_table():
    """assumptions.csv with what each number feeds: economic defaults first, then the accelerator
    price model's, then the technology model's constants."""
    from importlib import resources

    import pandas as pd

    from dse import schema
    with resources.files("dse.catalog").joinpath("assumptions.csv").open("r") as fh:
        t = pd.read_csv(fh)
    cols = schema.columns()
    group = [cols[n].group if n in cols and cols[n].group in ASSUMPTION_USE else "" for n in t["name"]]
    t.insert(3, "used_for", [ASSUMPTION_USE.get(g, OTHER_ASSUMPTION_USE) for g in group])
    order = sorted(range(len(t)), key=lambda i: (list(ASSUMPTION_USE).index(group[i]) if group[i] else 2, i))
    return t.iloc[order].reset_index(drop=True)
