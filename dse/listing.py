"""`dse list systems|models|frameworks|columns|reasons|nodes|memories|networks|packages`: what the
catalogs and the column schema hold."""
from __future__ import annotations

from dse import catalog

WHAT = ("systems", "models", "frameworks", "columns", "reasons", "nodes", "memories", "networks", "packages")


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
    if what == "columns":
        return pd.DataFrame([{"name": c.name, "group": c.group, "dtype": c.dtype, "unit": c.unit, "default": c.default,
                              "domain": c.domain, "doc": c.doc} for c in schema.columns().values()])
    if what == "reasons":
        return pd.DataFrame([{"code": r.code, "key": r.key, "field": r.field, "message": r.message}
                             for r in schema.REASONS])
    import dse.hardware as hw
    t = getattr(hw, what)()
    return t[[c for c in t.columns if not any(w in c for w in ("source", "basis", "notes", "aliases"))]]
