"""`dse list systems|models`: what the catalogs hold."""
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
        else:
            t = catalog.models()
            print(t.drop(columns=["aliases", "source"]).to_string(index=False))
    return 0


def register(sub) -> None:
    p = sub.add_parser("list", help="list catalog systems or models")
    p.add_argument("what", choices=["systems", "models"])
    p.set_defaults(func=run)
