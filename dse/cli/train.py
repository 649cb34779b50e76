"""`dse train`: one training design point, its step time, memory and breakdown.

Unlike a batch evaluation (where an impossible split is a row with fits=False), a single
request with an impossible split is refused with one line naming the field to change.
"""
from __future__ import annotations

import json

import numpy as np

from dse.errors import ConfigError

# Options: schema columns (their doc, default and domain make the help text). Absent options take
# the schema default or, for software settings, the framework preset's value.
INPUTS = ("model", "system", "framework", "gpus", "tp", "pp", "cp", "ep", "vp", "global_batch", "micro_batch",
          "seq_len", "recompute", "zero", "precision", "train_tokens")
FLAGS = ("sp", "flash_attention", "dp_overlap", "tp_overlap", "dp_hierarchical")
REQUIRED = ("model", "system", "gpus")
TIME_COLUMNS = ("compute_s", "recompute_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_s",
                "bubble_s", "optimizer_s")
MEMORY_COLUMNS = ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes")


def run(args) -> int:
    import dse
    row = {name: getattr(args, name) for name in INPUTS if getattr(args, name) is not None}
    row.update({flag: getattr(args, flag) == "on" for flag in FLAGS if getattr(args, flag) is not None})
    out = dse.evaluate_training({k: np.array([v]) for k, v in row.items()})
    from dse.schema import REASON_CODE, REASONS
    code = int(out["infeasible_code"][0])
    reason = "" if code == 0 else str(out["infeasible_reason"][0])
    if code not in (0, REASON_CODE["out_of_memory"]):  # an impossible request: name the field to change
        field = reason.split(":")[0] if code == REASON_CODE["domain"] else REASONS[code].field
        raise ConfigError(reason if code == REASON_CODE["domain"] else f"{field}: {reason}")
    if args.json:
        keys = ["step_time_s", "tokens_per_s", "mfu", "hfu", "mem_per_gpu_bytes", "fits", "infeasible_code",
                *TIME_COLUMNS, *MEMORY_COLUMNS, "cost_per_million_tokens_usd", "cost_per_run_usd"]
        print(json.dumps({k: (None if isinstance(v, float) and np.isnan(v) else v)
                          for k, v in ((k, np.asarray(out[k])[0].item()) for k in keys)} | {"infeasible_reason": reason or None}))
        return 0
    print(f"step_time_s        {out['step_time_s'][0]:.4f}")
    print(f"tokens_per_s       {out['tokens_per_s'][0]:,.0f}")
    print(f"mfu                {out['mfu'][0]:.3f}   hfu {out['hfu'][0]:.3f}")
    print(f"mem_per_gpu_bytes  {out['mem_per_gpu_bytes'][0] / 2**30:.2f} GiB   fits {bool(out['fits'][0])}"
          + (f" ({reason})" if reason else ""))
    print("time breakdown (exposed, s): " + ", ".join(f"{c[:-2]} {out[c][0]:.3f}" for c in TIME_COLUMNS))
    print("memory per GPU (GiB): " + ", ".join(f"{c[:-6]} {out[c][0] / 2**30:.2f}" for c in MEMORY_COLUMNS))
    return 0


def option_help(name: str) -> str:
    """The schema's one-line doc, with the default and the allowed values."""
    from dse import schema
    c = schema.columns()[name]
    default = {"": "none", "framework": "the framework preset"}.get(c.default, c.default)
    if c.default.startswith("catalog:"):
        default = "from the catalog"
    allowed = (f"; one of {', '.join(schema.ENUMS[name])}" if name in schema.ENUMS
               else f"; see `dse list {c.domain.split(':')[1]}s`" if c.domain.startswith("catalog:")
               else f"; domain {c.domain}" if c.domain and c.domain != "bool" else "")
    return f"{c.doc} (default: {default}{allowed})"


def register(sub) -> None:
    from dse import schema
    p = sub.add_parser("train", help="evaluate one training design point",
                       description=__doc__.splitlines()[0])
    for name in INPUTS:
        kind = {"int": int, "float": float}.get(schema.columns()[name].dtype, str)
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, default=None,
                       required=name in REQUIRED, help=option_help(name))
    for flag in FLAGS:
        p.add_argument(f"--{flag.replace('_', '-')}", dest=flag, choices=["on", "off"], default=None,
                       help=option_help(flag))
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.set_defaults(func=run)
