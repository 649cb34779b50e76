"""`dse list systems|models|nodes|memories|networks|packages`: what the catalogs hold."""
from __future__ import annotations

from dse import catalog


def run(args) -> int:
    import pandas as pd
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_rows", 200):
        if args.what == "systems":
            t = catalog.systems()
            cols = ["generation", "peak_bf16_flops_per_s", "peak_fp8_flops_per_s", "memory_capacity_bytes",
                    "memory_bandwidth_bytes_per_s", "scaleup_bandwidth_bytes_per_s", "scaleup_domain",
                    "scaleout_bandwidth_bytes_per_s", "tdp_w"]
            print(t[cols].to_string())
        elif args.what == "models":
            t = catalog.models()
            print(t.drop(columns=["aliases", "source"]).to_string(index=False))
        else:
            import dse.hardware as hw
            t = getattr(hw, args.what)()
            keep = [c for c in t.columns if not any(w in c for w in ("source", "basis", "notes", "aliases"))]
            print(t[keep].to_string(index=False))
    return 0


def register(sub) -> None:
    p = sub.add_parser("list", help="list catalog systems or models")
    p.add_argument("what", choices=["systems", "models", "nodes", "memories", "networks", "packages"])
    p.set_defaults(func=run)
