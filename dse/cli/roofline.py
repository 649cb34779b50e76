"""`dse roofline MODEL --systems a,b,c --batch B --isl I --osl O [--phases prefill,decode,train] [--out DIR]`:
which kernels of prefill, decode (and a training micro-batch of `batch` sequences of the model's
sequence length) are compute-bound and which memory-bound on each system, as a table and a plot."""
from __future__ import annotations

from pathlib import Path

from dse.cli.output import lead
from dse.errors import ConfigError
from dse.optable import roofline_plot


def run(args) -> int:
    import pandas as pd

    from dse.optable import PHASES, op_table

    for name in ("batch", "isl", "osl", "tp"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name}: must be a positive integer, got {getattr(args, name)}")
    phases = tuple(x.strip() for x in args.phases.split(",") if x.strip())
    for ph in phases:
        if ph not in PHASES:
            raise ConfigError(f"--phases: unknown phase '{ph}'; use {', '.join(PHASES)}")
    table = op_table(args.model, args.systems, phases, batch=args.batch, isl=args.isl, osl=args.osl, tp=args.tp,
                     precision=args.precision, kv_precision=args.kv_precision)
    shown = table[["system", "phase", "op", "m", "n", "k", "flops", "bytes", "arithmetic_intensity",
                   "ridge_flops_per_byte", "bound", "time_s"]].copy()
    shown["time_us"] = shown.pop("time_s") * 1e6
    with pd.option_context("display.width", 200, "display.max_rows", 500, "display.float_format", "{:.4g}".format):
        print(f"{args.model}: batch {args.batch}, isl {args.isl}, osl {args.osl}, tp {args.tp}, "
              f"{args.precision} (per layer; decode at the mean KV length isl + osl/2)")
        print(shown.to_string(index=False))
    out = Path(args.out)
    stem = f"roofline_{args.model}_b{args.batch}_i{args.isl}_o{args.osl}".replace("/", "_")
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{stem}.csv", index=False)
    png = roofline_plot(table, out / f"{stem}.png",
                        f"Roofline: {args.model}, batch {args.batch}, isl {args.isl}, osl {args.osl}, "
                        f"TP {args.tp}, {args.precision}")
    print(f"wrote {png}")
    return 0


def register(sub) -> None:
    p = sub.add_parser("roofline", help="compute- vs memory-bound GEMMs of inference per system (table + PNG)",
                       description=lead(__doc__))
    p.add_argument("model", help="catalog model name (see `dse list models`)")
    p.add_argument("--systems", default="a100-80gb,h100-sxm,b200", help="comma-separated catalog systems, see `dse list systems` (default: a100-80gb,h100-sxm,b200)")
    p.add_argument("--batch", type=int, default=1, help="sequences (default: 1)")
    p.add_argument("--isl", type=int, default=2048, help="input (prompt) tokens per sequence (default: 2048)")
    p.add_argument("--osl", type=int, default=128, help="output tokens per sequence (default: 128)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default: 1)")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp8", "fp4"], help="GEMM precision; one of bf16, fp8, fp4 (default: bf16)")
    p.add_argument("--kv-precision", dest="kv_precision", default="bf16", choices=["bf16", "fp8", "fp4"],
                   help="KV-cache precision; one of bf16, fp8, fp4 (default: bf16)")
    p.add_argument("--phases", default="prefill,decode",
                   help="comma-separated phases: prefill, decode, train (a training micro-batch) (default: prefill,decode)")
    p.add_argument("--out", default="results/roofline", help="directory for the PNG and CSV (default: results/roofline)")
    p.set_defaults(func=run)
